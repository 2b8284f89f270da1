package labels

import (
	"regexp"
	"strings"
	"testing"
)

// The predicates must agree with Kubernetes' own regular expressions
// (k8s.io/apimachinery/pkg/util/validation), which are kept here as the
// reference.
var (
	nameRE      = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	subdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

var samples = []string{
	"", "a", "A", "0", "-", "_", ".", "a-b", "a_b", "a.b", "-a", "a-", "_a", "a_", ".a", "a.",
	"Zone1", "zone1.example", "a..b", "a.-b", "x/y", "a b", "ä", "example.com", "Example.com",
	"a-.b", strings.Repeat("a", 64),
}

func TestAgreesWithKubernetesRegexps(t *testing.T) {
	for _, s := range samples {
		if got, want := IsName(s), nameRE.MatchString(s); got != want {
			t.Errorf("IsName(%q) = %t, Kubernetes says %t", s, got, want)
		}
		if got, want := IsDNSSubdomain(s), subdomainRE.MatchString(s); got != want {
			t.Errorf("IsDNSSubdomain(%q) = %t, Kubernetes says %t", s, got, want)
		}
	}
}

func FuzzAgreesWithKubernetesRegexps(f *testing.F) {
	for _, s := range samples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if IsName(s) != nameRE.MatchString(s) || IsDNSSubdomain(s) != subdomainRE.MatchString(s) {
			t.Fatalf("%q: IsName=%t IsDNSSubdomain=%t disagree with Kubernetes", s, IsName(s), IsDNSSubdomain(s))
		}
	})
}
