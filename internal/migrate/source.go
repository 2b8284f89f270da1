package migrate

import (
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// ReadConnections reads the connection files from path: a folder of
// <name>.yaml files (as democratic-csi's proxy.configFolder, a mounted
// Secret's dot-files skipped) or a Secret manifest whose keys are
// <name>.yaml (data base64, or stringData). Names that democratic-csi
// would not read as a connection are in skipped, with the reason.
func ReadConnections(path string) (files map[string][]byte, skipped []string, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if st.IsDir() {
		return readFolder(path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return ParseSecret(path, b)
}

func readFolder(dir string) (map[string][]byte, []string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	files := map[string][]byte{}
	var skipped []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue // a mounted Secret's ..data and its timestamped folders
		}
		conn, ok := strings.CutSuffix(name, ".yaml")
		if !ok {
			skipped = append(skipped, fmt.Sprintf("%s: not <connection>.yaml, which is the only name democratic-csi's proxy reads", filepath.Join(dir, name)))
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, nil, err
		}
		files[conn] = b
	}
	return files, skipped, nil
}

// ParseSecret reads the connection files of a Secret manifest (YAML or
// JSON, as kubectl get secret -o yaml writes it).
func ParseSecret(name string, b []byte) (map[string][]byte, []string, error) {
	var s struct {
		Kind       string            `json:"kind"`
		Data       map[string]string `json:"data"`
		StringData map[string]string `json:"stringData"`
	}
	if err := yaml.Unmarshal(b, &s); err != nil {
		return nil, nil, fmt.Errorf("%s: not a Secret manifest: %v", name, err)
	}
	if s.Kind != "Secret" {
		return nil, nil, fmt.Errorf("%s: kind %q: --connections is a folder or a Secret manifest (kind: Secret)", name, s.Kind)
	}
	files := map[string][]byte{}
	var skipped []string
	for _, k := range slices.Sorted(maps.Keys(s.Data)) {
		dec, err := base64.StdEncoding.DecodeString(s.Data[k])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: data.%s: not base64: %v", name, k, err)
		}
		if conn, ok := strings.CutSuffix(k, ".yaml"); ok {
			files[conn] = dec
		} else {
			skipped = append(skipped, fmt.Sprintf("%s: data.%s: not <connection>.yaml, which is the only name democratic-csi's proxy reads", name, k))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.StringData)) {
		if conn, ok := strings.CutSuffix(k, ".yaml"); ok {
			files[conn] = []byte(s.StringData[k]) // stringData wins, as in the API
		} else {
			skipped = append(skipped, fmt.Sprintf("%s: stringData.%s: not <connection>.yaml, which is the only name democratic-csi's proxy reads", name, k))
		}
	}
	return files, skipped, nil
}
