package scheduling_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

func TestComputeShortfall(t *testing.T) {
	tests := []struct {
		name    string
		nodes   []*corev1.Node
		pods    []scheduling.PodOnNode
		volumes map[string]scheduling.VolumeTopology
		gang    scheduling.Gang
		missing []string
		used    []string
		domain  string
		hint    string
		notOK   bool
	}{
		{
			name:    "no nodes: every member is missing",
			gang:    scheduling.Gang{Members: members(4, gpuMember(1))},
			missing: []string{"m-00", "m-01", "m-02", "m-03"},
		},
		{
			name:    "7 GPUs free for a gang of 8: one member missing",
			nodes:   []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			pods:    []scheduling.PodOnNode{bound("busy", "a", 1)},
			gang:    scheduling.Gang{Members: members(8, gpuMember(1))},
			missing: []string{"m-07"},
			used:    []string{"a"},
		},
		{
			name:  "fits: nothing missing",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			gang:  scheduling.Gang{Members: members(8, gpuMember(1))},
		},
		{
			name: "topology: the domain holding most members wins, the rest are missing there",
			nodes: []*corev1.Node{
				builders.Node("a").GPU(2).Zone("z1").Obj(),
				builders.Node("b").GPU(3).Zone("z2").Obj(),
			},
			gang:    scheduling.Gang{Members: members(4, gpuMember(1)), TopologyKey: zone},
			missing: []string{"m-03"},
			domain:  "z2",
		},
		{
			name:    "topology: nothing placed leaves the domain open",
			nodes:   []*corev1.Node{builders.Node("a").GPU(8).Zone("z1").Obj()},
			pods:    []scheduling.PodOnNode{bound("busy", "a", 8)},
			gang:    scheduling.Gang{Members: members(2, gpuMember(1)), TopologyKey: zone},
			missing: []string{"m-00", "m-01"},
			hint:    "z1",
		},
		{
			name: "topology: new capacity is hinted where most nodes the members could use are, full or not",
			nodes: []*corev1.Node{
				builders.Node("a").GPU(8).Zone("z2").Obj(),
				builders.Node("b").GPU(8).Zone("z2").Obj(),
				builders.Node("c").GPU(8).Zone("z1").Obj(),
				builders.Node("t1").GPU(8).Zone("z3").Taint("dedicated", "other", corev1.TaintEffectNoSchedule).Obj(),
				builders.Node("t2").GPU(8).Zone("z3").Taint("dedicated", "other", corev1.TaintEffectNoSchedule).Obj(),
				builders.Node("t3").GPU(8).Zone("z3").Taint("dedicated", "other", corev1.TaintEffectNoSchedule).Obj(),
			},
			pods:    []scheduling.PodOnNode{bound("busy-a", "a", 8), bound("busy-b", "b", 8), bound("busy-c", "c", 8)},
			gang:    scheduling.Gang{Members: members(2, gpuMember(8)), TopologyKey: zone},
			missing: []string{"m-00", "m-01"},
			hint:    "z2",
		},
		{
			name: "topology: no node the members could use carries the key: the domain with most nodes",
			nodes: []*corev1.Node{
				builders.Node("cpu-1").Zone("z3").Obj(),
				builders.Node("cpu-2").Zone("z3").Obj(),
				builders.Node("cpu-3").Zone("z1").Obj(),
			},
			gang: scheduling.Gang{Members: members(2, func(n string) *builders.PodBuilder {
				return gpuMember(1)(n).NodeSelector("pool", "gpu")
			}), TopologyKey: zone},
			missing: []string{"m-00", "m-01"},
			hint:    "z3",
		},
		{
			name: "topology: nodes too small for a member even when empty are no evidence",
			nodes: []*corev1.Node{
				builders.Node("gpu").GPU(8).Zone("z2").Obj(),
				builders.Node("cpu-1").Zone("z1").Obj(),
				builders.Node("cpu-2").Zone("z1").Obj(),
			},
			pods:    []scheduling.PodOnNode{bound("busy", "gpu", 8)},
			gang:    scheduling.Gang{Members: members(2, gpuMember(4)), TopologyKey: zone},
			missing: []string{"m-00", "m-01"},
			hint:    "z2",
		},
		{
			name: "topology: a tie goes to the first domain in order",
			nodes: []*corev1.Node{
				builders.Node("a").Zone("z2").Obj(),
				builders.Node("b").Zone("z1").Obj(),
			},
			gang:    scheduling.Gang{Members: members(2, gpuMember(1)), TopologyKey: zone},
			missing: []string{"m-00", "m-01"},
			hint:    "z1",
		},
		{
			name:    "topology key on no node: everything missing",
			nodes:   []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			gang:    scheduling.Gang{Members: members(2, gpuMember(1)), TopologyKey: zone},
			missing: []string{"m-00", "m-01"},
		},
		{
			name:  "mixed classes: the class that fits is placed even after one that does not",
			nodes: []*corev1.Node{builders.Node("a").GPU(2).Obj()},
			gang: scheduling.Gang{Members: []*corev1.Pod{
				builders.Pod("big", "ml").Member("g").GPU(4).Obj(),
				builders.Pod("small", "ml").Member("g").GPU(1).Obj(),
			}},
			missing: []string{"big"},
		},
		{
			name:  "unsupported members have no shortfall",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			gang: scheduling.Gang{Members: []*corev1.Pod{func() *corev1.Pod {
				p := builders.Pod("m", "ml").Member("g").GPU(1).Obj()
				p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
				return p
			}()}},
			notOK: true,
		},
		{
			name:    "members blocked by their volumes have no shortfall",
			nodes:   []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			volumes: map[string]scheduling.VolumeTopology{"ml/m": {Blocked: "waits for its claim"}},
			gang:    scheduling.Gang{Members: []*corev1.Pod{builders.Pod("m", "ml").Member("g").GPU(1).Obj()}},
			notOK:   true,
		},
		{
			name:    "host-port members that share a node's port: one more node per member",
			nodes:   []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			gang:    scheduling.Gang{Members: members(3, func(n string) *builders.PodBuilder { return gpuMember(1)(n).HostPort(29500, corev1.ProtocolTCP, "") })},
			missing: []string{"m-01", "m-02"},
			used:    []string{"a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := scheduling.NewSnapshot(tt.nodes, tt.pods, nil)
			snap.SetVolumes(tt.volumes)
			sf, ok := scheduling.ComputeShortfall(snap, tt.gang)
			if ok == tt.notOK {
				t.Fatalf("ok = %v, want %v", ok, !tt.notOK)
			}
			var got []string
			for _, m := range sf.Missing {
				got = append(got, m.Name)
			}
			if diff := cmp.Diff(tt.missing, got); diff != "" {
				t.Errorf("missing (-want +got):\n%s", diff)
			}
			if tt.used != nil {
				if diff := cmp.Diff(tt.used, sf.Nodes); diff != "" {
					t.Errorf("nodes (-want +got):\n%s", diff)
				}
			}
			if sf.Domain != tt.domain {
				t.Errorf("domain = %q, want %q", sf.Domain, tt.domain)
			}
			if sf.Hint != tt.hint {
				t.Errorf("hint = %q, want %q", sf.Hint, tt.hint)
			}
		})
	}
}

