package scheduling_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

const zone = corev1.LabelTopologyZone

// members makes n pods named prefix-0..n-1 from a builder function.
func members(n int, mk func(name string) *builders.PodBuilder) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = mk(fmt.Sprintf("m-%02d", i)).Obj()
	}
	return out
}

func gpuMember(gpus int) func(string) *builders.PodBuilder {
	return func(name string) *builders.PodBuilder { return builders.Pod(name, "ml").Member("g").GPU(gpus) }
}

// bound is an existing pod on a node using gpus GPUs.
func bound(name, node string, gpus int) scheduling.PodOnNode {
	return scheduling.PodOnNode{Pod: builders.Pod(name, "other").GPU(gpus).Obj(), Node: node}
}

// zoneSelector is a volume's node affinity to one zone.
func zoneSelector(z string) corev1.NodeSelector {
	return corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: zone, Operator: corev1.NodeSelectorOpIn, Values: []string{z}},
	}}}}
}

// perNode counts members per node.
func perNode(r scheduling.Result) map[string]int {
	out := map[string]int{}
	for _, a := range r.Assignments {
		out[a.Node]++
	}
	return out
}

func TestPlace(t *testing.T) {
	tests := []struct {
		name        string
		nodes       []*corev1.Node
		pods        []scheduling.PodOnNode
		unavailable map[string]string
		volumes     map[string]scheduling.VolumeTopology
		gang        scheduling.Gang
		want        map[string]int // members per node; nil when it must not fit
		reason      []string       // substrings of the reason when it does not fit
		unsupported bool
		blocked     bool
	}{
		{
			name:  "fits on one node",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			gang:  scheduling.Gang{Members: members(8, gpuMember(1))},
			want:  map[string]int{"a": 8},
		},
		{
			name:  "the release term is met at release: members place as without it",
			nodes: []*corev1.Node{builders.Node("a").GPU(4).Obj(), builders.Node("b").GPU(4).Obj()},
			gang: scheduling.Gang{Members: members(8, func(name string) *builders.PodBuilder {
				return gpuMember(1)(name).WithReleaseTerm("g")
			})},
			want: map[string]int{"a": 4, "b": 4},
		},
		{
			name: "the release term needs its topology key on the node",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj(), func() *corev1.Node {
				n := builders.Node("b").GPU(8).Obj()
				delete(n.Labels, corev1.LabelOSStable)
				return n
			}()},
			gang: scheduling.Gang{Members: members(12, func(name string) *builders.PodBuilder {
				return gpuMember(1)(name).WithReleaseTerm("g")
			})},
			reason: []string{"1 didn't have the label kubernetes.io/os"},
		},
		{
			name:   "seven free GPUs for eight members",
			nodes:  []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			pods:   []scheduling.PodOnNode{bound("other", "a", 1)},
			gang:   scheduling.Gang{Members: members(8, gpuMember(1))},
			reason: []string{"7 of 8 members fit", "needs 8 nvidia.com/gpu for 8 members", "have 7 free"},
		},
		{
			name:  "fewest nodes: the big node over two small ones",
			nodes: []*corev1.Node{builders.Node("a-small").GPU(4).Obj(), builders.Node("b-big").GPU(8).Obj(), builders.Node("c-small").GPU(4).Obj()},
			gang:  scheduling.Gang{Members: members(8, gpuMember(1))},
			want:  map[string]int{"b-big": 8},
		},
		{
			name:  "largest first, tightest last",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj(), builders.Node("b").GPU(8).Obj(), builders.Node("c").GPU(4).Obj()},
			gang:  scheduling.Gang{Members: members(10, gpuMember(1))},
			want:  map[string]int{"a": 8, "c": 2},
		},
		{
			name:  "free capacity on a busy node first",
			nodes: []*corev1.Node{builders.Node("a-empty").GPU(8).Obj(), builders.Node("b-busy").GPU(8).Obj()},
			pods:  []scheduling.PodOnNode{bound("x", "b-busy", 4)},
			gang:  scheduling.Gang{Members: members(4, gpuMember(1))},
			want:  map[string]int{"b-busy": 4},
		},
		{
			name: "topology: the zone where the gang fits",
			nodes: []*corev1.Node{
				builders.Node("a1").GPU(8).Zone("a").Obj(),
				builders.Node("b1").GPU(4).Zone("b").Obj(), builders.Node("b2").GPU(4).Zone("b").Obj(),
			},
			pods: []scheduling.PodOnNode{bound("x", "a1", 1)},
			gang: scheduling.Gang{Members: members(8, gpuMember(1)), TopologyKey: zone},
			want: map[string]int{"b1": 4, "b2": 4},
		},
		{
			name: "topology: total is enough but no zone is",
			nodes: []*corev1.Node{
				builders.Node("a1").GPU(8).Zone("a").Obj(), builders.Node("b1").GPU(8).Zone("b").Obj(),
			},
			pods:   []scheduling.PodOnNode{bound("x", "a1", 1), bound("y", "b1", 2)},
			gang:   scheduling.Gang{Members: members(8, gpuMember(1)), TopologyKey: zone},
			reason: []string{"7 of 8 members fit in the best topology.kubernetes.io/zone (a, of 2)", "needs 8 nvidia.com/gpu for 8 members in one topology.kubernetes.io/zone, the best topology.kubernetes.io/zone has 7 free"},
		},
		{
			name:   "topology key on no node",
			nodes:  []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			gang:   scheduling.Gang{Members: members(2, gpuMember(1)), TopologyKey: "example.com/nvlink-domain"},
			reason: []string{"no node has the label example.com/nvlink-domain"},
		},
		{
			name:   "untolerated taint",
			nodes:  []*corev1.Node{builders.Node("a").GPU(8).Taint("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule).Obj()},
			gang:   scheduling.Gang{Members: members(1, gpuMember(1))},
			reason: []string{"no node can take member m-00", "1 had untolerated taint {nvidia.com/gpu: true}"},
		},
		{
			name:  "tolerated taint",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Taint("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule).Obj()},
			gang: scheduling.Gang{Members: members(2, func(n string) *builders.PodBuilder {
				return gpuMember(1)(n).Tolerate("nvidia.com/gpu", "", corev1.TaintEffectNoSchedule)
			})},
			want: map[string]int{"a": 2},
		},
		{
			name:  "PreferNoSchedule taints do not block",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Taint("x", "y", corev1.TaintEffectPreferNoSchedule).Obj()},
			gang:  scheduling.Gang{Members: members(1, gpuMember(1))},
			want:  map[string]int{"a": 1},
		},
		{
			name:  "node selector",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Label("gpu", "l4").Obj(), builders.Node("b").GPU(8).Label("gpu", "h100").Obj()},
			gang: scheduling.Gang{Members: members(3, func(n string) *builders.PodBuilder {
				return gpuMember(1)(n).NodeSelector("gpu", "h100")
			})},
			want: map[string]int{"b": 3},
		},
		{
			name:  "required node affinity",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Label("family", "g6").Obj(), builders.Node("b").GPU(8).Label("family", "p5").Obj()},
			gang: scheduling.Gang{Members: members(2, func(n string) *builders.PodBuilder {
				return gpuMember(1)(n).NodeAffinityIn("family", "p4d", "p5")
			})},
			want: map[string]int{"b": 2},
		},
		{
			name:        "cordoned and unavailable nodes are skipped",
			nodes:       []*corev1.Node{builders.Node("a").GPU(8).Unschedulable().Obj(), builders.Node("b").GPU(8).Obj(), builders.Node("c").GPU(8).Obj()},
			unavailable: map[string]string{"b": "AcceleratedHardwareReady is False"},
			gang:        scheduling.Gang{Members: members(8, gpuMember(1))},
			want:        map[string]int{"c": 8},
		},
		{
			name:        "unavailable reason is reported",
			nodes:       []*corev1.Node{builders.Node("b").GPU(8).Obj()},
			unavailable: map[string]string{"b": "AcceleratedHardwareReady is False"},
			gang:        scheduling.Gang{Members: members(1, gpuMember(1))},
			reason:      []string{"1 unavailable (AcceleratedHardwareReady is False)"},
		},
		{
			name:  "init container larger than the app counts",
			nodes: []*corev1.Node{builders.Node("a").Obj()}, // 8 CPUs
			gang: scheduling.Gang{Members: members(2, func(n string) *builders.PodBuilder {
				return builders.Pod(n, "ml").Request(corev1.ResourceCPU, "1").InitContainer("warmup", "5", false)
			})},
			reason: []string{"1 of 2 members fit", "needs 10 cpu"},
		},
		{
			name:  "sidecars add to the app",
			nodes: []*corev1.Node{builders.Node("a").Obj()}, // 8 CPUs
			gang: scheduling.Gang{Members: members(2, func(n string) *builders.PodBuilder {
				return builders.Pod(n, "ml").Request(corev1.ResourceCPU, "3").InitContainer("proxy", "1", true)
			})},
			want: map[string]int{"a": 2},
		},
		{
			name:  "overhead counts",
			nodes: []*corev1.Node{builders.Node("a").Obj()},
			gang: scheduling.Gang{Members: members(2, func(n string) *builders.PodBuilder {
				return builders.Pod(n, "ml").Request(corev1.ResourceCPU, "3").Overhead(corev1.ResourceCPU, "2")
			})},
			reason: []string{"1 of 2 members fit"},
		},
		{
			name:   "node pod limit",
			nodes:  []*corev1.Node{builders.Node("a").GPU(8).Allocatable(corev1.ResourcePods, "3").Obj()},
			pods:   []scheduling.PodOnNode{bound("x", "a", 0)},
			gang:   scheduling.Gang{Members: members(3, gpuMember(1))},
			reason: []string{"2 of 3 members fit", "needs 3 pods"},
		},
		{
			name:  "finished pods free their capacity",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			pods: []scheduling.PodOnNode{{Pod: builders.Pod("done", "x").GPU(8).Phase(corev1.PodSucceeded).Obj(), Node: "a"},
				{Pod: builders.Pod("failed", "x").GPU(8).Phase(corev1.PodFailed).Obj(), Node: "a"}},
			gang: scheduling.Gang{Members: members(8, gpuMember(1))},
			want: map[string]int{"a": 8},
		},
		{
			name:  "extended resource no node has",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			gang: scheduling.Gang{Members: members(1, func(n string) *builders.PodBuilder {
				return builders.Pod(n, "ml").Request("nvidia.com/mig-1g.10gb", "1")
			})},
			reason: []string{"needs 1 nvidia.com/mig-1g.10gb", "have 0 free"},
		},
		{
			name:   "each member too big for any node",
			nodes:  []*corev1.Node{builders.Node("a").GPU(4).Obj(), builders.Node("b").GPU(4).Obj()},
			gang:   scheduling.Gang{Members: members(1, gpuMember(8))},
			reason: []string{"each member needs 8 nvidia.com/gpu on one node, the largest free on an eligible node is 4"},
		},
		{
			name:  "mixed members: launcher on CPU, workers on GPUs",
			nodes: []*corev1.Node{builders.Node("cpu").Obj(), builders.Node("gpu").GPU(8).Taint("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule).Obj()},
			gang: scheduling.Gang{Members: append(members(4, func(n string) *builders.PodBuilder {
				return gpuMember(2)(n).Tolerate("nvidia.com/gpu", "", corev1.TaintEffectNoSchedule)
			}),
				builders.Pod("launcher", "ml").Member("g").Request(corev1.ResourceCPU, "6").Obj())},
			want: map[string]int{"gpu": 4, "cpu": 1},
		},
		{
			name:  "anti-affinity: one member per node",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj(), builders.Node("b").GPU(8).Obj(), builders.Node("c").GPU(8).Obj(), builders.Node("d").GPU(8).Obj()},
			gang: scheduling.Gang{Members: members(4, func(n string) *builders.PodBuilder {
				return gpuMember(8)(n).Label("job", "ddp").PodAntiAffinity(corev1.LabelHostname, "job", "ddp")
			})},
			want: map[string]int{"a": 1, "b": 1, "c": 1, "d": 1},
		},
		{
			name:  "anti-affinity: too few nodes",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj(), builders.Node("b").GPU(8).Obj()},
			gang: scheduling.Gang{Members: members(3, func(n string) *builders.PodBuilder {
				return gpuMember(1)(n).Label("job", "ddp").PodAntiAffinity(corev1.LabelHostname, "job", "ddp")
			})},
			reason: []string{"2 of 3 members fit", "anti-affinity"},
		},
		{
			name:  "existing pod's anti-affinity repels members",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj(), builders.Node("b").GPU(8).Obj()},
			pods:  []scheduling.PodOnNode{{Node: "a", Pod: builders.Pod("loner", "ml").PodAntiAffinity(corev1.LabelHostname, "job", "ddp").Obj()}},
			gang: scheduling.Gang{Members: members(2, func(n string) *builders.PodBuilder {
				return gpuMember(1)(n).Label("job", "ddp").PodAntiAffinity(corev1.LabelHostname, "other", "x")
			})},
			want: map[string]int{"b": 2},
		},
		{
			name:  "pod affinity to an existing parameter server's zone",
			nodes: []*corev1.Node{builders.Node("a1").GPU(8).Zone("a").Obj(), builders.Node("b1").GPU(8).Zone("b").Obj()},
			pods:  []scheduling.PodOnNode{{Node: "b1", Pod: builders.Pod("ps", "ml").Label("role", "ps").Obj()}},
			gang: scheduling.Gang{Members: members(3, func(n string) *builders.PodBuilder {
				return gpuMember(1)(n).PodAffinity(zone, "role", "ps")
			})},
			want: map[string]int{"b1": 3},
		},
		{
			name:  "pod affinity among members: the first may go anywhere",
			nodes: []*corev1.Node{builders.Node("a1").GPU(2).Zone("a").Obj(), builders.Node("b1").GPU(8).Zone("b").Obj()},
			gang: scheduling.Gang{Members: members(4, func(n string) *builders.PodBuilder {
				return gpuMember(1)(n).Label("job", "ddp").PodAffinity(zone, "job", "ddp")
			})},
			want: map[string]int{"b1": 4},
		},
		{
			name:  "topology spread across zones",
			nodes: []*corev1.Node{builders.Node("a1").GPU(8).Zone("a").Obj(), builders.Node("b1").GPU(8).Zone("b").Obj()},
			gang: scheduling.Gang{Members: members(4, func(n string) *builders.PodBuilder {
				return gpuMember(1)(n).Label("job", "ddp").Spread(zone, 1, "job", "ddp")
			})},
			want: map[string]int{"a1": 2, "b1": 2},
		},
		{
			name:  "dynamic resource claims are not modelled",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			gang: scheduling.Gang{Members: []*corev1.Pod{func() *corev1.Pod {
				p := gpuMember(1)("m-00").Obj()
				p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
				return p
			}()}},
			reason:      []string{"member m-00 uses dynamic resource claims"},
			unsupported: true,
		},
		{
			name: "a volume's node affinity (an EBS volume in zone b) confines its member",
			nodes: []*corev1.Node{
				builders.Node("a").GPU(8).Zone("a").Obj(), builders.Node("b").GPU(8).Zone("b").Obj(),
			},
			volumes: map[string]scheduling.VolumeTopology{"ml/m-01": {Required: []corev1.NodeSelector{zoneSelector("b")}}},
			gang: scheduling.Gang{Members: members(2, func(n string) *builders.PodBuilder {
				return gpuMember(8)(n).PVC("ckpt", n+"-ckpt")
			})},
			want: map[string]int{"a": 1, "b": 1},
		},
		{
			name: "volume topology that no node with room matches",
			nodes: []*corev1.Node{
				builders.Node("a").GPU(8).Zone("a").Obj(), builders.Node("b").GPU(2).Zone("b").Obj(),
			},
			volumes: map[string]scheduling.VolumeTopology{"ml/m-00": {Required: []corev1.NodeSelector{zoneSelector("b")}}},
			gang:    scheduling.Gang{Members: members(1, gpuMember(8))},
			reason:  []string{"needs 8 nvidia.com/gpu", "didn't match the node affinity of the member's volumes"},
		},
		{
			name:  "zone-less volumes (EFS, FSx) place anywhere",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Zone("a").Obj()},
			volumes: map[string]scheduling.VolumeTopology{
				"ml/m-00": {}, "ml/m-01": {},
			},
			gang: scheduling.Gang{Members: members(2, func(n string) *builders.PodBuilder {
				return gpuMember(4)(n).PVC("shared", "fsx")
			})},
			want: map[string]int{"a": 2},
		},
		{
			name:    "a member whose claim waits to be bound blocks the gang; capacity would not help",
			nodes:   []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			volumes: map[string]scheduling.VolumeTopology{"ml/m-01": {Blocked: "waits for PersistentVolumeClaim ml/data to be bound"}},
			gang:    scheduling.Gang{Members: members(2, gpuMember(1))},
			reason:  []string{"member m-01 waits for PersistentVolumeClaim ml/data to be bound"},
			blocked: true,
		},
		{
			name:  "host ports: members that share one go on different nodes",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj(), builders.Node("b").GPU(8).Obj()},
			gang: scheduling.Gang{Members: members(2, func(n string) *builders.PodBuilder {
				return gpuMember(1)(n).HostPort(29500, corev1.ProtocolTCP, "")
			})},
			want: map[string]int{"a": 1, "b": 1},
		},
		{
			name:  "host ports: more members than nodes do not fit, and the reason names the port",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj(), builders.Node("b").GPU(8).Obj()},
			gang: scheduling.Gang{Members: members(3, func(n string) *builders.PodBuilder {
				return gpuMember(1)(n).HostNetwork(29500)
			})},
			reason: []string{"2 of 3 members fit", "host ports (0.0.0.0/TCP/29500)"},
		},
		{
			name:  "host ports: a port used by a pod already on a node keeps members off it",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj(), builders.Node("b").GPU(8).Obj()},
			pods:  []scheduling.PodOnNode{{Pod: builders.Pod("exporter", "monitoring").HostPort(29500, corev1.ProtocolTCP, "").Obj(), Node: "a"}},
			gang: scheduling.Gang{Members: members(1, func(n string) *builders.PodBuilder {
				return gpuMember(1)(n).HostPort(29500, corev1.ProtocolTCP, "")
			})},
			want: map[string]int{"b": 1},
		},
		{
			name:  "host ports: other protocol, other host IP and finished pods do not conflict",
			nodes: []*corev1.Node{builders.Node("a").GPU(8).Obj()},
			pods: []scheduling.PodOnNode{
				{Pod: builders.Pod("udp", "x").HostPort(29500, corev1.ProtocolUDP, "").Obj(), Node: "a"},
				{Pod: builders.Pod("done", "x").HostPort(29501, corev1.ProtocolTCP, "").Phase(corev1.PodSucceeded).Obj(), Node: "a"},
			},
			gang: scheduling.Gang{Members: []*corev1.Pod{
				gpuMember(1)("m-00").HostPort(29500, corev1.ProtocolTCP, "").Obj(),
				gpuMember(1)("m-01").HostPort(29501, corev1.ProtocolTCP, "").Obj(),
				gpuMember(1)("m-02").HostPort(29502, corev1.ProtocolTCP, "10.0.0.1").Obj(),
				gpuMember(1)("m-03").HostPort(29502, corev1.ProtocolTCP, "10.0.0.2").Obj(),
			}},
			want: map[string]int{"a": 4},
		},
		{
			name:   "empty gang",
			nodes:  []*corev1.Node{builders.Node("a").Obj()},
			gang:   scheduling.Gang{},
			reason: []string{"no members"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := scheduling.NewSnapshot(tt.nodes, tt.pods, tt.unavailable)
			s.SetVolumes(tt.volumes)
			r := scheduling.Place(s, tt.gang)
			if tt.want == nil {
				if r.Fits() {
					t.Fatalf("placed %v; want no fit", perNode(r))
				}
				for _, want := range tt.reason {
					if !strings.Contains(r.Reason, want) {
						t.Errorf("reason %q\nlacks %q", r.Reason, want)
					}
				}
				if r.Unsupported != tt.unsupported || r.Blocked != tt.blocked {
					t.Errorf("Unsupported, Blocked = %v, %v; want %v, %v", r.Unsupported, r.Blocked, tt.unsupported, tt.blocked)
				}
				return
			}
			if !r.Fits() {
				t.Fatalf("does not fit: %s", r.Reason)
			}
			if diff := cmp.Diff(tt.want, perNode(r)); diff != "" {
				t.Errorf("members per node (-want +got):\n%s", diff)
			}
			if len(r.Assignments) != len(tt.gang.Members) {
				t.Errorf("%d assignments for %d members", len(r.Assignments), len(tt.gang.Members))
			}
			for i, a := range r.Assignments {
				if a.Pod != tt.gang.Members[i].Name {
					t.Errorf("assignment %d is for %s, want %s (member order)", i, a.Pod, tt.gang.Members[i].Name)
				}
			}
		})
	}
}

