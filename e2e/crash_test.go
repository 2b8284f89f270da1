package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// TestCrashMidStorm kills the proxy (kill -9) while 16 callers run
// CreateVolume, CreateSnapshot and DeleteVolume against the built-in
// local-hostpath driver, restarts it on the same base path and checks what
// survived, at several kill points, one after the other on the same
// storage:
//
//   - every call that returned OK is reflected: a created volume is listed
//     with its capacity, and its record on disk holds its parameters; a
//     snapshot is listed; a deleted volume is gone;
//   - CreateVolume retried with the same name returns the same volume;
//   - nothing half-created is visible: every volume directory has a record
//     (an empty volume's directory is made at first use), snapshot data
//     and records match one to one, no temporary record is left, and the
//     killed process's work area is purged;
//   - kills land inside a snapshot's create, inside the journal's
//     compactions (their logs are made small) and between appends and
//     their syncs; the recovery says it found what they left;
//   - the calls that never returned are finished by their retry: the
//     create is adopted (one volume, the name's), the snapshot made, the
//     delete done.
//
// A kill -9 keeps the page cache, so this proves the order of the steps
// on disk and the recovery, not durability across a power loss; that is
// the rename/sync order proved in pkg/hostpath/durability_test.go
// (docs/reliability.md §10).
func TestCrashMidStorm(t *testing.T) {
	dir := newTestDir(t)
	base := filepath.Join(dir, "storage")
	connDir := filepath.Join(dir, "connections")
	testkit.WriteFile(t, filepath.Join(connDir, "crash.yaml"), "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: "+base+"\n", 0o640)
	cfg := filepath.Join(dir, "config", "proxy.yaml")
	testkit.WriteFile(t, cfg, fmt.Sprintf("driver: proxy\nproxy:\n  configFolder: %s\n", connDir), 0o640)
	spec := processSpec{name: "proxy", mode: "controller", nodeID: "node-1", config: cfg}

	m := newCrashModel()
	// Kill points: after a few calls returned, after many, and at a random
	// moment of a longer storm.
	// The gaps between a create's two renames and a delete's two steps
	// are microseconds wide; the driver's test windows widen them (see
	// pkg/hostpath/testwindow.go) in the rounds that must hit them.
	kills := []struct {
		what    string
		after   int           // OK'd calls before the kill; 0 = use wait
		wait    time.Duration // time before the kill
		windows string
		// compactAt: the journal's logs are compacted at this size, so
		// that the storm compacts many times.
		compactAt string
		// leftovers: the line the recovery after the kill must log: it
		// found what the kill was meant to leave and cleaned it up.
		leftovers string
	}{
		{what: "after 10 calls", after: 10},
		{what: "after 150 calls, snapshot creates paused between data and record", after: 150, windows: "data-placed=40ms", leftovers: "recovery: removing data without a record"},
		{what: "after 150 calls, compactions paused between their steps", after: 150, windows: "compaction-written=30ms,compaction-synced=30ms", compactAt: "4096", leftovers: "recovery: finishing a compaction its writer did not finish"},
		{what: "at a random moment, appends paused before their sync", wait: killDelay(t), windows: "journal-appended=2ms", compactAt: "16384"},
	}
	for round, k := range kills {
		spec := spec
		if k.windows != "" {
			spec.env = append(spec.env, "PROXY_TOPOLOGY_TEST_HOSTPATH_WINDOWS="+k.windows)
		}
		if k.compactAt != "" {
			spec.env = append(spec.env, "PROXY_TOPOLOGY_TEST_HOSTPATH_COMPACT_AT="+k.compactAt)
		}
		p := startProcess(t, dir, spec)
		if round > 0 {
			m.verify(t, p, base, fmt.Sprintf("restart %d", round))
		}
		// The storm has a connection of its own: kill closes p.conn, and
		// the calls must fail because the process died, not because
		// their client went away.
		conn, err := grpc.NewClient("unix://"+p.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctrl := csi.NewControllerClient(conn)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		begin := time.Now()
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.storm(ctrl, round, w, stop)
			}()
		}
		start := m.oks.Load()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if k.after > 0 && m.oks.Load()-start >= int64(k.after) {
				break
			}
			if k.wait > 0 && time.Since(begin) >= k.wait {
				break
			}
			time.Sleep(time.Millisecond)
		}
		inFlight := m.inFlight.Load()
		p.kill(t)
		close(stop)
		wg.Wait()
		conn.Close()
		t.Logf("kill %d (%s): %d calls returned OK in all, %d in flight at the kill, %d unanswered calls to retry",
			round+1, k.what, m.oks.Load(), inFlight, len(m.unanswered))
		m.wantLeftovers = k.leftovers
		for _, f := range m.failures {
			t.Errorf("kill %d: a call failed, not for the kill: %s", round+1, f)
		}
		m.failures = nil
		if inFlight == 0 {
			t.Errorf("kill %d: no call was in flight; the kill proved nothing", round+1)
		}
		// Keep the killed process's log for the race scan of its cleanup.
		killed := p.logPath + fmt.Sprintf(".killed-%d", round+1)
		if err := os.Rename(p.logPath, killed); err != nil {
			t.Fatal(err)
		}
		p.logPath = killed
	}
	p := startProcess(t, dir, spec)
	m.verify(t, p, base, "final restart")
	// Clean up through the driver: everything goes.
	ctrl := csi.NewControllerClient(p.conn)
	for id := range m.snaps {
		if _, err := ctrl.DeleteSnapshot(callCtx(t), &csi.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
			t.Errorf("DeleteSnapshot %s: %v", id, err)
		}
	}
	for _, v := range m.volumes {
		if _, err := ctrl.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
			t.Errorf("DeleteVolume %s: %v", v.id, err)
		}
	}
	for _, sub := range []string{"volumes", "snapshots", "meta/snapshots", "meta/made"} {
		if n := entries(t, filepath.Join(base, sub)); n != 0 {
			t.Errorf("%d entries left in %s after deleting everything", n, sub)
		}
	}
	if vols, err := hostpath.VolumesAt(base); err != nil || len(vols) != 0 {
		t.Errorf("volumes recorded after deleting everything: %v, %v", vols, err)
	}
}

