package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/democratic-csi/proxy-topology/pkg/connection"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// Sentinel errors of SecretSource.
var (
	// ErrNotSynced: the informer has not listed the Secret yet, so nothing
	// can be said about its keys (not even that one is missing).
	ErrNotSynced = errors.New("connections secret is not synced yet")
	// ErrNoSecret: the Secret does not exist. Stat wraps fs.ErrNotExist
	// too, so a missing Secret reads as missing connections.
	ErrNoSecret = errors.New("connections secret does not exist")
)

// ParseSecretRef splits "<namespace>/<name>".
func ParseSecretRef(ref string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(ref, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%q: want <namespace>/<name>", ref)
	}
	return namespace, name, nil
}

// SecretSource serves connection files from the keys <connection>.yaml of
// one Secret, kept current by an informer on that single object, so a
// `kubectl apply` of the Secret reaches the store within a second or two
// instead of after kubelet's next remount of a Secret volume (up to a
// minute or more).
//
// Its methods are those of connection.Source: Stat, Read, List, Describe.
type SecretSource struct {
	namespace, name string
	log             *slog.Logger
	informer        cache.SharedIndexInformer
	// handler reports when this source's handler has seen the first list
	// (the informer's own HasSynced may run ahead of its handlers).
	handler cache.ResourceEventHandlerRegistration

	// snap is the current *snapshot; nil until the first list.
	snap   atomic.Pointer[snapshot]
	synced atomic.Bool

	startOnce sync.Once
	// onChange, if set, is called after every applied update (OnChange).
	onChange func()
}

// snapshot is one version of the Secret, immutable once published.
type snapshot struct {
	exists          bool
	resourceVersion string
	data            map[string][]byte
	// versions maps key to a hash of its value: a key keeps its version
	// when another key of the Secret changes, so the store re-reads only
	// the connection that changed.
	versions map[string]connection.Version
}

// NewSecretSource returns a source for Secret namespace/name. client is a
// *Client (or a fake); nothing is read until Start.
func NewSecretSource(client SecretWatcher, namespace, name string, log *slog.Logger) *SecretSource {
	if log == nil {
		log = slog.Default()
	}
	s := &SecretSource{namespace: namespace, name: name, log: log}
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.ListSecrets(ctx, namespace, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return client.WatchSecrets(ctx, namespace, o)
		},
	}
	// The wrapper lets a client that cannot stream lists (the fakes) say
	// so; the reflector then uses plain LIST+WATCH.
	s.informer = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Secret{}, 0, cache.Indexers{})
	// AddEventHandler fails only on a stopped informer; this one has not
	// started.
	s.handler, _ = s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.apply(obj) },
		UpdateFunc: func(_, obj any) { s.apply(obj) },
		DeleteFunc: func(any) { s.deleted() },
	})
	return s
}

// String names the Secret.
func (s *SecretSource) String() string { return "secret " + s.namespace + "/" + s.name }

// OnChange makes f be called after every update of the Secret the source
// applies (keys added, changed or removed, the Secret deleted); f must not
// block. The proxy asks for a capability refresh with it, so a connection
// added to the Secret is asked about within seconds. Call it before Start.
func (s *SecretSource) OnChange(f func()) { s.onChange = f }

// Start runs the informer until ctx ends. It returns at once; call
// WaitForSync before serving.
func (s *SecretSource) Start(ctx context.Context) {
	s.startOnce.Do(func() { go s.informer.RunWithContext(ctx) })
}

// WaitForSync blocks until the first list of the Secret is in (it may
// report that the Secret does not exist) or ctx ends. A missing Secret is
// not an error here: connections then fail as missing until it is created.
func (s *SecretSource) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.handler.HasSynced) {
		return fmt.Errorf("%w: %s: %w", ErrNotSynced, s, context.Cause(ctx))
	}
	// An empty first list produces no event; mark the Secret as absent.
	if s.snap.Load() == nil {
		s.snap.CompareAndSwap(nil, &snapshot{})
	}
	s.synced.Store(true)
	if !s.snap.Load().exists {
		s.log.Warn("connections secret does not exist yet; every connection is missing until it is created", "secret", s.namespace+"/"+s.name)
	}
	return nil
}

