package scheduling_test

import (
	"fmt"
	"math/rand"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// BenchmarkPlace: 1,000 nodes with 8 GPUs each in 3 zones, 500 gangs of 2–16 one-GPU members
// placed and assumed one after another, half of them zone-constrained. Reports member
// placements per second (target ≥ 20,000 on one core: go test -bench Place -cpu 1).
func BenchmarkPlace(b *testing.B) {
	zones := []string{"us-west-2a", "us-west-2b", "us-west-2c"}
	nodes := make([]*corev1.Node, 1000)
	for i := range nodes {
		nodes[i] = builders.Node(fmt.Sprintf("node-%04d", i)).GPU(8).Allocatable(corev1.ResourceCPU, "192").
			Allocatable(corev1.ResourceMemory, "2048Gi").Zone(zones[i%3]).
			Taint("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule).Obj()
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
			g.Members = append(g.Members, builders.Pod(fmt.Sprintf("g%03d-%02d", i, j), "ml").Member(fmt.Sprintf("g%03d", i)).
				GPU(1).Request(corev1.ResourceCPU, "8").Request(corev1.ResourceMemory, "64Gi").
				Tolerate("nvidia.com/gpu", "", corev1.TaintEffectNoSchedule).Obj())
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
