package accessible

import (
	"strings"

	"github.com/democratic-csi/proxy-topology/pkg/labels"
)

// The rules are pkg/labels' (Kubernetes' label rules: accessible topology
// becomes PV node affinity, which the API server validates with them); the
// messages are this package's.
//
// Where CSI is stricter the stricter rule applies only for values: a CSI
// topology segment value must be non-empty, while a label value may be
// empty. CSI's 63-character limit on key prefixes is not enforced: the
// `extra` labels are arbitrary node labels by design, and Kubernetes allows
// 253-character prefixes.

// labelKeyProblem returns why key is not a valid label key, or "" if it is.
// A label key is an optional DNS-subdomain prefix and '/', then a name.
func labelKeyProblem(key string) string {
	if key == "" {
		return "must not be empty"
	}
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		return nameProblem(key)
	}
	if strings.Contains(name, "/") {
		return "must contain at most one '/'"
	}
	if p := prefixProblem(prefix); p != "" {
		return p
	}
	return nameProblem(name)
}

// labelValueProblem returns why value is not a valid topology value, or ""
// if it is.
func labelValueProblem(value string) string {
	switch {
	case value == "":
		return "must not be empty, as CSI topology segments are non-empty"
	case len(value) > labels.MaxValue:
		return "must be at most 63 characters"
	case !labels.IsName(value):
		return "must consist of alphanumerics, '-', '_' or '.', and begin and end with an alphanumeric"
	}
	return ""
}

func nameProblem(name string) string {
	switch {
	case name == "":
		return "name after '/' must not be empty"
	case len(name) > labels.MaxName:
		return "name must be at most 63 characters"
	case !labels.IsName(name):
		return "name must consist of alphanumerics, '-', '_' or '.', and begin and end with an alphanumeric"
	}
	return ""
}

func prefixProblem(prefix string) string {
	switch {
	case prefix == "":
		return "prefix before '/' must not be empty"
	case len(prefix) > labels.MaxPrefix:
		return "prefix must be at most 253 characters"
	case !labels.IsDNSSubdomain(prefix):
		return "prefix must be a DNS subdomain: lowercase alphanumerics and '-' in parts separated by '.', each beginning and ending with an alphanumeric"
	}
	return ""
}