func TestAssumeKeepsGangsApart(t *testing.T) {
	// 12 free GPUs, two gangs of 8: exactly one fits, and after it is assumed the other does not.
	nodes := []*corev1.Node{builders.Node("a").GPU(8).Obj(), builders.Node("b").GPU(4).Obj()}
	s := scheduling.NewSnapshot(nodes, nil, nil)
	g1 := scheduling.Gang{Members: members(8, gpuMember(1))}
	g2 := scheduling.Gang{Members: members(8, func(n string) *builders.PodBuilder { return gpuMember(1)("two-" + n) })}
	r1 := scheduling.Place(s, g1)
	if !r1.Fits() {
		t.Fatalf("first gang: %s", r1.Reason)
	}
	if r := scheduling.Place(s, g2); !r.Fits() {
		t.Fatalf("second gang alone should fit: %s", r.Reason)
	}
	if err := s.Assume(g1.Members, r1); err != nil {
		t.Fatal(err)
	}
	r2 := scheduling.Place(s, g2)
	if r2.Fits() {
		t.Fatalf("second gang placed on GPUs promised to the first: %v", perNode(r2))
	}
	if !strings.Contains(r2.Reason, "4 of 8 members fit") {
		t.Errorf("reason = %q", r2.Reason)
	}
	if got := s.Free("a", "nvidia.com/gpu"); got != 0 {
		t.Errorf("free GPUs on a after assume = %d, want 0", got)
	}
	if err := s.Assume(g2.Members, r2); err == nil {
		t.Error("assuming a placement that does not fit succeeded")
	}
}