// crashModel is what the callers were told: the calls that returned OK
// and the ones that never returned.
type crashModel struct {
	mu sync.Mutex
	// volumes by name: created (OK) and not deleted (OK).
	volumes map[string]crashVolume
	// deleted are volume ids whose DeleteVolume returned OK.
	deleted map[string]bool
	// snaps maps snapshot id to its source volume id.
	snaps map[string]string
	// unanswered are calls that got no answer (the kill), to retry.
	unanswered []crashCall
	// failures are errors other than the kill's UNAVAILABLE.
	failures []string
	// wantLeftovers: the line the recovery after the last kill must log.
	wantLeftovers string

	oks      atomic.Int64
	inFlight atomic.Int64
}

type crashVolume struct {
	id       string
	capacity int64
	tag      string
}

type crashCall struct {
	op   string // create, snapshot, delete
	name string // create, snapshot
	cap  int64  // create
	tag  string // create
	id   string // snapshot: source; delete: volume
}

func newCrashModel() *crashModel {
	return &crashModel{volumes: map[string]crashVolume{}, deleted: map[string]bool{}, snaps: map[string]string{}}
}

func createCrashRequest(name string, capacity int64, tag string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: capacity},
		VolumeCapabilities: []*csi.VolumeCapability{mountCapability()},
		Parameters:         map[string]string{"connection": "crash", "crash-tag": tag},
	}
}

