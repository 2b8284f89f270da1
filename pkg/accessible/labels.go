package accessible

import "strings"

// The rules below are Kubernetes' label key and value rules: accessible
// topology becomes PV node affinity, which the API server validates with
// them, and nodes can only carry such labels. They are written out here
// instead of importing k8s.io/apimachinery, which would pull a large
// dependency tree into the proxy for two checks.
//
// Where CSI is stricter the stricter rule applies only for values: a CSI
// topology segment value must be non-empty, while a label value may be
// empty. CSI's 63-character limit on key prefixes is not enforced: the
// `extra` labels are arbitrary node labels by design, and Kubernetes allows
// 253-character prefixes.

const (
	maxNameLength   = 63
	maxPrefixLength = 253
	maxValueLength  = 63
)

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
	case len(value) > maxValueLength:
		return "must be at most 63 characters"
	case !isName(value):
		return "must consist of alphanumerics, '-', '_' or '.', and begin and end with an alphanumeric"
	}
	return ""
}

func nameProblem(name string) string {
	switch {
	case name == "":
		return "name after '/' must not be empty"
	case len(name) > maxNameLength:
		return "name must be at most 63 characters"
	case !isName(name):
		return "name must consist of alphanumerics, '-', '_' or '.', and begin and end with an alphanumeric"
	}
	return ""
}

func prefixProblem(prefix string) string {
	switch {
	case prefix == "":
		return "prefix before '/' must not be empty"
	case len(prefix) > maxPrefixLength:
		return "prefix must be at most 253 characters"
	case !isDNSSubdomain(prefix):
		return "prefix must be a DNS subdomain: lowercase alphanumerics and '-' in parts separated by '.', each beginning and ending with an alphanumeric"
	}
	return ""
}

// isName reports whether s is non-empty, consists of [A-Za-z0-9_.-], and
// begins and ends with an alphanumeric.
func isName(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// isDNSSubdomain reports whether s is a lowercase RFC 1123 subdomain:
// '.'-separated parts of [a-z0-9-], each beginning and ending with [a-z0-9].
func isDNSSubdomain(s string) bool {
	for part := range strings.SplitSeq(s, ".") {
		if part == "" || !isLowerAlnum(part[0]) || !isLowerAlnum(part[len(part)-1]) {
			return false
		}
		for i := 0; i < len(part); i++ {
			if c := part[i]; !isLowerAlnum(c) && c != '-' {
				return false
			}
		}
	}
	return true
}

func isLowerAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

func isAlnum(c byte) bool { return isLowerAlnum(c) || 'A' <= c && c <= 'Z' }