func TestCloneIsIndependent(t *testing.T) {
	s := scheduling.NewSnapshot([]*corev1.Node{builders.Node("a").GPU(8).Obj()}, nil, nil)
	c := s.Clone()
	g := scheduling.Gang{Members: members(8, gpuMember(1))}
	if err := c.Assume(g.Members, scheduling.Place(c, g)); err != nil {
		t.Fatal(err)
	}
	if s.Free("a", "nvidia.com/gpu") != 8 || c.Free("a", "nvidia.com/gpu") != 0 {
		t.Errorf("free after assume on clone: original %d, clone %d", s.Free("a", "nvidia.com/gpu"), c.Free("a", "nvidia.com/gpu"))
	}
}

func TestPlaceIsDeterministic(t *testing.T) {
	var nodes []*corev1.Node
	for i := range 20 {
		nodes = append(nodes, builders.Node(fmt.Sprintf("n%02d", i)).GPU(8).Zone([]string{"a", "b", "c"}[i%3]).Obj())
	}
	g := scheduling.Gang{Members: members(12, gpuMember(1)), TopologyKey: zone}
	first := scheduling.Place(scheduling.NewSnapshot(nodes, nil, nil), g)
	// Same snapshot built from nodes in another order.
	rev := append([]*corev1.Node(nil), nodes...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	for range 5 {
		if diff := cmp.Diff(first, scheduling.Place(scheduling.NewSnapshot(rev, nil, nil), g), cmpopts.IgnoreUnexported(scheduling.Result{})); diff != "" {
			t.Fatalf("placement changed between runs:\n%s", diff)
		}
	}
}

// TestTolerationSecondsDoNotSplitMembers: identical members whose tolerations carry
// tolerationSeconds (as the DefaultTolerationSeconds admission plugin adds) are one class.
func TestTolerationSecondsDoNotSplitMembers(t *testing.T) {
	secs := func() *int64 { v := int64(300); return &v }
	nodes := []*corev1.Node{builders.Node("a").GPU(8).Obj()}
	pods := []scheduling.PodOnNode{bound("x", "a", 1)}
	ms := members(8, gpuMember(1))
	for _, m := range ms {
		m.Spec.Tolerations = append(m.Spec.Tolerations, corev1.Toleration{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs()})
	}
	r := scheduling.Place(scheduling.NewSnapshot(nodes, pods, nil), scheduling.Gang{Members: ms})
	if !strings.Contains(r.Reason, "needs 8 nvidia.com/gpu for 8 members") {
		t.Errorf("reason = %q", r.Reason)
	}
}

// TestAssumeOnAnotherSnapshot: a placement made on one snapshot is assumed on another whose
// resources were indexed in another order (admission replays its promises on the snapshot that
// counts booting nodes). The GPUs are counted as GPUs there, not as whatever resource holds
// their slot.
func TestAssumeOnAnotherSnapshot(t *testing.T) {
	b := builders.Node("b").GPU(8).Obj()
	placed := scheduling.NewSnapshot([]*corev1.Node{b}, nil, nil)
	// "a" sorts first: its resource takes the slot the GPUs have in the first snapshot.
	a := builders.Node("a").Allocatable("example.com/fpga", "4").Obj()
	other := scheduling.NewSnapshot([]*corev1.Node{a, b}, nil, nil)
	g := scheduling.Gang{Members: members(8, gpuMember(1))}
	r := scheduling.Place(placed, g)
	if !r.Fits() {
		t.Fatalf("gang: %s", r.Reason)
	}
	if err := other.Assume(g.Members, r); err != nil {
		t.Fatal(err)
	}
	if got := other.Free("b", "nvidia.com/gpu"); got != 0 {
		t.Errorf("free GPUs on b after assuming 8 = %d, want 0", got)
	}
	if got := other.Free("a", "example.com/fpga"); got != 4 {
		t.Errorf("free FPGAs on a = %d, want 4 (nothing was placed there)", got)
	}
}

// TestRequestsKeptAcrossSnapshots: requests converted in a snapshot of a Layout serve the next
// snapshot of that Layout as they are, serve a clone that has grown a resource since, and are
// converted again (not misread) in a snapshot with other slots.
func TestRequestsKeptAcrossSnapshots(t *testing.T) {
	n := builders.Node("n").GPU(8).Obj()
	w := builders.Pod("w", "t").GPU(2).Node("n").Phase(corev1.PodRunning).Obj()
	req := scheduling.NewRequests(w)
	lookup := func(p *corev1.Pod) *scheduling.Requests {
		if p == w {
			return req
		}
		return nil
	}
	layout := scheduling.NewLayout()
	on := []scheduling.PodOnNode{{Pod: w, Node: "n"}}
	for i := range 2 {
		s := scheduling.NewSnapshotWithRequests([]*corev1.Node{n}, on, nil, lookup, layout)
		if got := s.Free("n", "nvidia.com/gpu"); got != 6 {
			t.Errorf("snapshot %d: %d GPUs free, want 6", i, got)
		}
		// A clone that learns a resource the layout has not seen still reads the kept vector.
		c := s.Clone()
		g := scheduling.Gang{Members: []*corev1.Pod{builders.Pod("m", "t").GPU(6).Obj()}}
		g.Members[0].Spec.Containers[0].Resources.Requests["example.com/fpga"] = resource.MustParse("0")
		if r := scheduling.Place(c, g); !r.Fits() {
			t.Errorf("snapshot %d clone: 6 GPUs do not fit: %s", i, r.Reason)
		}
	}
	// Another snapshot whose slots are in another order: "a" sorts first and its resource
	// takes the slot the GPUs have in the layout.
	a := builders.Node("a").Allocatable("example.com/fpga", "4").Obj()
	other := scheduling.NewSnapshotWithRequests([]*corev1.Node{a, n}, on, nil, lookup, nil)
	if got := other.Free("n", "nvidia.com/gpu"); got != 6 {
		t.Errorf("snapshot with other slots: %d GPUs free on n, want 6", got)
	}
	if got := other.Free("a", "example.com/fpga"); got != 4 {
		t.Errorf("snapshot with other slots: %d FPGAs free on a, want 4", got)
	}
}

// TestClassKeysKeptPerPodVersion: a caller's kept Requests remember each pod's class key, once
// without and once with its labels. A key kept from a snapshot where labels did not matter
// must not stand in where they do: here an existing pod on n1 repels app=x, so the member
// labelled app=x goes to n2 and its app=y twin to n1 — with one key for both, they would share
// one class and one set of nodes.
func TestClassKeysKeptPerPodVersion(t *testing.T) {
	kept := map[*corev1.Pod]*scheduling.Requests{}
	lookup := func(p *corev1.Pod) *scheduling.Requests {
		if kept[p] == nil {
			kept[p] = scheduling.NewRequests(p)
		}
		return kept[p]
	}
	nodes := []*corev1.Node{builders.Node("n1").GPU(1).Obj(), builders.Node("n2").GPU(1).Obj()}
	gang := scheduling.Gang{Members: []*corev1.Pod{
		builders.Pod("m-0", "ml").Member("g").GPU(1).Label("app", "x").Obj(),
		builders.Pod("m-1", "ml").Member("g").GPU(1).Label("app", "y").Obj(),
	}}
	layout := scheduling.NewLayout()
	// Labels do not matter: no pod has inter-pod rules.
	if r := scheduling.Place(scheduling.NewSnapshotWithRequests(nodes, nil, nil, lookup, layout), gang); !r.Fits() {
		t.Fatalf("without rules: %s", r.Reason)
	}
	repel := scheduling.PodOnNode{Pod: builders.Pod("guard", "ml").PodAntiAffinity(corev1.LabelHostname, "app", "x").Obj(), Node: "n1"}
	for i := range 2 { // twice: the second time from the kept keys
		r := scheduling.Place(scheduling.NewSnapshotWithRequests(nodes, []scheduling.PodOnNode{repel}, nil, lookup, layout), gang)
		if !r.Fits() {
			t.Fatalf("round %d: does not fit: %s", i, r.Reason)
		}
		got := map[string]string{}
		for _, a := range r.Assignments {
			got[a.Pod] = a.Node
		}
		if diff := cmp.Diff(map[string]string{"m-0": "n2", "m-1": "n1"}, got); diff != "" {
			t.Errorf("round %d: placement (-want +got):\n%s", i, diff)
		}
	}
}