// storm runs one caller: create a volume, then maybe snapshot it, then
// maybe delete it, until stop. A call that fails because the proxy died is
// unanswered; any other failure is a bug (the storm has no conflicts).
func (m *crashModel) storm(ctrl csi.ControllerClient, round, w int, stop chan struct{}) {
	rnd := rand.New(rand.NewPCG(uint64(round), uint64(w)))
	call := func(c crashCall, fn func(ctx context.Context) error) bool {
		m.inFlight.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		err := fn(ctx)
		cancel()
		m.inFlight.Add(-1)
		if err != nil {
			m.mu.Lock()
			// A call cut off by the kill fails UNAVAILABLE; anything else
			// is a failure of its own, which the storm never provokes.
			if status.Code(err) != codes.Unavailable {
				m.failures = append(m.failures, fmt.Sprintf("%s %s%s: %v", c.op, c.name, c.id, err))
			}
			m.unanswered = append(m.unanswered, c)
			m.mu.Unlock()
			return false
		}
		m.oks.Add(1)
		return true
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		name := fmt.Sprintf("crash-%d-%02d-%04d", round, w, i)
		capacity := int64(1+rnd.IntN(64)) << 20
		tag := fmt.Sprintf("tag-%d", rnd.Uint32())
		var id string
		ok := call(crashCall{op: "create", name: name, cap: capacity, tag: tag}, func(ctx context.Context) error {
			resp, err := ctrl.CreateVolume(ctx, createCrashRequest(name, capacity, tag))
			id = resp.GetVolume().GetVolumeId()
			if err == nil && resp.GetVolume().GetCapacityBytes() != capacity {
				err = fmt.Errorf("CreateVolume %s: capacity %d, asked %d", name, resp.GetVolume().GetCapacityBytes(), capacity)
			}
			return err
		})
		if !ok {
			return // the proxy is gone
		}
		m.mu.Lock()
		m.volumes[name] = crashVolume{id: id, capacity: capacity, tag: tag}
		m.mu.Unlock()
		if rnd.IntN(3) == 0 {
			snapName := "snap-" + name
			var snapID string
			ok := call(crashCall{op: "snapshot", name: snapName, id: id}, func(ctx context.Context) error {
				resp, err := ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: snapName, SourceVolumeId: id})
				snapID = resp.GetSnapshot().GetSnapshotId()
				return err
			})
			if !ok {
				return
			}
			m.mu.Lock()
			m.snaps[snapID] = id
			m.mu.Unlock()
		}
		if rnd.IntN(2) == 0 {
			ok := call(crashCall{op: "delete", id: id}, func(ctx context.Context) error {
				_, err := ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
				return err
			})
			if !ok {
				return
			}
			m.mu.Lock()
			delete(m.volumes, name)
			m.deleted[id] = true
			m.mu.Unlock()
		}
	}
}

// verify checks the storage after a restart, retries the unanswered calls
// and checks again.
func (m *crashModel) verify(t *testing.T, p *process, base, when string) {
	t.Helper()
	ctrl := csi.NewControllerClient(p.conn)
	// The built-in driver starts (and recovers) on the connection's first
	// call.
	listed := testkit.Volumes(testkit.ListAllVolumes(callCtx(t), t, ctrl, 0))
	log, _ := os.ReadFile(p.logPath)
	removed := strings.Count(string(log), "recovery: removing data without a record")
	leftovers := 0
	if m.wantLeftovers != "" {
		leftovers = strings.Count(string(log), m.wantLeftovers)
	}
	m.checkState(t, ctrl, base, listed, when)

	// Retry what never returned: the create adopts its leftovers (one
	// volume), the snapshot is made, the delete done.
	m.mu.Lock()
	unanswered := m.unanswered
	m.unanswered = nil
	m.mu.Unlock()
	for _, c := range unanswered {
		switch c.op {
		case "create":
			resp, err := ctrl.CreateVolume(callCtx(t), createCrashRequest(c.name, c.cap, c.tag))
			if err != nil {
				t.Errorf("%s: retried CreateVolume %s: %v", when, c.name, err)
				continue
			}
			m.volumes[c.name] = crashVolume{id: resp.GetVolume().GetVolumeId(), capacity: c.cap, tag: c.tag}
		case "snapshot":
			if m.deleted[c.id] {
				continue
			}
			resp, err := ctrl.CreateSnapshot(callCtx(t), &csi.CreateSnapshotRequest{Name: c.name, SourceVolumeId: c.id})
			if err != nil {
				t.Errorf("%s: retried CreateSnapshot %s: %v", when, c.name, err)
				continue
			}
			m.snaps[resp.GetSnapshot().GetSnapshotId()] = c.id
		case "delete":
			if _, err := ctrl.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: c.id}); err != nil {
				t.Errorf("%s: retried DeleteVolume %s: %v", when, c.id, err)
				continue
			}
			for name, v := range m.volumes {
				if v.id == c.id {
					delete(m.volumes, name)
				}
			}
			m.deleted[c.id] = true
		}
	}
	m.checkState(t, ctrl, base, testkit.Volumes(testkit.ListAllVolumes(callCtx(t), t, ctrl, 0)), when+", after the retries")
	t.Logf("%s: %d volumes, %d snapshots, %d deleted; %d unanswered calls retried; the driver's recovery removed %d leftovers (data without a record) and purged %d work areas",
		when, len(m.volumes), len(m.snaps), len(m.deleted), len(unanswered), removed,
		strings.Count(string(log), "removed work left by a previous run"))
	if m.wantLeftovers != "" && leftovers == 0 {
		t.Errorf("%s: the kill was meant to land between two steps, but the recovery did not log %q", when, m.wantLeftovers)
	}
}

