package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelmRefusesValues: values the chart would render into something that
// fails later, or whose effect would vanish, are refused by helm template
// itself, naming the key: a wrong type through values.schema.json (Helm's
// own validation), what a schema cannot say through the templates' checks.
func TestHelmRefusesValues(t *testing.T) {
	need(t)
	for _, tc := range []struct {
		name   string
		values string // a values file, for shapes --set cannot write
		set    []string
		want   string
	}{
		// values.schema.json
		{name: "upstream image a number", set: []string{"--set", "upstreams.u.image=5"},
			want: "at '/upstreams/u/image': got number, want null or string"},
		{name: "upstream side image a number", set: []string{"--set", "upstreams.u.image=i", "--set", "upstreams.u.node.image=5"},
			want: "at '/upstreams/u/node/image': got number, want null or string"},
		{name: "preset image a number", set: []string{"--set", "upstreams.u.democraticCsi.image=5"},
			want: "at '/upstreams/u/democraticCsi/image': got number, want null or string"},
		{name: "image a number", values: "image: 5\n", want: "at '/image': got number, want object"},
		{name: "image repository a number", set: []string{"--set", "image.repository=5"}, want: "at '/image/repository': got number, want string"},
		{name: "sidecar image a number", set: []string{"--set", "controller.externalProvisioner.image=5"},
			want: "at '/controller/externalProvisioner/image': got number, want string"},
		{name: "registrar image a number", set: []string{"--set", "node.driverRegistrar.image=5"},
			want: "at '/node/driverRegistrar/image': got number, want string"},
		{name: "sidecar image empty", set: []string{"--set", "controller.livenessProbe.image="},
			want: "at '/controller/livenessProbe/image'"},
		{name: "an argument a number", set: []string{"--set", "upstreams.u.image=i", "--set", "upstreams.u.extraArgs[0]=5"},
			want: "at '/upstreams/u/extraArgs/0': got number, want string"},
		{name: "replicas a word", set: []string{"--set", "controller.replicas=two"}, want: "at '/controller/replicas': got string, want integer"},
		{name: "class parameter a number", set: []string{"--set", "storageClasses[0].name=a", "--set", "storageClasses[0].parameters.n=5"},
			want: "at '/storageClasses/0/parameters/n': got number, want string"},
		{name: "class without a name", values: "storageClasses:\n- parameters: {connection: x}\n", want: "at '/storageClasses/0': missing property 'name'"},
		{name: "connection file a number", set: []string{"--set", "connections.c=5"}, want: "at '/connections/c': got number, want string or object"},
		{name: "upstream connection a list", values: "upstreams:\n  u:\n    image: i\n    connection: [a]\n",
			want: "at '/upstreams/u/connection': got array, want null or object"},
		// the templates' checks
		{name: "upstream with no side", set: []string{"--set", "upstreams.u.image=i", "--set", "upstreams.u.controller.enabled=false", "--set", "upstreams.u.node.enabled=false"},
			want: "upstreams.u: controller.enabled and node.enabled are both false, so no container serves connection u"},
		{name: "a connection given twice", set: []string{"--set", "upstreams.u.image=i", "--set", "upstreams.u.connection.csi.timeout=5s", "--set-string", "connections.u=driver: csi"},
			want: "connections.u and upstreams.u.connection both give connection u: keep one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"template", "proxy-topology", "deploy/helm/proxy-topology", "--namespace", Namespace}, tc.set...)
			if tc.values != "" {
				path := filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(path, []byte(tc.values), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--values", path)
			}
			out, err := command(t, tools["HELM"], args...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("helm template %v %q: %v, want a failure saying %q:\n%.800s", tc.set, tc.values, err, tc.want, out)
			}
		})
	}

	// What stays allowed beside those refusals: one side off; a
	// connections entry for an upstream that gives no connection block
	// (it replaces the rendered one, as docs/kubernetes.md says); the
	// empty keys a values file writes as null.
	for _, set := range [][]string{
		{"--set", "upstreams.u.image=i", "--set", "upstreams.u.node.enabled=false"},
		{"--set", "upstreams.u.image=i", "--set-string", "connections.u=driver: csi"},
		{"--values", "e2e/kube/testdata/upstreams-values.yaml", "--set", "upstreams.nas1.connection=null", "--set-string", "connections.nas1=driver: csi"},
		{"--set", "upstreams.u.image=i", "--set", "upstreams.u.extraArgs=null", "--set", "upstreams.u.node=null"},
	} {
		if objs := helmTemplate(t, set...); len(objs) == 0 {
			t.Errorf("helm template %v renders nothing", set)
		}
	}
}