// TestHolding: the pods that count on a node — bound there, or reserved by ReservePartial — and
// not those placed nowhere.
func TestHolding(t *testing.T) {
	bound := builders.Pod("bound", "ml").GPU(8).Obj()
	snap := scheduling.NewSnapshot([]*corev1.Node{builders.Node("a").GPU(8).Obj(), builders.Node("b").GPU(8).Obj()},
		[]scheduling.PodOnNode{{Pod: bound, Node: "a"}}, nil)
	reserved, nowhere := builders.Pod("reserved", "ml").GPU(8).Obj(), builders.Pod("nowhere", "ml").GPU(8).Obj()
	if n := snap.ReservePartial(scheduling.Gang{Members: []*corev1.Pod{reserved, nowhere}}); n != 1 {
		t.Fatalf("reserved %d, want 1 (one node free)", n)
	}
	got := snap.Holding([]*corev1.Pod{nowhere, reserved, bound})
	if len(got) != 2 || got[0] != reserved || got[1] != bound {
		t.Errorf("holding %v, want [reserved bound]", got)
	}
	if got := snap.Without([]*corev1.Pod{bound}).Holding([]*corev1.Pod{bound}); len(got) != 0 {
		t.Errorf("a pod left out by Without still holds room: %v", got)
	}
}

