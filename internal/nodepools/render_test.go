package nodepools

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/yaml"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/gpu"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestRenderGolden renders every GPU family for both roles on aws, and one kwok case, and
// compares the YAML with testdata/<name>.golden.yaml.
func TestRenderGolden(t *testing.T) {
	type tc struct {
		name string
		opts Options
	}
	var cases []tc
	for _, f := range gpu.GPUFamilies() {
		for _, role := range Roles {
			cases = append(cases, tc{
				name: "aws-" + NodePoolName(f.GPU, role),
				opts: Options{Families: []string{f.GPU}, Role: role, ClusterName: "prod"},
			})
		}
	}
	cases = append(cases,
		tc{name: "kwok-all-training", opts: Options{Families: []string{AllFamilies}, Role: RoleTraining, Provider: ProviderKwok}},
		tc{name: "aws-overrides", opts: Options{Families: []string{"p5", "h100", "g6"}, CapacityTypes: []string{"spot"}, ClusterName: "dev", GPULimit: 16}},
		tc{name: "aws-dra-h100-training", opts: Options{Families: []string{"h100"}, Role: RoleTraining, ClusterName: "prod", DRA: true}},
		tc{name: "kwok-dra-l4-inference", opts: Options{Families: []string{"l4"}, Provider: ProviderKwok, DRA: true}},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs, err := Render(c.opts)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			var buf bytes.Buffer
			if err := Encode(&buf, objs, FormatYAML); err != nil {
				t.Fatalf("Encode: %v", err)
			}
			path := filepath.Join("testdata", c.name+".golden.yaml")
			if *update {
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("reading golden file (run with -update to create it): %v", err)
			}
			if diff := cmp.Diff(string(want), buf.String()); diff != "" {
				t.Errorf("%s differs (-want +got; run with -update to accept):\n%s", path, diff)
			}
		})
	}
}

// TestRenderDefaults checks the role defaults on the typed objects.
func TestRenderDefaults(t *testing.T) {
	cases := []struct {
		role          Role
		capacity      []string
		limit         string
		expireAfter   string
		consolidate   string
		gracePeriod   bool
		wantNodeClass string
	}{
		{RoleInference, []string{"on-demand"}, "64", "720h", "1h", true, "gpu-h200-inference"},
		{RoleTraining, []string{"spot", "on-demand"}, "128", "Never", "4h", false, "gpu-h200-training"},
	}
	for _, c := range cases {
		t.Run(string(c.role), func(t *testing.T) {
			objs, err := Render(Options{Families: []string{"h200"}, Role: c.role, ClusterName: "prod"})
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) != 2 {
				t.Fatalf("got %d objects, want EC2NodeClass and NodePool", len(objs))
			}
			if got := objs[0].GetName(); got != c.wantNodeClass {
				t.Errorf("EC2NodeClass name = %s, want %s", got, c.wantNodeClass)
			}
			np, ok := objs[1].(*karpv1.NodePool)
			if !ok {
				t.Fatalf("second object is %T, want NodePool", objs[1])
			}
			var capacity []string
			for _, r := range np.Spec.Template.Spec.Requirements {
				if r.Key == karpv1.CapacityTypeLabelKey {
					capacity = r.Values
				}
			}
			limit := np.Spec.Limits[berthv1alpha1.GPUResource]
			got := []string{
				np.Spec.Template.Spec.NodeClassRef.Name,
				limit.String(),
				durationJSON(t, np.Spec.Template.Spec.ExpireAfter),
				durationJSON(t, np.Spec.Disruption.ConsolidateAfter),
				string(np.Spec.Disruption.ConsolidationPolicy),
			}
			want := []string{c.wantNodeClass, c.limit, c.expireAfter, c.consolidate, "WhenEmpty"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("NodePool fields (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.capacity, capacity); diff != "" {
				t.Errorf("capacity types (-want +got):\n%s", diff)
			}
			if (np.Spec.Template.Spec.TerminationGracePeriod != nil) != c.gracePeriod {
				t.Errorf("terminationGracePeriod = %v, want set: %v", np.Spec.Template.Spec.TerminationGracePeriod, c.gracePeriod)
			}
		})
	}
}

