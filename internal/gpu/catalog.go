// Package gpu is berth's catalogue of AWS GPU instance families: which GPU each carries, and the
// shape and list price of every size. The rig's Karpenter instance types, the kwok NodePools of
// `berth dev up` and the NodePool templates are all built from it, so they agree.
//
// Prices are approximate us-east-1 Linux on-demand list prices in USD per hour; spot prices
// use a fixed discount per family. They drive Karpenter's cheapest-offering choice on the rig,
// and the GPU-seconds-wasted figures of the benchmarks; they are not billing data.
package gpu

import (
	"sort"
	"time"
)

// Family is one EC2 instance family.
type Family struct {
	// Name is the EC2 family, e.g. "p5".
	Name string
	// GPU is the GPU product in Karpenter's label form ("h100"); empty for CPU families.
	GPU string
	// GPUMemoryMiB is the memory of one GPU, as EC2 reports it.
	GPUMemoryMiB int64
	// SpotDiscount is the spot price as a fraction of on-demand.
	SpotDiscount float64
	// Zones the family is offered in on the rig.
	Zones []string
	// EFA is the number of EFA devices (vpc.amazonaws.com/efa) of the family's largest size;
	// 0 for families without EFA.
	EFA int64
	// Sizes are the family's instance sizes.
	Sizes []Size
	// LaunchTime is about how long a node of the family takes from its NodeClaim to Ready with
	// its GPUs allocatable (EC2 launch, the EKS GPU AMI's boot, the NVIDIA driver and device
	// plugin): the large multi-GPU instances take longer to boot and set up their GPUs and
	// fabric. An estimate for planning (berth simulate), not a measurement of your cluster.
	LaunchTime time.Duration
}

// Size is one instance type of a family.
type Size struct {
	// Name is the size suffix, e.g. "48xlarge".
	Name string
	// VCPU and MemoryGiB are the instance's vCPUs and memory.
	VCPU      int64
	MemoryGiB int64
	// GPUs is the number of GPUs.
	GPUs int64
	// OnDemandUSD is the on-demand price per hour.
	OnDemandUSD float64
}

// InstanceType is the full EC2 name, e.g. "p5.48xlarge".
func (f Family) InstanceType(s Size) string { return f.Name + "." + s.Name }

var zones3 = []string{"us-west-2a", "us-west-2b", "us-west-2c"}

// families is the catalogue, keyed by the GPU product name users pass to --family.
var families = []Family{
	{Name: "p5", GPU: "h100", GPUMemoryMiB: 81920, SpotDiscount: 0.30, LaunchTime: 360 * time.Second, Zones: []string{"us-west-2a", "us-west-2b"}, EFA: 32,
		Sizes: []Size{{"48xlarge", 192, 2048, 8, 98.32}}},
	{Name: "p5e", GPU: "h200", GPUMemoryMiB: 143771, SpotDiscount: 0.30, LaunchTime: 360 * time.Second, Zones: []string{"us-west-2b", "us-west-2c"}, EFA: 32,
		Sizes: []Size{{"48xlarge", 192, 2048, 8, 108.16}}},
	{Name: "p4d", GPU: "a100", GPUMemoryMiB: 40960, SpotDiscount: 0.30, LaunchTime: 300 * time.Second, Zones: zones3, EFA: 4,
		Sizes: []Size{{"24xlarge", 96, 1152, 8, 32.77}}},
	{Name: "g6e", GPU: "l40s", GPUMemoryMiB: 46068, SpotDiscount: 0.35, LaunchTime: 120 * time.Second, Zones: zones3, Sizes: []Size{
		{"xlarge", 4, 32, 1, 1.861}, {"2xlarge", 8, 64, 1, 2.242}, {"4xlarge", 16, 128, 1, 3.004},
		{"8xlarge", 32, 256, 1, 4.529}, {"12xlarge", 48, 384, 4, 10.493}, {"16xlarge", 64, 512, 1, 7.577},
		{"24xlarge", 96, 768, 4, 15.066}, {"48xlarge", 192, 1536, 8, 30.131}}},
	{Name: "g5", GPU: "a10g", GPUMemoryMiB: 24576, SpotDiscount: 0.30, LaunchTime: 110 * time.Second, Zones: zones3, Sizes: []Size{
		{"xlarge", 4, 16, 1, 1.006}, {"2xlarge", 8, 32, 1, 1.212}, {"4xlarge", 16, 64, 1, 1.624},
		{"8xlarge", 32, 128, 1, 2.448}, {"12xlarge", 48, 192, 4, 5.672}, {"16xlarge", 64, 256, 1, 4.096},
		{"24xlarge", 96, 384, 4, 8.144}, {"48xlarge", 192, 768, 8, 16.288}}},
	{Name: "g6", GPU: "l4", GPUMemoryMiB: 22888, SpotDiscount: 0.35, LaunchTime: 110 * time.Second, Zones: zones3, Sizes: []Size{
		{"xlarge", 4, 16, 1, 0.805}, {"2xlarge", 8, 32, 1, 0.978}, {"4xlarge", 16, 64, 1, 1.323},
		{"8xlarge", 32, 128, 1, 2.014}, {"12xlarge", 48, 192, 4, 4.602}, {"16xlarge", 64, 256, 1, 3.397},
		{"24xlarge", 96, 384, 4, 6.675}, {"48xlarge", 192, 768, 8, 13.35}}},
	{Name: "m5", SpotDiscount: 0.40, Zones: zones3, Sizes: []Size{
		{"large", 2, 8, 0, 0.096}, {"xlarge", 4, 16, 0, 0.192}, {"2xlarge", 8, 32, 0, 0.384}, {"4xlarge", 16, 64, 0, 0.768}}},
	{Name: "c5", SpotDiscount: 0.40, Zones: zones3, Sizes: []Size{
		{"xlarge", 4, 8, 0, 0.17}, {"4xlarge", 16, 32, 0, 0.68}}},
}

// Families returns every family in the catalogue, GPU families first, in a stable order.
func Families() []Family {
	out := make([]Family, len(families))
	copy(out, families)
	return out
}

// GPUFamilies returns the GPU families, sorted by GPU product name.
func GPUFamilies() []Family {
	var out []Family
	for _, f := range families {
		if f.GPU != "" {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GPU < out[j].GPU })
	return out
}

// ByGPU finds the family carrying a GPU product ("h100"); ok is false if there is none.
func ByGPU(product string) (Family, bool) {
	for _, f := range families {
		if f.GPU != "" && f.GPU == product {
			return f, true
		}
	}
	return Family{}, false
}
