package scheduling_test

import (
	"fmt"
	"math/rand"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// BenchmarkPlace: 1,000 nodes with 8 GPUs each in 3 zones, 500 gangs of 2–16 one-GPU members
// placed and assumed one after another, half of them zone-constrained. Reports member
// placements per second (target ≥ 20,000 on one core: go test -bench Place -cpu 1).
func BenchmarkPlace(b *testing.B) { benchmarkPlace(b, false) }

// BenchmarkPlaceDRA is BenchmarkPlace with the GPUs published as ResourceSlices and every
// member claiming its GPU through a ResourceClaimTemplate, allocated by the structured
// allocator (target: within 2× of BenchmarkPlace's members/s).
func BenchmarkPlaceDRA(b *testing.B) { benchmarkPlace(b, true) }

func benchmarkPlace(b *testing.B, dra bool) {
	b.Helper()
	zones := []string{"us-west-2a", "us-west-2b", "us-west-2c"}
	nodes := make([]*corev1.Node, 1000)
	// As a controller reads them: objects with UIDs and versions, and the cache of what each
	// class selects it keeps across cycles.
	class := builders.GPUClass()
	class.UID, class.ResourceVersion = "class-uid", "1"
	res := scheduling.DynamicResources{Classes: []*resourceapi.DeviceClass{class},
		Templates:  []*resourceapi.ResourceClaimTemplate{builders.ClaimTemplate("gpu", "ml", 1, "")},
		Selections: scheduling.NewSelectionCache()}
	for i := range nodes {
		nb := builders.Node(fmt.Sprintf("node-%04d", i)).Allocatable(corev1.ResourceCPU, "192").
			Allocatable(corev1.ResourceMemory, "2048Gi").Zone(zones[i%3]).
			Taint("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule)
		if dra {
			sl := builders.GPUSlice(fmt.Sprintf("node-%04d", i), 8, "NVIDIA H100 80GB HBM3", "80Gi")
			sl.UID, sl.ResourceVersion = types.UID(fmt.Sprintf("slice-%04d", i)), "1"
			res.Slices = append(res.Slices, sl)
		} else {
			nb = nb.GPU(8)
		}
		nodes[i] = nb.Obj()
	}
	rng := rand.New(rand.NewSource(7))
	gangs := make([]scheduling.Gang, 500)
	members := 0
	for i := range gangs {
		n := 2 + rng.Intn(15)
		g := scheduling.Gang{}
		if i%2 == 0 {
			g.TopologyKey = corev1.LabelTopologyZone
		}
		for j := range n {
			pb := builders.Pod(fmt.Sprintf("g%03d-%02d", i, j), "ml").Member(fmt.Sprintf("g%03d", i)).
				Request(corev1.ResourceCPU, "8").Request(corev1.ResourceMemory, "64Gi").
				Tolerate("nvidia.com/gpu", "", corev1.TaintEffectNoSchedule)
			if dra {
				pb = pb.ClaimFromTemplate("gpu", "gpu")
			} else {
				pb = pb.GPU(1)
			}
			g.Members = append(g.Members, pb.Obj())
		}
		members += n
		gangs[i] = g
	}
	b.ReportAllocs()
	b.ResetTimer()
	placed := 0
	for b.Loop() {
		b.StopTimer()
		s := scheduling.NewSnapshot(nodes, nil, nil)
		if dra {
			if err := s.SetDynamicResources(res); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		for _, g := range gangs {
			r := scheduling.Place(s, g)
			if !r.Fits() {
				b.Fatalf("gang did not fit: %s", r.Reason)
			}
			if err := s.Assume(g.Members, r); err != nil {
				b.Fatal(err)
			}
			placed += len(g.Members)
		}
	}
	b.ReportMetric(float64(placed)/b.Elapsed().Seconds(), "members/s")
	b.ReportMetric(float64(members), "members/op")
}
