package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
)

// File is one file of the connection folder, decoded once: a group
// (driver: group) or an ordinary connection.
type File struct {
	// Connection is set for an ordinary connection, Group for a group.
	Connection *Connection
	Group      *Group
	// Warnings name keys that are ignored (ParseConnection).
	Warnings []string
}

// ParseFile decodes and validates one file of the connection folder as
// its driver key says: ParseGroup for driver: group, ParseConnection for
// any other. The YAML is parsed once; the store and the survey load
// thousands of files this way. file is used in messages only.
func ParseFile(file string, data []byte, topo accessible.Options) (File, error) {
	doc, dec, err := decodeDocument(file, data)
	if err != nil {
		return File{}, err
	}
	if driverOf(doc) == DriverGroup {
		g, err := parseGroup(file, doc, dec)
		if err != nil {
			return File{}, err
		}
		return File{Group: g}, nil
	}
	c, warnings, err := parseConnection(file, data, doc, dec, topo)
	return File{Connection: c, Warnings: warnings}, err
}

// decodeDocument parses the first YAML document of data into a node (an
// empty file gives the zero node), and returns the decoder positioned
// after it for noSecondDocument.
func decodeDocument(file string, data []byte) (*yaml.Node, *yaml.Decoder, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("file %s: %s", file, hideSecrets(err.Error(), data))
	}
	if err := checkDepth("file "+file, &doc); err != nil {
		return nil, nil, err
	}
	return &doc, dec, nil
}

// noSecondDocument checks that dec, past a file's first document, holds no
// other: a second one would be silently ignored, and whatever it says
// (another driver, a topology list) with it. A trailing "---" or comments
// are no document.
func noSecondDocument(file string, dec *yaml.Decoder) error {
	var next yaml.Node
	if err := dec.Decode(&next); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("file %s: %w", file, err)
	} else if err == nil && !emptyDocument(&next) {
		return fmt.Errorf("file %s: line %d: a second YAML document; a connection file holds exactly one", file, next.Line)
	}
	return nil
}

// driverOf is the scalar value of the document's top-level driver key, ""
// if there is none.
func driverOf(doc *yaml.Node) string {
	if v := resolveAlias(mappingValue(doc, "driver")); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}
