// Package sanitytest runs the csi-test v5 sanity suite (csi-sanity) against
// the drivers this repository builds, from plain `go test`.
package sanitytest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
)

// SkipSpec removes sanity specs from a run on purpose. Every skip must say
// why, and the reason is printed with the results.
type SkipSpec struct {
	// Spec is a part of the spec's full text ("Controller Service
	// [Controller Server] ControllerPublishVolume should fail when the node
	// does not exist"); it is matched literally, not as a regexp.
	Spec string
	// Reason is why the target cannot or should not pass that spec.
	Reason string
}

const (
	// childTargetEnv tells a re-executed test binary which target's suite
	// to run; childReportEnv where to write the result.
	childTargetEnv = "PROXY_TOPOLOGY_SANITY_TARGET"
	childReportEnv = "PROXY_TOPOLOGY_SANITY_REPORT"

	// childTimeout bounds one target's suite.
	childTimeout = 5 * time.Minute
)

// sanityResult is what the child process hands back to the parent.
type sanityResult struct {
	Passed, Failed, Skipped int
	// SkipReasons maps a skipped spec's text to why it was skipped (the
	// Skip() message of the spec, or the SkipSpec reason).
	SkipReasons map[string]string
	// Failures maps a failed spec's text to its failure message.
	Failures map[string]string
	// States maps every spec's text to "passed", "failed" or "skipped",
	// so that two runs can be compared spec by spec.
	States map[string]string
}

// inSanityChild reports whether this process is the child that runs the
// suite of target. runSanity returns before using its config in the parent,
// so a target whose setup is expensive (starting processes) can skip it:
//
//	if !inSanityChild("my-target") {
//		runSanity(t, "my-target", sanity.TestConfig{})
//		return
//	}
func inSanityChild(target string) bool {
	return os.Getenv(childTargetEnv) == target
}

// runSanity runs the csi-test v5 sanity suite against one target and ends by
// printing exactly one line:
//
//	sanity <target>: N passed, M failed, K skipped
//
// Parameters:
//   - t: the test (or subtest) that owns the target. Failed specs fail t;
//     skipped specs and their reasons are logged.
//   - target: a short name for the driver under test (used in the summary
//     and to pick the child's target); unique within the package.
//   - cfg: the suite configuration, normally sanity.NewTestConfig() with
//     Address (the driver's endpoint, e.g. "unix:///tmp/x/csi.sock"),
//     TargetPath and StagingPath (paths that do not exist yet, in a
//     t.TempDir(); csi-sanity creates and removes them) and whatever test
//     sizes or IDGen the driver needs. The driver must be serving when
//     runSanity is called.
//   - skips: specs deliberately not run, each with its reason.
//
// Ginkgo runs one suite per process and cannot run it twice, so runSanity
// re-executes the test binary limited to t (-test.run) with the target in
// the environment; in that child, the same test sets up its driver again
// and runSanity runs the suite in-process. Targets therefore cannot share a
// process, may call t.Parallel(), and the setup before runSanity runs in
// both processes (see inSanityChild to avoid that). A test that skips
// before reaching runSanity in the child makes the target skipped.
func runSanity(t *testing.T, target string, cfg sanity.TestConfig, skips ...SkipSpec) {
	t.Helper()
	switch os.Getenv(childTargetEnv) {
	case "":
		runSanityParent(t, target, true)
	case target:
		runSanityChild(t, target, cfg, skips)
	default:
		t.Skipf("this process runs the sanity suite of %q only", os.Getenv(childTargetEnv))
	}
}

// sanityResults is runSanity for a target whose own failures are expected
// and judged by the caller (the conformance matrix): failed specs are
// logged, not failures of t, no summary line is printed, and the parent
// gets the result. It returns nil in the child, and when the child test
// skipped before running the suite.
func sanityResults(t *testing.T, target string, cfg sanity.TestConfig, skips ...SkipSpec) *sanityResult {
	t.Helper()
	switch os.Getenv(childTargetEnv) {
	case "":
		return runSanityParent(t, target, false)
	case target:
		runSanityChild(t, target, cfg, skips)
	default:
		t.Skipf("this process runs the sanity suite of %q only", os.Getenv(childTargetEnv))
	}
	return nil
}

