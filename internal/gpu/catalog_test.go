package gpu

import (
	"encoding/json"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"os"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"testing"
	"time"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

func TestCatalogShapes(t *testing.T) {
	wantGPUs := map[string]string{"h100": "p5", "h200": "p5e", "a100": "p4d", "l40s": "g6e", "a10g": "g5", "l4": "g6"}
	for product, family := range wantGPUs {
		f, ok := ByGPU(product)
		if !ok || f.Name != family {
			t.Errorf("ByGPU(%q) = %q, %v; want family %q", product, f.Name, ok, family)
		}
	}
	if _, ok := ByGPU(""); ok {
		t.Error("ByGPU(\"\") found a CPU family")
	}
	for _, f := range Families() {
		if len(f.Sizes) == 0 || len(f.Zones) == 0 {
			t.Errorf("family %s has no sizes or zones", f.Name)
		}
		if f.SpotDiscount <= 0 || f.SpotDiscount >= 1 {
			t.Errorf("family %s spot discount %v outside (0,1)", f.Name, f.SpotDiscount)
		}
		for _, s := range f.Sizes {
			if s.VCPU <= 0 || s.MemoryGiB <= 0 || s.OnDemandUSD <= 0 {
				t.Errorf("%s: non-positive shape or price %+v", f.InstanceType(s), s)
			}
			if (f.GPU != "") != (s.GPUs > 0) {
				t.Errorf("%s: GPU product %q with %d GPUs", f.InstanceType(s), f.GPU, s.GPUs)
			}
		}
	}
	if got := len(GPUFamilies()); got != len(wantGPUs) {
		t.Errorf("GPUFamilies() has %d families, want %d", got, len(wantGPUs))
	}
}

// TestKwokInstanceTypesFileIsCurrent keeps test/testdata/gpu-instance-types.json in step with
// the catalogue (regenerate with `make generate`).
func TestKwokInstanceTypesFileIsCurrent(t *testing.T) {
	want, err := KwokInstanceTypesJSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../test/testdata/gpu-instance-types.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Error("test/testdata/gpu-instance-types.json is stale; run 'make generate'")
	}
}

func TestKwokInstanceTypesCarryGPULabels(t *testing.T) {
	data, err := KwokInstanceTypesJSON()
	if err != nil {
		t.Fatal(err)
	}
	var types []kwokInstanceType
	if err := json.Unmarshal(data, &types); err != nil {
		t.Fatal(err)
	}
	byName := map[string]kwokInstanceType{}
	for _, it := range types {
		byName[it.Name] = it
	}
	p5, ok := byName["p5.48xlarge"]
	if !ok {
		t.Fatal("no p5.48xlarge")
	}
	if p5.Resources[berthv1alpha1.GPUResource] != "8" || p5.Resources["cpu"] != "192" || p5.Resources["memory"] != "2048Gi" {
		t.Errorf("p5.48xlarge resources = %v", p5.Resources)
	}
	labels := map[string]string{}
	capacityTypes := map[string]bool{}
	for _, o := range p5.Offerings {
		for _, r := range o.Requirements {
			if r.Key == karpv1.CapacityTypeLabelKey {
				capacityTypes[r.Values[0]] = true
			}
			labels[r.Key] = r.Values[0]
		}
	}
	for k, v := range map[string]string{awsv1.LabelInstanceGPUCount: "8", awsv1.LabelInstanceGPUName: "h100", awsv1.LabelInstanceFamily: "p5", awsv1.LabelInstanceGPUMemory: "81920"} {
		if labels[k] != v {
			t.Errorf("p5.48xlarge offering label %s = %q, want %q", k, labels[k], v)
		}
	}
	if !capacityTypes["spot"] || !capacityTypes["on-demand"] {
		t.Errorf("p5.48xlarge capacity types = %v, want spot and on-demand", capacityTypes)
	}
	if _, ok := byName["m5.large"].Resources[berthv1alpha1.GPUResource]; ok {
		t.Error("CPU type m5.large advertises nvidia.com/gpu")
	}
}

func TestEveryGPUFamilyHasALaunchTime(t *testing.T) {
	for _, f := range GPUFamilies() {
		if f.LaunchTime <= 0 || f.LaunchTime > 15*time.Minute {
			t.Errorf("%s: launch time %s, want a positive estimate under 15 minutes", f.Name, f.LaunchTime)
		}
	}
}
