package nodetopology

import (
	"fmt"
	"strings"

	"github.com/democratic-csi/proxy-topology/pkg/labels"
)

// The rules are pkg/labels'; the messages are this package's.

// validateLabelValue accepts the empty string, as Kubernetes does; callers
// that need a non-empty value check that themselves.
func validateLabelValue(v string) error {
	if len(v) > labels.MaxValue {
		return fmt.Errorf("must be no more than %d characters (has %d)", labels.MaxValue, len(v))
	}
	if v != "" && !labels.IsName(v) {
		return fmt.Errorf("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")
	}
	return nil
}

// validateLabelKey checks a qualified name: [DNS-subdomain "/"] name.
func validateLabelKey(k string) error {
	name := k
	if i := strings.IndexByte(k, '/'); i >= 0 {
		prefix := k[:i]
		name = k[i+1:]
		if prefix == "" {
			return fmt.Errorf("prefix part must be non-empty")
		}
		if err := validateDNSSubdomain(prefix); err != nil {
			return fmt.Errorf("prefix part %w", err)
		}
		if strings.IndexByte(name, '/') >= 0 {
			return fmt.Errorf("must contain at most one '/'")
		}
	}
	if name == "" {
		return fmt.Errorf("name part must be non-empty")
	}
	if len(name) > labels.MaxName {
		return fmt.Errorf("name part must be no more than %d characters (has %d)", labels.MaxName, len(name))
	}
	if !labels.IsName(name) {
		return fmt.Errorf("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")
	}
	return nil
}

func validateDNSSubdomain(s string) error {
	if s == "" {
		return fmt.Errorf("must be non-empty")
	}
	if len(s) > labels.MaxPrefix {
		return fmt.Errorf("must be no more than %d characters (has %d)", labels.MaxPrefix, len(s))
	}
	if !labels.IsDNSSubdomain(s) {
		return fmt.Errorf("must be a lowercase DNS subdomain: lowercase alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character")
	}
	return nil
}