func TestWithoutFreesCapacity(t *testing.T) {
	seat := builders.Pod("seat", "ml").GPU(8).Obj()
	snap := scheduling.NewSnapshot([]*corev1.Node{builders.Node("a").GPU(8).Obj()},
		[]scheduling.PodOnNode{{Pod: seat, Node: "a"}}, nil)
	gang := scheduling.Gang{Members: members(8, gpuMember(1))}
	if scheduling.Place(snap, gang).Fits() {
		t.Fatal("the gang fits a node its seat fills")
	}
	freed := snap.Without([]*corev1.Pod{seat})
	if r := scheduling.Place(freed, gang); !r.Fits() {
		t.Fatalf("the gang does not fit once its seat is discounted: %s", r.Reason)
	}
	if got := snap.Free("a", "nvidia.com/gpu"); got != 0 {
		t.Errorf("Without changed the original snapshot: %d GPUs free", got)
	}
	if got := freed.Free("a", "nvidia.com/gpu"); got != 8 {
		t.Errorf("free GPUs after Without = %d, want 8", got)
	}
}

func TestReservePartialKeepsRoomFromLaterGangs(t *testing.T) {
	nodes := []*corev1.Node{builders.Node("a").GPU(8).Obj(), builders.Node("b").GPU(4).Obj()}
	snap := scheduling.NewSnapshot(nodes, nil, nil)
	var big []*corev1.Pod
	for i := range 16 {
		big = append(big, builders.Pod(fmt.Sprintf("big-%d", i), "ml").Member("big").GPU(1).Obj())
	}
	if placed := snap.ReservePartial(scheduling.Gang{Members: big}); placed != 12 {
		t.Fatalf("reserved %d members of the 16-member gang, want the 12 that fit", placed)
	}
	small := []*corev1.Pod{builders.Pod("small-0", "ml").Member("small").GPU(1).Obj()}
	if res := scheduling.Place(snap, scheduling.Gang{Members: small}); res.Fits() {
		t.Errorf("a later gang took room the waiting gang holds: %+v", res.Assignments)
	}
	if got := snap.Free("a", "nvidia.com/gpu") + snap.Free("b", "nvidia.com/gpu"); got != 0 {
		t.Errorf("%d GPUs left free after the reservation, want 0", got)
	}
}

// TestReservePlacedKeepsWhatPlaceCouldPlace: a gang that does not fit reserves, from Place's own
// attempt, the members it could place — across classes, not only up to the first class short
// of room — as ReservePartial would.
func TestReservePlacedKeepsWhatPlaceCouldPlace(t *testing.T) {
	nodes := []*corev1.Node{builders.Node("a").GPU(8).Obj(), builders.Node("b").GPU(4).Obj()}
	var members []*corev1.Pod
	for i := range 3 {
		members = append(members, builders.Pod(fmt.Sprintf("big-%d", i), "ml").Member("g").GPU(8).Obj())
	}
	for i := range 4 {
		members = append(members, builders.Pod(fmt.Sprintf("small-%d", i), "ml").Member("g").GPU(1).Obj())
	}
	g := scheduling.Gang{Members: members}
	placing, reserving := scheduling.NewSnapshot(nodes, nil, nil), scheduling.NewSnapshot(nodes, nil, nil)
	res := scheduling.Place(placing, g)
	if res.Fits() {
		t.Fatal("24 + 4 GPUs fit on 12")
	}
	if got, want := placing.ReservePlaced(g, res), reserving.ReservePartial(g); got != want || got != 5 {
		t.Fatalf("ReservePlaced reserved %d members, ReservePartial %d; want 5 (one 8-GPU member, four 1-GPU)", got, want)
	}
	for _, n := range []string{"a", "b"} {
		if placing.Free(n, "nvidia.com/gpu") != reserving.Free(n, "nvidia.com/gpu") {
			t.Errorf("node %s: %d GPUs free after ReservePlaced, %d after ReservePartial", n, placing.Free(n, "nvidia.com/gpu"), reserving.Free(n, "nvidia.com/gpu"))
		}
	}
}
