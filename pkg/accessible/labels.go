package accessible

import "github.com/democratic-csi/proxy-topology/pkg/labels"

// labelKeyProblem returns why key is not a valid label key, or "" if it is.
func labelKeyProblem(key string) string {
	if err := labels.KeyError(key); err != nil {
		return err.Error()
	}
	return ""
}

// labelValueProblem returns why value is not a valid topology value, or ""
// if it is. Where CSI is stricter than Kubernetes the stricter rule
// applies: a CSI topology segment value must be non-empty, while a label
// value may be empty.
func labelValueProblem(value string) string {
	if value == "" {
		return "must not be empty, as CSI topology segments are non-empty"
	}
	if err := labels.ValueError(value); err != nil {
		return err.Error()
	}
	return ""
}
