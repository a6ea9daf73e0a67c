// Package chart_test renders berth's Helm chart (charts/berth) with Helm's own template engine
// and checks what it produces.
package chart_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/berth-dev/berth/internal/nodepools"
	"github.com/berth-dev/berth/test/chart"
)

// render renders the chart with values over values.yaml, keyed "Kind/name".
func render(t *testing.T, values map[string]any) (map[string]map[string]any, error) {
	t.Helper()
	return chart.Render(values)
}

var splitDocs = chart.SplitDocs

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
			pools := map[string]map[string]any{}
			for k, v := range got {
				if strings.HasPrefix(k, "NodePool/") || strings.HasPrefix(k, "EC2NodeClass/") {
					pools[k] = v
				}
			}
			if diff := cmp.Diff(want, pools); diff != "" {
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
