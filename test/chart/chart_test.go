// Package chart_test renders berth's Helm chart (charts/berth) with Helm's own template engine
// and checks what it produces.
package chart_test

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/yaml"

	"github.com/berth-dev/berth/internal/nodepools"
)

const chartDir = "../../charts/berth"

// render renders the chart with values (merged over values.yaml) and returns every document
// of every template, keyed "Kind/name".
func render(t *testing.T, values map[string]any) (map[string]map[string]any, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading chart: %v", err)
	}
	if err := chartutil.ValidateAgainstSchema(ch, mergedValues(t, ch.Values, values)); err != nil {
		return nil, err
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "berth", Namespace: "berth-system", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	out := map[string]map[string]any{}
	for _, n := range names {
		for _, doc := range splitDocs(files[n]) {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("%s: parsing rendered YAML: %v\n%s", n, err, doc)
			}
			if obj == nil {
				continue
			}
			meta, _ := obj["metadata"].(map[string]any)
			out[fmt.Sprintf("%v/%v", obj["kind"], meta["name"])] = obj
		}
	}
	return out, nil
}

// mergedValues is values.yaml with the test's values over it, as helm install sees them.
func mergedValues(t *testing.T, defaults, values map[string]any) map[string]any {
	t.Helper()
	return chartutil.CoalesceTables(copyValues(t, values), copyValues(t, defaults))
}

func copyValues(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	data, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	if err := yaml.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func splitDocs(s string) []string {
	var out []string
	for _, d := range strings.Split(s, "\n---") {
		if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(d), "---")) != "" {
			out = append(out, d)
		}
	}
	return out
}

// TestNodePoolTemplatesMatchRenderer: the chart's NodePool templates are exactly what
// `berth nodepools render` prints, for every family and both roles.
func TestNodePoolTemplatesMatchRenderer(t *testing.T) {
	products := []string{"a100", "a10g", "h100", "h200", "l4", "l40s"}
	for _, role := range nodepools.Roles {
		t.Run(string(role), func(t *testing.T) {
			fams := map[string]any{}
			for _, p := range products {
				fams[p] = map[string]any{"enabled": true, "role": string(role)}
			}
			got, err := render(t, map[string]any{"nodePools": map[string]any{"clusterName": "prod", "families": fams}})
			if err != nil {
				t.Fatalf("rendering: %v", err)
			}
			objs, err := nodepools.Render(nodepools.Options{Families: products, Role: role, ClusterName: "prod"})
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := nodepools.Encode(&buf, objs, "yaml"); err != nil {
				t.Fatal(err)
			}
			want := map[string]map[string]any{}
			for _, doc := range splitDocs(buf.String()) {
				var obj map[string]any
				if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
					t.Fatal(err)
				}
				meta, _ := obj["metadata"].(map[string]any)
				want[fmt.Sprintf("%v/%v", obj["kind"], meta["name"])] = obj
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("chart vs berth nodepools render (-render +chart):\n%s", diff)
			}
		})
	}
}

// TestNodePoolValueOverrides: capacity types and the GPU limit can be set per family.
func TestNodePoolValueOverrides(t *testing.T) {
	got, err := render(t, map[string]any{"nodePools": map[string]any{"clusterName": "prod", "families": map[string]any{
		"h100": map[string]any{"enabled": true, "role": "training", "capacityTypes": []any{"on-demand"}, "gpuLimit": 32},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := nodepools.Render(nodepools.Options{Families: []string{"h100"}, Role: nodepools.RoleTraining, ClusterName: "prod", CapacityTypes: []string{"on-demand"}, GPULimit: 32})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := nodepools.Encode(&buf, objs, "yaml"); err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	docs := splitDocs(buf.String())
	if err := yaml.Unmarshal([]byte(docs[len(docs)-1]), &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got["NodePool/gpu-h100-training"]); diff != "" {
		t.Errorf("NodePool (-render +chart):\n%s", diff)
	}
}

// TestNodePoolBadValues: bad values fail the render with a message naming the value.
func TestNodePoolBadValues(t *testing.T) {
	tests := []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"no cluster name", map[string]any{"nodePools": map[string]any{"families": map[string]any{"h100": map[string]any{"enabled": true}}}}, "nodePools.clusterName is required"},
		{"bad role", map[string]any{"nodePools": map[string]any{"clusterName": "prod", "families": map[string]any{"h100": map[string]any{"enabled": true, "role": "batch"}}}}, "role"},
		{"unknown product", map[string]any{"nodePools": map[string]any{"clusterName": "prod", "families": map[string]any{"t4": map[string]any{"enabled": true}}}}, "t4"},
		{"bad capacity type", map[string]any{"nodePools": map[string]any{"clusterName": "prod", "families": map[string]any{"h100": map[string]any{"enabled": true, "capacityTypes": []any{"reserved"}}}}}, "capacityTypes"},
		{"gpuLimit not a number", map[string]any{"nodePools": map[string]any{"clusterName": "prod", "families": map[string]any{"h100": map[string]any{"enabled": true, "gpuLimit": "lots"}}}}, "gpuLimit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, tt.values)
			t.Logf("helm says: %v", err)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestDefaultValuesRenderNoNodePools: with the defaults, no NodePool is rendered.
func TestDefaultValuesRenderNoNodePools(t *testing.T) {
	got, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := range got {
		if strings.HasPrefix(k, "NodePool/") || strings.HasPrefix(k, "EC2NodeClass/") {
			t.Errorf("default values render %s", k)
		}
	}
}
