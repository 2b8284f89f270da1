// Package accessible decides whether a connection can serve a CreateVolume
// request's accessibility requirements and computes the accessible_topology
// the CO turns into PV node affinity.
package accessible

// Entry is one item of a connection's proxy.perDriver.topology list: a place
// where the connection's storage is reachable.
type Entry struct {
	// Requirements are topology segments. Short keys get "<prefix>/";
	// keys containing '/' are used verbatim.
	Requirements map[string]string `koanf:"requirements" yaml:"requirements"`
	// Extra are full label keys added to accessible_topology as they are.
	Extra map[string]string `koanf:"extra" yaml:"extra"`
}
