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
	for _, tc := range []struct {
		role nodepools.Role
		dra  bool
	}{{nodepools.RoleInference, false}, {nodepools.RoleTraining, false}, {nodepools.RoleInference, true}, {nodepools.RoleTraining, true}} {
		role := tc.role
		t.Run(fmt.Sprintf("%s dra=%v", role, tc.dra), func(t *testing.T) {
			fams := map[string]any{}
			for _, p := range products {
				fams[p] = map[string]any{"enabled": true, "role": string(role), "dra": tc.dra}
			}
			got, err := render(t, map[string]any{"nodePools": map[string]any{"clusterName": "prod", "families": fams}})
			if err != nil {
				t.Fatalf("rendering: %v", err)
			}
			objs, err := nodepools.Render(nodepools.Options{Families: products, Role: role, ClusterName: "prod", DRA: tc.dra})
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
					pools[k] = withoutKeep(t, v)
				}
			}
			if diff := cmp.Diff(want, pools); diff != "" {
				t.Errorf("chart vs berth nodepools render (-render +chart):\n%s", diff)
			}
		})
	}
}

// TestNodePoolEKSSettingsMatchRenderer: an install's own node role and discovery tags, and
// capacity reservations with the reserved capacity type, render in the chart exactly as
// `berth nodepools render` prints them.
func TestNodePoolEKSSettingsMatchRenderer(t *testing.T) {
	got, err := render(t, map[string]any{"nodePools": map[string]any{
		"nodeRole": "eks-gpu-nodes", "discoveryTags": map[string]any{"kubernetes.io/cluster/prod": "owned"},
		"families": map[string]any{"h100": map[string]any{"enabled": true, "role": "training", "capacityTypes": []any{"reserved", "on-demand"},
			"capacityReservationIDs": []any{"cr-0123456789abcdef0"}, "capacityReservationTags": map[string]any{"team": "ml"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := nodepools.Render(nodepools.Options{Families: []string{"h100"}, Role: nodepools.RoleTraining,
		NodeRole: "eks-gpu-nodes", DiscoveryTags: map[string]string{"kubernetes.io/cluster/prod": "owned"},
		CapacityTypes: []string{"reserved", "on-demand"}, CapacityReservationIDs: []string{"cr-0123456789abcdef0"},
		CapacityReservationTags: map[string]string{"team": "ml"}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := nodepools.Encode(&buf, objs, "yaml"); err != nil {
		t.Fatal(err)
	}
	for _, doc := range splitDocs(buf.String()) {
		var want map[string]any
		if err := yaml.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatal(err)
		}
		meta, _ := want["metadata"].(map[string]any)
		key := fmt.Sprintf("%v/%v", want["kind"], meta["name"])
		if got[key] == nil {
			t.Fatalf("chart lacks %s", key)
		}
		if diff := cmp.Diff(want, withoutKeep(t, got[key])); diff != "" {
			t.Errorf("%s: chart vs berth nodepools render (-render +chart):\n%s", key, diff)
		}
	}
}

// TestNodePoolValueOverrides: capacity types and the GPU limit can be set per family.
func TestNodePoolValueOverrides(t *testing.T) {
	got, err := render(t, map[string]any{"nodePools": map[string]any{"clusterName": "prod", "amiAlias": "al2023@v20251117", "families": map[string]any{
		"h100": map[string]any{"enabled": true, "role": "training", "capacityTypes": []any{"on-demand"}, "gpuLimit": 32},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := nodepools.Render(nodepools.Options{Families: []string{"h100"}, Role: nodepools.RoleTraining, ClusterName: "prod", CapacityTypes: []string{"on-demand"}, GPULimit: 32, AMIAlias: "al2023@v20251117"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := nodepools.Encode(&buf, objs, "yaml"); err != nil {
		t.Fatal(err)
	}
	var want, wantClass map[string]any
	docs := splitDocs(buf.String())
	if err := yaml.Unmarshal([]byte(docs[len(docs)-1]), &want); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(docs[0]), &wantClass); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, withoutKeep(t, got["NodePool/gpu-h100-training"])); diff != "" {
		t.Errorf("NodePool (-render +chart):\n%s", diff)
	}
	if diff := cmp.Diff(wantClass, withoutKeep(t, got["EC2NodeClass/gpu-h100-training"])); diff != "" {
		t.Errorf("EC2NodeClass with a pinned AMI (-render +chart):\n%s", diff)
	}
}

// withoutKeep is a chart-rendered object without the helm.sh/resource-policy and Argo CD
// Prune=false annotations (what the chart adds to what berth nodepools render prints), checking
// they are there.
func withoutKeep(t *testing.T, obj map[string]any) map[string]any {
	t.Helper()
	data, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := yaml.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	meta, _ := out["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	if ann["helm.sh/resource-policy"] != "keep" || ann["argocd.argoproj.io/sync-options"] != "Prune=false" {
		t.Errorf("%v %v is not kept on uninstall and from Argo CD prunes: annotations %v", out["kind"], meta["name"], ann)
	}
	delete(ann, "helm.sh/resource-policy")
	delete(ann, "argocd.argoproj.io/sync-options")
	if len(ann) == 0 {
		delete(meta, "annotations")
	}
	return out
}

// TestNodePoolsKeptOnUninstall: by default helm uninstall (or renaming a family) leaves the
// NodePools and EC2NodeClasses in place, and so does an Argo CD prune (which ignores Helm's
// resource policy) — deleting a NodePool drains every node it launched; keepOnUninstall: false
// lets Helm and Argo CD delete them.
func TestNodePoolsKeptOnUninstall(t *testing.T) {
	fams := map[string]any{"l4": map[string]any{"enabled": true}}
	for _, keep := range []bool{true, false} {
		got, err := render(t, map[string]any{"nodePools": map[string]any{"clusterName": "prod", "keepOnUninstall": keep, "families": fams}})
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"NodePool/gpu-l4-inference", "EC2NodeClass/gpu-l4-inference"} {
			ann, _ := dig(got[key], "metadata", "annotations").(map[string]any)
			if kept := ann["helm.sh/resource-policy"] == "keep" && ann["argocd.argoproj.io/sync-options"] == "Prune=false"; kept != keep || (!keep && len(ann) > 0 && ann["argocd.argoproj.io/sync-options"] != nil) {
				t.Errorf("keepOnUninstall %v: %s annotations %v", keep, key, ann)
			}
		}
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
		{"bad capacity type", map[string]any{"nodePools": map[string]any{"clusterName": "prod", "families": map[string]any{"h100": map[string]any{"enabled": true, "capacityTypes": []any{"preemptible"}}}}}, "capacityTypes"},
		{"reserved without reservations", map[string]any{"nodePools": map[string]any{"clusterName": "prod", "families": map[string]any{"h100": map[string]any{"enabled": true, "capacityTypes": []any{"reserved"}}}}}, "needs capacityReservationIDs"},
		{"reservations without reserved", map[string]any{"nodePools": map[string]any{"clusterName": "prod", "families": map[string]any{"h100": map[string]any{"enabled": true, "capacityReservationIDs": []any{"cr-0abc"}}}}}, "lack reserved"},
		{"bad reservation id", map[string]any{"nodePools": map[string]any{"clusterName": "prod", "families": map[string]any{"h100": map[string]any{"enabled": true, "capacityTypes": []any{"reserved"}, "capacityReservationIDs": []any{"odcr-1"}}}}}, "capacityReservationIDs"},
		{"node role without discovery tags and no cluster", map[string]any{"nodePools": map[string]any{"nodeRole": "gpu-nodes", "families": map[string]any{"h100": map[string]any{"enabled": true}}}}, "nodePools.clusterName is required"},
		{"DRA pool on Bottlerocket", map[string]any{"nodePools": map[string]any{"clusterName": "prod", "amiAlias": "bottlerocket@latest", "families": map[string]any{"h100": map[string]any{"enabled": true, "dra": true}}}}, "nodePools.families.h100.dra: DRA pools cannot use the AMI alias"},
		{"dra not a boolean", map[string]any{"nodePools": map[string]any{"clusterName": "prod", "families": map[string]any{"h100": map[string]any{"enabled": true, "dra": "yes"}}}}, "dra"},
		{"AMI not an alias", map[string]any{"nodePools": map[string]any{"clusterName": "prod", "amiAlias": "ami-0123456789abcdef0"}}, "amiAlias"},
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
