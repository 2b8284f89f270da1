// Package nodetopology computes the topology segments a node reports in
// NodeGetInfo, from regexp rules over the node's name, hostname, env vars,
// files and labels (proxy.nodeTopology in the main config).
//
// The work is split so that the rules can be tested without a node:
//
//   - Compile (compile.go) validates a Config (types.go) once, at start-up,
//     reporting every problem as a FieldError with its key path, and compiles
//     each regex (ECMAScript syntax, anchored, with MatchTimeout) and
//     template (template.go) into an Evaluator.
//   - Gather (gather.go) is the only I/O: it reads what the rules name —
//     env vars, files, and the Node's labels through a LabelSource
//     (pkg/kube) — into Inputs.
//   - Evaluate (evaluate.go) is a pure function of the Evaluator and the
//     Inputs: the segments, and for every rule what it read and why it
//     matched, was skipped or failed (Result, RuleResult), which
//     `proxy-topology topology` prints and the metrics export.
//
// The type (cluster, node or zone) adds a base segment; the first rule that
// yields a value for a key wins. Keys are made full with labels.FullKey and
// every value is checked with Kubernetes' label rules (pkg/labels), since
// kubelet turns segments into node labels. Evaluator.Accessibility gives
// pkg/accessible the prefix and type it matches with.
package nodetopology