// TestRenderDRA: a DRA pool sits beside the device-plugin pool of the same family (its own
// name), keeps device-plugin pods off (its own taint: they tolerate only nvidia.com/gpu), and
// tells NVIDIA's GPU operator to run no device plugin there while the DRA driver's kubelet
// plugin (which selects nvidia.com/gpu.present) runs.
func TestRenderDRA(t *testing.T) {
	objs, err := Render(Options{Families: []string{"h100"}, Role: RoleTraining, ClusterName: "prod", DRA: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Render(Options{Families: []string{"h100"}, Role: RoleTraining, ClusterName: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	if objs[0].GetName() != "gpu-h100-training-dra" || objs[1].GetName() != "gpu-h100-training-dra" || plain[1].GetName() == objs[1].GetName() {
		t.Fatalf("names %s, %s beside %s: want gpu-h100-training-dra for both, apart from the device-plugin pool", objs[0].GetName(), objs[1].GetName(), plain[1].GetName())
	}
	np := objs[1].(*karpv1.NodePool)
	if np.Spec.Template.Spec.NodeClassRef.Name != "gpu-h100-training-dra" {
		t.Errorf("node class ref %s", np.Spec.Template.Spec.NodeClassRef.Name)
	}
	taints := np.Spec.Template.Spec.Taints
	if len(taints) != 1 || taints[0].Key != berthv1alpha1.DRAGPUTaintKey || taints[0].Effect != "NoSchedule" {
		t.Errorf("taints %v: want only %s:NoSchedule (never nvidia.com/gpu, which device-plugin pods tolerate)", taints, berthv1alpha1.DRAGPUTaintKey)
	}
	want := map[string]string{
		berthv1alpha1.NodePoolRoleLabel:             "training",
		berthv1alpha1.GPUAllocationLabel:            berthv1alpha1.GPUAllocationDRA,
		berthv1alpha1.NVIDIADevicePluginDeployLabel: "false",
		berthv1alpha1.NVIDIAGPUPresentLabel:         "true",
	}
	if diff := cmp.Diff(want, np.Spec.Template.Labels); diff != "" {
		t.Errorf("node labels (-want +got):\n%s", diff)
	}
	// Once up, a DRA node advertises no nvidia.com/gpu, so a node limit bounds the pool too: as
	// many nodes as 128 GPUs take on p5.48xlarge (8 each). The device-plugin pool has none.
	if got := np.Spec.Limits["nodes"]; got.Value() != 16 {
		t.Errorf("DRA pool's node limit %s, want 16", got.String())
	}
	// The device-plugin pool is as it was: no label added (a new label drifts every node).
	pp := plain[1].(*karpv1.NodePool)
	if diff := cmp.Diff(map[string]string{berthv1alpha1.NodePoolRoleLabel: "training"}, pp.Spec.Template.Labels); diff != "" {
		t.Errorf("device-plugin pool labels changed (-want +got):\n%s", diff)
	}
	if got := pp.Spec.Template.Spec.Taints; len(got) != 1 || got[0].Key != berthv1alpha1.GPUTaintKey {
		t.Errorf("device-plugin pool taints %v", got)
	}
	if _, ok := pp.Spec.Limits["nodes"]; ok {
		t.Errorf("device-plugin pool limits %v: no node limit", pp.Spec.Limits)
	}
}

// durationJSON is a NillableDuration as it appears in a manifest ("1h", "Never").
func durationJSON(t *testing.T, d karpv1.NillableDuration) string {
	t.Helper()
	data, err := d.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEC2FamiliesCoverCatalogue fails when a GPU family is added to the catalogue without
// EC2NodeClass settings.
func TestEC2FamiliesCoverCatalogue(t *testing.T) {
	for _, f := range gpu.GPUFamilies() {
		if _, ok := ec2Families[f.Name]; !ok {
			t.Errorf("ec2Families has no entry for %s (%s)", f.Name, f.GPU)
		}
	}
}

// TestEncode checks both formats carry apiVersion and kind, and no status or null fields.
func TestEncode(t *testing.T) {
	objs, err := Render(Options{Families: []string{"l4", "a10g"}, ClusterName: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	// TypeMeta is filled in by Encode even when the object has none.
	objs[0].GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	check := func(t *testing.T, docs []map[string]any) {
		t.Helper()
		var kinds []string
		for _, d := range docs {
			if d["apiVersion"] == nil || d["kind"] == nil {
				t.Errorf("document without apiVersion/kind: %v", d)
			}
			if _, ok := d["status"]; ok {
				t.Errorf("%s has a status", d["kind"])
			}
			if _, ok := d["metadata"].(map[string]any)["creationTimestamp"]; ok {
				t.Errorf("%s has a creationTimestamp", d["kind"])
			}
			kinds = append(kinds, d["kind"].(string))
		}
		want := []string{"EC2NodeClass", "NodePool", "EC2NodeClass", "NodePool"}
		if diff := cmp.Diff(want, kinds); diff != "" {
			t.Errorf("kinds (-want +got):\n%s", diff)
		}
	}
	t.Run("yaml", func(t *testing.T) {
		var buf bytes.Buffer
		if err := Encode(&buf, objs, FormatYAML); err != nil {
			t.Fatal(err)
		}
		var docs []map[string]any
		for _, part := range bytes.Split(buf.Bytes(), []byte("---\n"))[1:] {
			var d map[string]any
			if err := yaml.Unmarshal(part, &d); err != nil {
				t.Fatalf("decoding %q: %v", part, err)
			}
			docs = append(docs, d)
		}
		check(t, docs)
	})
	t.Run("json", func(t *testing.T) {
		var buf bytes.Buffer
		if err := Encode(&buf, objs, FormatJSON); err != nil {
			t.Fatal(err)
		}
		var list struct {
			Kind  string           `json:"kind"`
			Items []map[string]any `json:"items"`
		}
		if err := json.Unmarshal(buf.Bytes(), &list); err != nil {
			t.Fatal(err)
		}
		if list.Kind != "List" {
			t.Errorf("kind = %q, want List", list.Kind)
		}
		check(t, list.Items)
	})
	t.Run("unknown format", func(t *testing.T) {
		if err := Encode(&bytes.Buffer{}, objs, "toml"); err == nil {
			t.Error("Encode with format toml: no error")
		}
	})
}

// TestRenderEKSSettings: the node role and discovery tags an install names (eksctl, Terraform
// modules and Auto Mode do not use Karpenter's getting-started names), and capacity
// reservations — ODCRs and Capacity Blocks for ML — with the reserved capacity type.
func TestRenderEKSSettings(t *testing.T) {
	objs, err := Render(Options{Families: []string{"h100"}, Role: RoleTraining, ClusterName: "prod",
		NodeRole: "eks-gpu-nodes", DiscoveryTags: map[string]string{"kubernetes.io/cluster/prod": "owned"},
		CapacityTypes: []string{"reserved", "on-demand"}, CapacityReservationIDs: []string{"cr-0123456789abcdef0"},
		CapacityReservationTags: map[string]string{"team": "ml"}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Encode(&buf, objs, FormatYAML); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"role: eks-gpu-nodes", "kubernetes.io/cluster/prod: owned", "- id: cr-0123456789abcdef0", "team: ml", "- reserved", "- on-demand"} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "KarpenterNodeRole") || strings.Contains(out, "karpenter.sh/discovery") {
		t.Errorf("the defaults leak next to the install's own names:\n%s", out)
	}
}