func (s *SecretSource) apply(obj any) {
	sec, ok := obj.(*corev1.Secret)
	// The field selector already limits the watch to one object; a client
	// that ignores it (the fakes do) must not leak other Secrets in.
	if !ok || sec.Name != s.name || sec.Namespace != s.namespace {
		return
	}
	snap := &snapshot{
		exists:          true,
		resourceVersion: sec.ResourceVersion,
		data:            make(map[string][]byte, len(sec.Data)+len(sec.StringData)),
		versions:        make(map[string]connection.Version, len(sec.Data)+len(sec.StringData)),
	}
	for k, v := range sec.Data {
		snap.data[k] = v
	}
	// StringData is write-only on a real API server; fakes keep it as is.
	for k, v := range sec.StringData {
		snap.data[k] = []byte(v)
	}
	for k, v := range snap.data {
		sum := sha256.Sum256(v)
		snap.versions[k] = connection.Version{Key: hex.EncodeToString(sum[:12])}
	}
	prev := s.snap.Swap(snap)
	s.logChanges(prev, snap)
	if s.onChange != nil {
		s.onChange()
	}
}

func (s *SecretSource) deleted() {
	prev := s.snap.Swap(&snapshot{})
	if prev != nil && prev.exists {
		s.log.Warn("connections secret was deleted; every connection is missing until it is created again", "secret", s.namespace+"/"+s.name)
	}
	if s.onChange != nil {
		s.onChange()
	}
}

func (s *SecretSource) logChanges(prev, cur *snapshot) {
	var changed []string
	for k, v := range cur.versions {
		if prev == nil || prev.versions[k] != v {
			changed = append(changed, k)
		}
	}
	var removed []string
	if prev != nil {
		for k := range prev.versions {
			if _, ok := cur.versions[k]; !ok {
				removed = append(removed, k)
			}
		}
	}
	if len(changed)+len(removed) == 0 {
		return
	}
	sort.Strings(changed)
	sort.Strings(removed)
	s.log.Info("connections secret updated", "secret", s.namespace+"/"+s.name, "resource_version", cur.resourceVersion,
		"changed", strings.Join(changed, ","), "removed", strings.Join(removed, ","))
}

// current returns the snapshot, or ErrNotSynced.
func (s *SecretSource) current() (*snapshot, error) {
	snap := s.snap.Load()
	if snap == nil || !s.synced.Load() {
		return nil, fmt.Errorf("%w: %s", ErrNotSynced, s)
	}
	return snap, nil
}

func key(name string) string { return name + ".yaml" }

// Describe names a connection's key in messages.
func (s *SecretSource) Describe(name string) string {
	return "secret " + s.namespace + "/" + s.name + " key " + key(name)
}

// Stat returns the version of key <name>.yaml: a hash of its value, so it
// changes exactly when the value does (the time of the call plays no
// part). The error wraps fs.ErrNotExist when the key (or the whole Secret)
// is absent.
func (s *SecretSource) Stat(name string, _ time.Time) (connection.Version, error) {
	snap, err := s.current()
	if err != nil {
		return connection.Version{}, err
	}
	if !snap.exists {
		return connection.Version{}, fmt.Errorf("%s: %w: %w", s.Describe(name), ErrNoSecret, fs.ErrNotExist)
	}
	v, ok := snap.versions[key(name)]
	if !ok {
		return connection.Version{}, fmt.Errorf("%s: %w", s.Describe(name), fs.ErrNotExist)
	}
	return v, nil
}

// Read returns a copy of the value of key <name>.yaml.
func (s *SecretSource) Read(name string) ([]byte, error) {
	snap, err := s.current()
	if err != nil {
		return nil, err
	}
	if !snap.exists {
		return nil, fmt.Errorf("%s: %w: %w", s.Describe(name), ErrNoSecret, fs.ErrNotExist)
	}
	v, ok := snap.data[key(name)]
	if !ok {
		return nil, fmt.Errorf("%s: %w", s.Describe(name), fs.ErrNotExist)
	}
	return append([]byte(nil), v...), nil
}

// List returns the connection names of the keys ending in .yaml, sorted;
// keys that are not valid connection names are left out. A missing Secret
// lists nothing.
func (s *SecretSource) List() ([]string, error) {
	snap, err := s.current()
	if err != nil {
		return nil, err
	}
	var names []string
	for k := range snap.data {
		n, ok := strings.CutSuffix(k, ".yaml")
		if ok && ids.ValidateConnectionName(n) == nil {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}

// ResourceVersion is the resourceVersion of the Secret last seen, "" when
// it does not exist or is not synced.
func (s *SecretSource) ResourceVersion() string {
	if snap := s.snap.Load(); snap != nil {
		return snap.resourceVersion
	}
	return ""
}

// syncTimeout bounds WaitForSync in StartSecretSource.
const syncTimeout = 30 * time.Second

// StartSecretSource starts src and waits (at most 30s) for its first list.
func StartSecretSource(ctx context.Context, src *SecretSource) error {
	src.Start(ctx)
	wctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if err := src.WaitForSync(wctx); err != nil {
		return fmt.Errorf("%w (RBAC: the ServiceAccount needs get, list and watch on this Secret, e.g. a Role with resourceNames)", err)
	}
	return nil
}
