package scheduling_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// interPodCluster is 1,000 nodes (8 GPUs, 3 zones; 40 of them labelled pool=small) running
// 10,000 pods: ten per node from 50 services, every tenth with hostname anti-affinity to its own
// service, as a busy shared cluster has.
func interPodCluster() *scheduling.Snapshot {
	zones := []string{"us-west-2a", "us-west-2b", "us-west-2c"}
	nodes := make([]*corev1.Node, 1000)
	var pods []scheduling.PodOnNode
	for i := range nodes {
		nb := builders.Node(fmt.Sprintf("node-%04d", i)).GPU(8).Allocatable(corev1.ResourceCPU, "192").
			Allocatable(corev1.ResourceMemory, "2048Gi").Zone(zones[i%3])
		if i%25 == 0 {
			nb = nb.Label("pool", "small")
		}
		nodes[i] = nb.Obj()
		for j := range 10 {
			k := i*10 + j
			app := fmt.Sprintf("svc-%02d", k%50)
			pb := builders.Pod(fmt.Sprintf("p-%05d", k), fmt.Sprintf("team-%d", k%5)).Label("app", app).
				Request(corev1.ResourceCPU, "1")
			if k%10 == 0 {
				pb = pb.PodAntiAffinity(corev1.LabelHostname, "app", app)
			}
			pods = append(pods, scheduling.PodOnNode{Pod: pb.Obj(), Node: nodes[i].Name})
		}
	}
	return scheduling.NewSnapshot(nodes, pods, nil)
}

// BenchmarkPlaceInterPod: gangs of 64 one-GPU members with inter-pod rules on the 1,000-node,
// 10,000-pod cluster of interPodCluster (target: < 50 ms for the hostname anti-affinity gang:
// go test ./scheduling -run '^$' -bench PlaceInterPod -cpu 1).
func BenchmarkPlaceInterPod(b *testing.B) {
	member := func(name string) *builders.PodBuilder {
		return builders.Pod(name, "ml").Member("ddp").Label("job", "ddp").GPU(1).Request(corev1.ResourceCPU, "8")
	}
	cases := []struct {
		name string
		pod  func(name string) *corev1.Pod
		fits bool
	}{
		{"anti-affinity-hostname", func(n string) *corev1.Pod {
			return member(n).PodAntiAffinity(corev1.LabelHostname, "job", "ddp").Obj()
		}, true},
		{"anti-affinity-hostname-does-not-fit", func(n string) *corev1.Pod {
			return member(n).NodeSelector("pool", "small").PodAntiAffinity(corev1.LabelHostname, "job", "ddp").Obj()
		}, false},
		{"affinity-zone", func(n string) *corev1.Pod {
			return member(n).PodAffinity(corev1.LabelTopologyZone, "job", "ddp").Obj()
		}, true},
		{"affinity-zone-does-not-fit", func(n string) *corev1.Pod {
			return member(n).GPU(8).NodeSelector("pool", "small").PodAffinity(corev1.LabelTopologyZone, "job", "ddp").Obj()
		}, false},
		{"spread-zone", func(n string) *corev1.Pod {
			return member(n).Spread(corev1.LabelTopologyZone, 1, "job", "ddp").Obj()
		}, true},
		{"spread-hostname", func(n string) *corev1.Pod {
			return member(n).Spread(corev1.LabelHostname, 1, "job", "ddp").Obj()
		}, true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			s := interPodCluster()
			g := scheduling.Gang{}
			for i := range 64 {
				g.Members = append(g.Members, tc.pod(fmt.Sprintf("ddp-%02d", i)))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				r := scheduling.Place(s, g)
				if r.Fits() != tc.fits {
					b.Fatalf("fits = %v, want %v: %s", r.Fits(), tc.fits, r.Reason)
				}
			}
		})
	}
}
