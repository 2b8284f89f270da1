package accessible

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/democratic-csi/proxy-topology/pkg/labels"
)

// listPath is where the topology list lives in a connection file; error
// messages start with it so users can find the offending line.
const listPath = "proxy.perDriver.topology"

// Validate checks a connection's topology list and reports every problem,
// each naming its path, e.g.
//
//	proxy.perDriver.topology[1].requirements["bad key!"]: not a valid label key (…)
//
// Keys in requirements: short keys get the prefix, keys containing '/' are
// verbatim; extra keys are full label keys used as they are. All must be
// valid label keys with valid, non-empty label values, and no two of an
// entry's keys may name the same label with different values, since the CO
// could not enforce both.
func Validate(entries []Entry, opts Options) error {
	var errs []error
	for i := range entries {
		errs = append(errs, validateEntry(fmt.Sprintf("%s[%d]", listPath, i), &entries[i], opts)...)
	}
	return errors.Join(errs...)
}

func validateEntry(path string, e *Entry, opts Options) []error {
	if len(e.Requirements) == 0 && len(e.Extra) == 0 {
		// It would match every request and decorate to no labels at all,
		// i.e. "reachable everywhere" — almost certainly a YAML slip (say,
		// a mis-indented key) rather than intent; a connection reachable
		// everywhere simply has no topology list.
		return []error{fmt.Errorf("%s: requirements and extra are both empty", path)}
	}

	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", path, field, fmt.Sprintf(format, args...)))
	}

	// owner remembers which field first set a full label key, so a second
	// field naming the same label with another value can be reported.
	type owner struct{ field, value string }
	owners := make(map[string]owner, len(e.Requirements)+len(e.Extra))
	claim := func(field, full, value string) {
		if prev, ok := owners[full]; ok {
			if prev.value != value {
				fail(field, "value %q conflicts with %s value %q (both are label %q)", value, prev.field, prev.value, full)
			}
			return
		}
		owners[full] = owner{field, value}
	}

	// Sorted so the messages, and which of two clashing fields is blamed,
	// do not depend on map iteration order.
	for _, k := range slices.Sorted(maps.Keys(e.Requirements)) {
		v := e.Requirements[k]
		field := fmt.Sprintf("requirements[%q]", k)
		full := labels.FullKey(opts.Prefix, k)
		keyOK := true
		if p := labelKeyProblem(k); p != "" {
			fail(field, "not a valid label key (%s)", p)
			keyOK = false
		} else if full != k {
			// The short key is fine on its own; the prefix can still make
			// the full key invalid (too long, or a bad prefix).
			if p := labelKeyProblem(full); p != "" {
				fail(field, "with the prefix, %q is not a valid label key (%s)", full, p)
				keyOK = false
			}
		}
		if p := labelValueProblem(v); p != "" {
			fail(field, "value %q is not a valid label value (%s)", v, p)
		}
		if keyOK {
			claim(field, full, v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(e.Extra)) {
		v := e.Extra[k]
		field := fmt.Sprintf("extra[%q]", k)
		keyOK := true
		if p := labelKeyProblem(k); p != "" {
			fail(field, "not a valid label key (%s)", p)
			keyOK = false
		}
		if p := labelValueProblem(v); p != "" {
			fail(field, "value %q is not a valid label value (%s)", v, p)
		}
		if keyOK {
			claim(field, k, v)
		}
	}
	return errs
}
