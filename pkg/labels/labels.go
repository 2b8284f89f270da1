// Package labels checks Kubernetes label keys and values, and joins a
// topology prefix with a short key. Topology segments become node labels
// (kubelet registers them) and accessible_topology becomes PV node
// affinity, which the API server validates, so both are checked here with
// Kubernetes' own rules (k8s.io/apimachinery/pkg/api/validate/content)
// and reported in Kubernetes' own words; callers add what is wrong where.
package labels

import (
	"errors"
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
)

// KeyError says why key is not a valid label key: an optional DNS-subdomain
// prefix and '/', then a name. nil means it is valid.
func KeyError(key string) error { return joined(content.IsLabelKey(key)) }

// ValueError says why value is not a valid label value (the empty value is
// valid, as in Kubernetes). nil means it is valid.
func ValueError(value string) error { return joined(content.IsLabelValue(value)) }

// PrefixError says why prefix cannot be a label key prefix (a lowercase
// DNS subdomain). nil means it can.
func PrefixError(prefix string) error {
	if prefix == "" {
		return errors.New(content.EmptyError())
	}
	return joined(content.IsDNS1123Subdomain(prefix))
}

// FullKey is the one rule for topology keys: a key containing '/' is a
// full label key and used verbatim (so topology.kubernetes.io/zone can be
// reported as is); a short key gets "<prefix>/". An empty prefix leaves
// short keys as they are.
func FullKey(prefix, key string) string {
	if prefix == "" || strings.Contains(key, "/") {
		return key
	}
	return prefix + "/" + key
}

func joined(msgs []string) error {
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}