// checkState compares the driver's listing and the disk with the model.
func (m *crashModel) checkState(t *testing.T, ctrl csi.ControllerClient, base string, listed map[string]*csi.Volume, when string) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	// A delete that never returned may have been done: before its retry,
	// the volume may be gone.
	deleting := map[string]bool{}
	for _, c := range m.unanswered {
		if c.op == "delete" {
			deleting[c.id] = true
		}
	}
	for name, v := range m.volumes {
		got, ok := listed[v.id]
		if !ok && deleting[v.id] {
			continue
		}
		if !ok {
			t.Errorf("%s: volume %s (%s) returned OK but is not listed", when, name, v.id)
			continue
		}
		if got.GetCapacityBytes() != v.capacity {
			t.Errorf("%s: volume %s has %d bytes, created with %d", when, name, got.GetCapacityBytes(), v.capacity)
		}
		var rec struct {
			Name       string            `json:"name"`
			Parameters map[string]string `json:"parameters"`
		}
		err := readRecord(base, "volumes", v.id, &rec)
		if err != nil || rec.Name != name || rec.Parameters["crash-tag"] != v.tag {
			t.Errorf("%s: record of %s: name %q, parameters %v, %v; want the tag %s", when, name, rec.Name, rec.Parameters, err, v.tag)
		}
		// Retried with the same name: the same volume.
		resp, err := ctrl.CreateVolume(callCtx(t), createCrashRequest(name, v.capacity, v.tag))
		if err != nil || resp.GetVolume().GetVolumeId() != v.id {
			t.Errorf("%s: CreateVolume %s again = %q, %v; want %s", when, name, resp.GetVolume().GetVolumeId(), err, v.id)
		}
	}
	for id := range m.deleted {
		if _, ok := listed[id]; ok {
			t.Errorf("%s: volume %s was deleted (OK) but is listed", when, id)
		}
	}
	for id := range m.snaps {
		resp, err := ctrl.ListSnapshots(callCtx(t), &csi.ListSnapshotsRequest{SnapshotId: id})
		if err != nil || len(resp.GetEntries()) != 1 || !resp.GetEntries()[0].GetSnapshot().GetReadyToUse() {
			t.Errorf("%s: snapshot %s returned OK but ListSnapshots = %v, %v", when, id, resp.GetEntries(), err)
		}
	}
	// Nothing half-created: no volume directory without a record (an
	// empty volume's directory is made at first use, so a record without
	// one is normal); snapshot data and records match one to one; no
	// temporary record is left.
	vols, err := hostpath.VolumesAt(base)
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	for _, e := range readDir(t, filepath.Join(base, "volumes")) {
		if _, ok := vols[e]; !ok {
			t.Errorf("%s: volume directory %s without a record (half-created or half-deleted, visible on disk)", when, e)
		}
	}
	for _, e := range readDir(t, filepath.Join(base, "meta", "volumes")) {
		if strings.HasPrefix(e, ".") {
			t.Errorf("%s: %s left in meta/volumes", when, e)
		}
	}
	for _, kind := range []string{"snapshots"} {
		dirs := map[string]bool{}
		for _, e := range readDir(t, filepath.Join(base, kind)) {
			dirs[e] = true
		}
		for _, e := range readDir(t, filepath.Join(base, "meta", kind)) {
			id, ok := strings.CutSuffix(e, ".json")
			if !ok || strings.HasPrefix(e, ".") {
				t.Errorf("%s: %s left in meta/%s", when, e, kind)
				continue
			}
			if !dirs[id] {
				t.Errorf("%s: record of %s %s without its data", when, kind, id)
			}
			delete(dirs, id)
		}
		for id := range dirs {
			t.Errorf("%s: %s %s without a record (half-created or half-deleted, visible on disk)", when, kind, id)
		}
	}
	// The listing holds nothing the callers were not told about, except
	// what a create still unanswered (retried next) may have made: its
	// record must name that create's volume (with its tag) or snapshot
	// (of its source volume).
	known := map[string]bool{}
	for _, v := range m.volumes {
		known[v.id] = true
	}
	pending := map[string]crashCall{}
	for _, c := range m.unanswered {
		if c.op == "create" || c.op == "snapshot" {
			pending[c.op+" "+c.name] = c
		}
	}
	unansweredVols, unansweredSnaps := 0, 0
	for id := range listed {
		if known[id] || m.deleted[id] {
			continue
		}
		unansweredVols++
		var rec struct {
			Name       string            `json:"name"`
			Parameters map[string]string `json:"parameters"`
		}
		err := readRecord(base, "volumes", id, &rec)
		c, ok := pending["create "+rec.Name]
		if err != nil || !ok || rec.Parameters["crash-tag"] != c.tag {
			t.Errorf("%s: volume %s is listed but no call created it (record: name %q, parameters %v, %v; unanswered creates: %d)", when, id, rec.Name, rec.Parameters, err, len(pending))
		}
	}
	for _, snap := range listAllSnapshots(t, ctrl) {
		id := snap.GetSnapshotId()
		if _, ok := m.snaps[id]; ok {
			continue
		}
		unansweredSnaps++
		var rec struct {
			Name string `json:"name"`
		}
		err := readRecord(base, "snapshots", id, &rec)
		c, ok := pending["snapshot "+rec.Name]
		if err != nil || !ok || snap.GetSourceVolumeId() != c.id {
			t.Errorf("%s: snapshot %s (of %s) is listed but no call created it (record: name %q, %v)", when, id, snap.GetSourceVolumeId(), rec.Name, err)
		}
	}
	if unansweredVols+unansweredSnaps > 0 {
		t.Logf("%s: %d volumes and %d snapshots listed that only unanswered calls made", when, unansweredVols, unansweredSnaps)
	}
	// Only the running driver's work area is in tmp: the killed one's was
	// purged.
	var work []string
	for _, e := range readDir(t, filepath.Join(base, "tmp")) {
		if !strings.HasSuffix(e, ".lock") {
			work = append(work, e)
		}
	}
	if len(work) != 1 {
		t.Errorf("%s: tmp holds %v, want only the running driver's work area", when, work)
	}
}

