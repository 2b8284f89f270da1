package main

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// writeMainConfig writes the main config mainYAML to path with
// proxy.configFolder set to folder. The YAML is edited as data, so a test
// config cannot silently keep a folder of its own.
func writeMainConfig(t *testing.T, path, mainYAML, folder string) {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(mainYAML), &doc); err != nil {
		t.Fatalf("test main config: %v", err)
	}
	proxy, ok := doc["proxy"].(map[string]any)
	if !ok {
		proxy = map[string]any{}
		doc["proxy"] = proxy
	}
	proxy["configFolder"] = folder
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}
