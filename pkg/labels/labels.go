// Package labels holds Kubernetes' label key and value rules, the one
// definition both node topology (segments become node labels) and
// accessibility (accessible_topology becomes PV node affinity) check
// against. They are written out rather than imported from
// k8s.io/apimachinery, which would pull a large dependency tree into the
// proxy for a few checks. Callers word their own messages.
package labels

import "strings"

// Length limits of a label's parts.
const (
	MaxName   = 63  // the name part of a key
	MaxPrefix = 253 // the DNS-subdomain prefix of a key
	MaxValue  = 63  // a value
)

// IsName reports whether s is non-empty, consists of [A-Za-z0-9_.-], and
// begins and ends with an alphanumeric: a key's name part, or a non-empty
// value (length not checked).
func IsName(s string) bool {
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

// IsDNSSubdomain reports whether s is a lowercase RFC 1123 subdomain:
// '.'-separated parts of [a-z0-9-], each beginning and ending with [a-z0-9]
// (length not checked).
func IsDNSSubdomain(s string) bool {
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