// killDelay is how long the random kill waits: PROXY_TOPOLOGY_CRASH_KILL_DELAY
// (a duration) to repeat a run whose log gave it, else 300–1000 ms.
func killDelay(t *testing.T) time.Duration {
	const env = "PROXY_TOPOLOGY_CRASH_KILL_DELAY"
	d := time.Duration(300+rand.IntN(700)) * time.Millisecond
	if v := os.Getenv(env); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("%s=%q: %v", env, v, err)
		}
	}
	t.Logf("the random kill waits %v (repeat it with %s=%v)", d, env, d)
	return d
}

// readRecord reads the record of a volume or snapshot (kind) of the crash
// connection by its proxy id.
func readRecord(base, kind, id string, rec any) error {
	handle := hostpath.VolumeDir(id[strings.IndexByte(id, '/')+1:])
	if kind == "volumes" {
		// Volumes are recorded in the records folder and the journal.
		vols, err := hostpath.VolumesAt(base)
		if err != nil {
			return err
		}
		v, ok := vols[handle]
		if !ok {
			return fmt.Errorf("volume %s: %w", handle, os.ErrNotExist)
		}
		data, _ := json.Marshal(map[string]any{"name": v.Name, "parameters": v.Parameters})
		return json.Unmarshal(data, rec)
	}
	data, err := os.ReadFile(filepath.Join(base, "meta", kind, handle+".json"))
	if err != nil {
		return err
	}
	return json.Unmarshal(data, rec)
}

func listAllSnapshots(t *testing.T, ctrl csi.ControllerClient) []*csi.Snapshot {
	t.Helper()
	var out []*csi.Snapshot
	token := ""
	for {
		resp, err := ctrl.ListSnapshots(callCtx(t), &csi.ListSnapshotsRequest{StartingToken: token})
		if err != nil {
			t.Fatalf("ListSnapshots: %v", err)
		}
		for _, e := range resp.GetEntries() {
			out = append(out, e.GetSnapshot())
		}
		if token = resp.GetNextToken(); token == "" {
			return out
		}
	}
}

func readDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names
}
