package nodetopology

import (
	"fmt"
	"regexp"
	"strings"
)

// These mirror k8s.io/apimachinery/pkg/util/validation so that a segment we
// report is one kubelet can turn into a node label; copied rather than
// imported to keep apimachinery out of the module.
const (
	maxLabelValueLength   = 63
	maxLabelNameLength    = 63
	maxDNSSubdomainLength = 253
)

var (
	// Go's regexp is linear-time, so these are safe on arbitrary input.
	labelValueRE   = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	labelNameRE    = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	dnsSubdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// validateLabelValue accepts the empty string, as Kubernetes does; callers
// that need a non-empty value check that themselves.
func validateLabelValue(v string) error {
	if len(v) > maxLabelValueLength {
		return fmt.Errorf("must be no more than %d characters (has %d)", maxLabelValueLength, len(v))
	}
	if !labelValueRE.MatchString(v) {
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
	if len(name) > maxLabelNameLength {
		return fmt.Errorf("name part must be no more than %d characters (has %d)", maxLabelNameLength, len(name))
	}
	if !labelNameRE.MatchString(name) {
		return fmt.Errorf("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")
	}
	return nil
}

func validateDNSSubdomain(s string) error {
	if s == "" {
		return fmt.Errorf("must be non-empty")
	}
	if len(s) > maxDNSSubdomainLength {
		return fmt.Errorf("must be no more than %d characters (has %d)", maxDNSSubdomainLength, len(s))
	}
	if !dnsSubdomainRE.MatchString(s) {
		return fmt.Errorf("must be a lowercase DNS subdomain: lowercase alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character")
	}
	return nil
}