// runSanityParent runs target's suite in a child process. strict: a failed
// spec fails t and the summary line is printed; otherwise failed specs are
// only logged and the result is the caller's to judge.
func runSanityParent(t *testing.T, target string, strict bool) *sanityResult {
	t.Helper()
	report := filepath.Join(t.TempDir(), "sanity-report.json")
	ctx, cancel := context.WithTimeout(context.Background(), childTimeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0],
		"-test.run="+runPattern(t.Name()),
		"-test.count=1",
		"-test.v", // so that a skip's reason is in the output
		"-test.timeout="+childTimeout.String(),
	)
	cmd.Env = append(os.Environ(), childTargetEnv+"="+target, childReportEnv+"="+report)
	start := time.Now()
	out, runErr := cmd.CombinedOutput()
	elapsed := time.Since(start).Round(100 * time.Millisecond)

	var res sanityResult
	b, err := os.ReadFile(report)
	if err == nil {
		err = json.Unmarshal(b, &res)
	}
	switch {
	case err != nil && runErr == nil:
		// The child passed without running the suite: its test skipped
		// before calling runSanity (a precondition such as root). The
		// summary says so and why, since go test hides a skip's message.
		summary(t, fmt.Sprintf("sanity %s: SKIPPED, the suite did not run: %s", target, skipReason(out)))
		t.Skipf("sanity %s: the child test skipped before running the suite:\n%s", target, tail(out, 20))
	case err != nil:
		// No report and a failed child: the suite itself broke (setup
		// failed, panic, timeout). Count that as one failure so the line
		// never reads as a pass.
		summary(t, fmt.Sprintf("sanity %s: 0 passed, 1 failed, 0 skipped", target))
		t.Fatalf("sanity %s: the suite did not report (%v, exit: %v); output:\n%s", target, err, runErr, tail(out, 200))
	}
	for _, s := range sortedKeys(res.SkipReasons) {
		t.Logf("skipped: %s\n    reason: %s", s, res.SkipReasons[s])
	}
	for _, s := range sortedKeys(res.Failures) {
		if strict {
			t.Errorf("FAILED: %s\n%s", s, res.Failures[s])
		} else {
			t.Logf("failed: %s\n%s", s, res.Failures[s])
		}
	}
	// A child with failed specs exits non-zero; without any, a non-zero
	// exit is a broken run (a clean-up that failed, a leak).
	if strict && res.Failed > 0 || runErr != nil && res.Failed == 0 {
		t.Errorf("sanity %s: child exited with %v; its output:\n%s", target, runErr, tail(out, 200))
	}
	t.Logf("sanity %s took %s", target, elapsed)
	if strict {
		summary(t, fmt.Sprintf("sanity %s: %d passed, %d failed, %d skipped", target, res.Passed, res.Failed, res.Skipped))
	}
	return &res
}

// skipReason finds why a child skipped in its -test.v output: the line
// testbin.RequireRoot logs, or a pointer to the output.
func skipReason(out []byte) string {
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "not root: "); i >= 0 {
			return strings.TrimSpace(line[i:])
		}
	}
	return "see the test's output (go test -v)"
}

// summary prints a target's closing line, and appends it to the file named
// by $SANITY_REPORT: `go test` hides a passing package's output, and
// `make sanity` prints that file after the run.
func summary(t *testing.T, line string) {
	fmt.Println(line)
	path := os.Getenv("SANITY_REPORT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintln(f, line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Errorf("SANITY_REPORT: %v", err)
	}
}

func runSanityChild(t *testing.T, target string, cfg sanity.TestConfig, skips []SkipSpec) {
	reasons := map[string]string{} // literal spec text -> reason
	suiteConfig, reporterConfig := ginkgo.GinkgoConfiguration()
	for _, s := range skips {
		if s.Reason == "" {
			t.Fatalf("SkipSpec %q has no reason", s.Spec)
		}
		suiteConfig.SkipStrings = append(suiteConfig.SkipStrings, regexp.QuoteMeta(s.Spec))
		reasons[s.Spec] = s.Reason
	}
	suiteConfig.Timeout = childTimeout
	reporterConfig.Succinct = true
	reporterConfig.NoColor = true // the output ends up in test logs

	reportPath := os.Getenv(childReportEnv)
	ginkgo.ReportAfterSuite("write sanity report for "+target, func(r ginkgo.Report) {
		res := summarize(r, reasons)
		b, err := json.Marshal(res)
		if err == nil {
			err = os.WriteFile(reportPath, b, 0o600)
		}
		if err != nil {
			ginkgo.Fail("cannot write sanity report: " + err.Error())
		}
	})
	sc := sanity.GinkgoTest(&cfg)
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "CSI sanity: "+target, suiteConfig, reporterConfig)
	sc.Finalize()
}

// summarize counts It specs; pending specs (XIt in csi-test) count as
// skipped.
func summarize(r ginkgo.Report, reasons map[string]string) sanityResult {
	res := sanityResult{SkipReasons: map[string]string{}, Failures: map[string]string{}, States: map[string]string{}}
	for _, s := range r.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt {
			continue
		}
		text := s.FullText()
		switch {
		case s.State == types.SpecStatePassed:
			res.Passed++
			res.States[text] = "passed"
		case s.State.Is(types.SpecStateFailureStates):
			res.Failed++
			res.States[text] = "failed"
			res.Failures[text] = fmt.Sprintf("%s\nat %s", s.Failure.Message, s.Failure.Location)
		case s.State == types.SpecStatePending:
			res.Skipped++
			res.States[text] = "skipped"
			res.SkipReasons[text] = "marked pending (XIt) by csi-test itself"
		default: // skipped
			res.Skipped++
			res.States[text] = "skipped"
			reason := s.Failure.Message
			for spec, why := range reasons {
				if strings.Contains(text, spec) {
					reason = "skipped by the test: " + why
				}
			}
			if reason == "" {
				reason = "(no reason given)"
			}
			res.SkipReasons[text] = reason
		}
	}
	return res
}

// runPattern turns a test name into a -test.run pattern that matches only
// that test (each level of a subtest name is its own anchored pattern).
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func tail(b []byte, lines int) string {
	s := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(s) > lines {
		s = append([]string{fmt.Sprintf("... (%d lines omitted)", len(s)-lines)}, s[len(s)-lines:]...)
	}
	return strings.Join(s, "\n")
}

// stopProcess stops a process the test started: SIGINT, which the proxy and
// the drivers answer by shutting down cleanly, then SIGKILL after ten
// seconds; it returns once the process is gone.
func stopProcess(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}
