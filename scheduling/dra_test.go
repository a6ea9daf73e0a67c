package scheduling_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

const h100 = `device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"`

// draCluster is nodes h-0… with 8 H100s each and l-0… with 8 L4s each, published as
// ResourceSlices (no device-plugin GPUs).
func draCluster(h, l int) ([]*corev1.Node, scheduling.DynamicResources) {
	var nodes []*corev1.Node
	res := scheduling.DynamicResources{Classes: []*resourceapi.DeviceClass{builders.GPUClass()},
		Templates: []*resourceapi.ResourceClaimTemplate{builders.ClaimTemplate("h100x8", "ml", 8, h100), builders.ClaimTemplate("any4", "ml", 4, "")}}
	for i := range h {
		name := fmt.Sprintf("h-%d", i)
		nodes = append(nodes, builders.Node(name).Obj())
		res.Slices = append(res.Slices, builders.GPUSlice(name, 8, "NVIDIA H100 80GB HBM3", "80Gi"))
	}
	for i := range l {
		name := fmt.Sprintf("l-%d", i)
		nodes = append(nodes, builders.Node(name).Obj())
		res.Slices = append(res.Slices, builders.GPUSlice(name, 8, "NVIDIA L4", "24Gi"))
	}
	return nodes, res
}

func draMember(template string) func(string) *builders.PodBuilder {
	return func(name string) *builders.PodBuilder {
		return builders.Pod(name, "ml").Member("g").ClaimFromTemplate("gpus", template)
	}
}

func draSnapshot(t *testing.T, nodes []*corev1.Node, pods []scheduling.PodOnNode, res scheduling.DynamicResources) *scheduling.Snapshot {
	t.Helper()
	s := scheduling.NewSnapshot(nodes, pods, nil)
	if err := s.SetDynamicResources(res); err != nil {
		t.Fatalf("SetDynamicResources: %v", err)
	}
	return s
}

func TestPlaceDRA(t *testing.T) {
	tests := []struct {
		name    string
		h, l    int
		claims  []*resourceapi.ResourceClaim
		pods    []scheduling.PodOnNode
		members []*corev1.Pod
		// want is members per node when the gang fits; nil: it does not, and reason says why.
		want      map[string]int
		placeable int
		reason    string
		blocked   bool
	}{{
		name: "four members of eight H100s each go one to an H100 node, never to the L4s", h: 4, l: 4,
		members: members(4, draMember("h100x8")),
		want:    map[string]int{"h-0": 1, "h-1": 1, "h-2": 1, "h-3": 1},
	}, {
		name: "seven of eight is not a gang: no member is placed where the eighth cannot follow", h: 7, l: 2,
		members: members(8, draMember("h100x8")), placeable: 7,
		reason: "7 of 8 members fit; no eligible node has the devices member m-00's resource claims ask for free",
	}, {
		name: "devices the cluster's claims hold are taken", h: 2,
		claims:  []*resourceapi.ResourceClaim{builders.AllocatedClaim("train-0", "other", "h-0", 0, 1)},
		members: members(2, draMember("h100x8")), placeable: 1,
		reason: "1 of 2 members fit",
	}, {
		name: "smaller members share a node's devices", h: 1,
		members: members(2, draMember("any4")),
		want:    map[string]int{"h-0": 2},
	}, {
		name: "a pinned member whose claims are not allocated yet keeps its devices (the ledger replayed)", h: 1,
		pods:    []scheduling.PodOnNode{{Pod: builders.Pod("earlier", "ml").ClaimFromTemplate("gpus", "any4").Obj(), Node: "h-0"}},
		members: members(2, draMember("any4")), placeable: 1,
		reason: "1 of 2 members fit",
	}, {
		name: "members sharing one claim go where its devices are", h: 3,
		claims: []*resourceapi.ResourceClaim{builders.Claim("shared", "ml", 2, "")},
		members: members(3, func(name string) *builders.PodBuilder {
			return builders.Pod(name, "ml").Member("g").SharedClaim("shared", "shared")
		}),
		want: map[string]int{"h-0": 3},
	}, {
		name: "members sharing a claim as large as a node's free devices go to that node together", h: 2,
		claims: []*resourceapi.ResourceClaim{builders.Claim("shared", "ml", 8, "")},
		members: members(3, func(name string) *builders.PodBuilder {
			return builders.Pod(name, "ml").Member("g").SharedClaim("shared", "shared")
		}),
		want: map[string]int{"h-0": 3},
	}, {
		name: "members with a shared claim and their own each", h: 2,
		claims: []*resourceapi.ResourceClaim{builders.Claim("shared", "ml", 2, "")},
		members: members(3, func(name string) *builders.PodBuilder {
			return builders.Pod(name, "ml").Member("g").SharedClaim("shared", "shared").ClaimFromTemplate("own", "any4")
		}),
		placeable: 1, reason: "1 of 3 members fit",
	}, {
		name: "an allocated shared claim decides the node", h: 3,
		claims: []*resourceapi.ResourceClaim{builders.AllocatedClaim("shared", "ml", "h-2", 0)},
		members: members(2, func(name string) *builders.PodBuilder {
			return builders.Pod(name, "ml").Member("g").SharedClaim("shared", "shared")
		}),
		want: map[string]int{"h-2": 2},
	}, {
		name: "an allocated shared claim without a node selector (network-attached devices) goes anywhere", h: 3,
		claims: []*resourceapi.ResourceClaim{func() *resourceapi.ResourceClaim {
			c := builders.AllocatedClaim("fabric", "ml", "h-2", 0)
			c.Status.Allocation.NodeSelector = nil
			return c
		}()},
		members: members(2, func(name string) *builders.PodBuilder {
			return builders.Pod(name, "ml").Member("g").SharedClaim("fabric", "fabric")
		}),
		want: map[string]int{"h-0": 2},
	}, {
		name: "a claim created from the template is the one placed", h: 2,
		claims: []*resourceapi.ResourceClaim{builders.AllocatedClaim("m-00-gpus-x1", "ml", "h-1", 0, 1, 2, 3, 4, 5, 6, 7)},
		members: []*corev1.Pod{
			builders.Pod("m-00", "ml").Member("g").ClaimFromTemplate("gpus", "h100x8").ClaimCreated("gpus", "m-00-gpus-x1").Obj(),
			draMember("h100x8")("m-01").Obj(),
		},
		want: map[string]int{"h-0": 1, "h-1": 1},
	}, {
		name: "a template that does not exist blocks the gang and says so", h: 2,
		members: members(2, draMember("missing")), blocked: true,
		reason: "member m-00 waits for ResourceClaimTemplate ml/missing",
	}, {
		name: "a named claim that does not exist blocks the gang", h: 2,
		members: members(1, func(name string) *builders.PodBuilder {
			return builders.Pod(name, "ml").Member("g").SharedClaim("gpus", "nope")
		}), blocked: true,
		reason: "waits for ResourceClaim ml/nope",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes, res := draCluster(tt.h, tt.l)
			res.Claims = tt.claims
			s := draSnapshot(t, nodes, tt.pods, res)
			r := scheduling.Place(s, scheduling.Gang{Members: tt.members})
			if tt.want != nil {
				if !r.Fits() {
					t.Fatalf("does not fit: %s", r.Reason)
				}
				if got := perNode(r); fmt.Sprint(got) != fmt.Sprint(tt.want) {
					t.Fatalf("placed %v, want %v", got, tt.want)
				}
				return
			}
			if r.Fits() {
				t.Fatalf("fits %v, want it not to", perNode(r))
			}
			if !strings.Contains(r.Reason, tt.reason) {
				t.Errorf("reason %q, want it to contain %q", r.Reason, tt.reason)
			}
			if r.Placeable != tt.placeable || r.Blocked != tt.blocked || r.Unsupported {
				t.Errorf("placeable %d blocked %v unsupported %v, want %d %v false", r.Placeable, r.Blocked, r.Unsupported, tt.placeable, tt.blocked)
			}
		})
	}
}

// TestDRALedger: a gang assumed in the snapshot holds its devices for the next; in the next
// cycle's snapshot its members, pinned and not bound, still hold them.
func TestDRALedger(t *testing.T) {
	nodes, res := draCluster(3, 0)
	s := draSnapshot(t, nodes, nil, res)
	a := members(2, draMember("h100x8"))
	ra := scheduling.Place(s, scheduling.Gang{Members: a})
	if !ra.Fits() {
		t.Fatalf("gang a: %s", ra.Reason)
	}
	if err := s.Assume(a, ra); err != nil {
		t.Fatal(err)
	}
	if got := s.DevicesTaken(); got != 16 {
		t.Fatalf("devices taken after assuming a: %d, want 16", got)
	}
	b := make([]*corev1.Pod, 2)
	for i := range b {
		b[i] = draMember("h100x8")(fmt.Sprintf("b-%d", i)).Obj()
	}
	if rb := scheduling.Place(s, scheduling.Gang{Members: b}); rb.Fits() || rb.Placeable != 1 {
		t.Fatalf("gang b fits (%v) with a's devices promised, placeable %d", perNode(rb), rb.Placeable)
	}
	// The next cycle: a's members count against their nodes, pinned, their claims not allocated.
	var pods []scheduling.PodOnNode
	for i, as := range ra.Assignments {
		pods = append(pods, scheduling.PodOnNode{Pod: a[i], Node: as.Node})
	}
	next := draSnapshot(t, nodes, pods, res)
	if got := next.DevicesTaken(); got != 16 {
		t.Fatalf("devices taken in the next snapshot: %d, want 16", got)
	}
	if rb := scheduling.Place(next, scheduling.Gang{Members: b}); rb.Fits() {
		t.Fatalf("gang b fits in the next cycle (%v): a device promised twice", perNode(rb))
	}
	// ReservePartial keeps the room b can use from a gang placed after it.
	if got := next.ReservePartial(scheduling.Gang{Members: b}); got != 1 {
		t.Fatalf("reserved %d of b, want 1", got)
	}
	c := []*corev1.Pod{draMember("any4")("c-0").Obj()}
	if rc := scheduling.Place(next, scheduling.Gang{Members: c}); rc.Fits() {
		t.Fatalf("c fits on %v, in room b reserved", perNode(rc))
	}
}

// TestDRAMixedWithDevicePlugin: device-plugin GPUs and DRA GPUs on one cluster, each gang on
// the nodes that serve its kind.
func TestDRAMixedWithDevicePlugin(t *testing.T) {
	nodes, res := draCluster(1, 0)
	nodes = append(nodes, builders.Node("dp-0").GPU(8).Obj())
	s := draSnapshot(t, nodes, nil, res)
	dp := members(1, gpuMember(8))
	rdp := scheduling.Place(s, scheduling.Gang{Members: dp})
	if got := perNode(rdp); fmt.Sprint(got) != "map[dp-0:1]" {
		t.Fatalf("device-plugin gang on %v (%s), want dp-0", got, rdp.Reason)
	}
	if err := s.Assume(dp, rdp); err != nil {
		t.Fatal(err)
	}
	dra := members(1, draMember("h100x8"))
	if got := perNode(scheduling.Place(s, scheduling.Gang{Members: dra})); fmt.Sprint(got) != "map[h-0:1]" {
		t.Fatalf("DRA gang on %v, want h-0", got)
	}
}

func TestDRAWithoutDynamicResourcesIsUnsupported(t *testing.T) {
	nodes, _ := draCluster(1, 0)
	r := scheduling.Place(scheduling.NewSnapshot(nodes, nil, nil), scheduling.Gang{Members: members(1, draMember("h100x8"))})
	if !r.Unsupported || !strings.Contains(r.Reason, "dynamic resource claims") {
		t.Fatalf("got %+v, want unsupported naming dynamic resource claims", r)
	}
}

func TestDRAInvalidSelectorSaysSo(t *testing.T) {
	nodes, res := draCluster(1, 0)
	res.Templates = append(res.Templates, builders.ClaimTemplate("bad", "ml", 1, `device.attributes["gpu.nvidia.com"].productName ==`))
	s := draSnapshot(t, nodes, nil, res)
	r := scheduling.Place(s, scheduling.Gang{Members: members(1, draMember("bad"))})
	if r.Fits() || !strings.Contains(r.Reason, "resource claims cannot be allocated") {
		t.Fatalf("got %q, want the allocator's error", r.Reason)
	}
}

// TestDRASeedRetriesKeepTheLedger: members with zone affinity to each other are placed one by
// one, retried from each zone as a seed; undoing a failed seed must leave the ledger as the
// best attempt had it (the devices of one attempt, never another's, and none after Place).
func TestDRASeedRetriesKeepTheLedger(t *testing.T) {
	nodes := []*corev1.Node{builders.Node("a").Zone("za").Obj(), builders.Node("b").Zone("zb").Obj()}
	res := scheduling.DynamicResources{Classes: []*resourceapi.DeviceClass{builders.GPUClass()},
		Slices:    []*resourceapi.ResourceSlice{builders.GPUSlice("a", 2, "NVIDIA L4", "24Gi"), builders.GPUSlice("b", 1, "NVIDIA L4", "24Gi")},
		Templates: []*resourceapi.ResourceClaimTemplate{builders.ClaimTemplate("one", "ml", 1, "")}}
	s := draSnapshot(t, nodes, nil, res)
	gang := scheduling.Gang{Members: members(3, func(name string) *builders.PodBuilder {
		return builders.Pod(name, "ml").Member("g").Label("app", "x").PodAffinity(zone, "app", "x").ClaimFromTemplate("gpu", "one")
	})}
	r := scheduling.Place(s, gang)
	if r.Fits() || r.Placeable != 2 {
		t.Fatalf("fits %v placeable %d (%s), want 2 of 3", r.Fits(), r.Placeable, r.Reason)
	}
	if got := s.DevicesTaken(); got != 0 {
		t.Fatalf("Place left %d devices in the ledger", got)
	}
	if got := s.ReservePlaced(gang, r); got != 2 {
		t.Fatalf("reserved %d, want 2", got)
	}
	if got := s.DevicesTaken(); got != 2 {
		t.Fatalf("ledger holds %d devices after reserving 2 members, want 2", got)
	}
	// a's two devices are reserved: one more member fits on b only.
	one := []*corev1.Pod{builders.Pod("c-0", "ml").ClaimFromTemplate("gpu", "one").Obj()}
	if got := perNode(scheduling.Place(s, scheduling.Gang{Members: one})); fmt.Sprint(got) != "map[b:1]" {
		t.Fatalf("another member on %v, want b (a's devices reserved)", got)
	}
}

// TestDRAAllModeCountsTakenDevices: a claim for all of a node's devices does not fit while one
// of them is taken (the allocator must see taken devices to refuse it, as kube-scheduler does).
func TestDRAAllModeCountsTakenDevices(t *testing.T) {
	nodes, res := draCluster(1, 0)
	all := builders.ClaimTemplate("all", "ml", 0, "")
	all.Spec.Spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	all.Spec.Spec.Devices.Requests[0].Exactly.Count = 0
	res.Templates = append(res.Templates, all)
	res.Claims = []*resourceapi.ResourceClaim{builders.AllocatedClaim("other", "ml", "h-0", 3)}
	r := scheduling.Place(draSnapshot(t, nodes, nil, res), scheduling.Gang{Members: members(1, draMember("all"))})
	if r.Fits() {
		t.Fatalf("a claim for all devices fits on %v with one taken", perNode(r))
	}
	res.Claims = nil
	if r := scheduling.Place(draSnapshot(t, nodes, nil, res), scheduling.Gang{Members: members(1, draMember("all"))}); !r.Fits() {
		t.Fatalf("a claim for all devices does not fit on a free node: %s", r.Reason)
	}
}

// TestWithoutGivesBackTheDevicesOfSeats: a gang's seat holds a node's 8 GPUs through its own
// claim (allocated and reserved for it, or not allocated yet and replayed on its node); the gang
// does not fit while the seat counts and fits on the snapshot without it. Another pod's claim
// on the node keeps its devices.
func TestWithoutGivesBackTheDevicesOfSeats(t *testing.T) {
	member := draMember("h100x8")
	for _, tc := range []struct {
		name      string
		allocated bool // the seat's claim is allocated; otherwise replayed from its template
	}{{"allocated claim reserved for the seat", true}, {"claim not allocated yet, replayed", false}} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, res := draCluster(1, 0)
			sb := builders.Pod("seat-0", "berth-system")
			if tc.allocated {
				sb = sb.ClaimCreated("gpus", "seat-0-gpus")
			} else {
				sb = sb.ClaimFromTemplate("gpus", "seat-0-claim-0")
				res.Templates = append(res.Templates, builders.ClaimTemplate("seat-0-claim-0", "berth-system", 8, h100))
			}
			seat := sb.Obj()
			seat.UID = "uid-seat-0"
			if tc.allocated {
				c := builders.AllocatedClaim("seat-0-gpus", "berth-system", "h-0", 0, 1, 2, 3, 4, 5, 6, 7)
				c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: seat.Name, UID: seat.UID}}
				res.Claims = append(res.Claims, c)
			}
			s := draSnapshot(t, nodes, []scheduling.PodOnNode{{Pod: seat, Node: "h-0"}}, res)
			g := scheduling.Gang{Members: []*corev1.Pod{member("m-0").Obj()}}
			if r := scheduling.Place(s, g); r.Fits() {
				t.Fatal("the gang fits while its seat holds the node's GPUs")
			}
			if r := scheduling.Place(s.Without([]*corev1.Pod{seat}), g); !r.Fits() {
				t.Fatalf("without its seat the gang does not fit: %s", r.Reason)
			}
			if r := scheduling.Place(s, g); r.Fits() {
				t.Fatal("Without changed the snapshot it was taken from")
			}
			other := builders.Pod("other", "ml").Obj()
			other.UID = "uid-other"
			if r := scheduling.Place(s.Without([]*corev1.Pod{other}), g); r.Fits() {
				t.Fatal("without another pod the gang fits on the seat's devices")
			}
		})
	}
}

// TestWithoutGivesBackTheDevicesOfReservedSeats: a seat not bound yet, counted where it will
// bind (ReservePartial, ReservePlaced or Assume — admission's holdUnboundSeats), holds the
// node's devices; Without gives them back as for a bound seat. Before, only devices counted at
// SetDynamicResources came back, and a gang could not use its own unbound seats' devices.
func TestWithoutGivesBackTheDevicesOfReservedSeats(t *testing.T) {
	member := draMember("h100x8")
	for _, how := range []string{"ReservePartial", "ReservePlaced", "Assume"} {
		t.Run(how, func(t *testing.T) {
			nodes, res := draCluster(1, 0)
			res.Templates = append(res.Templates, builders.ClaimTemplate("seat-0-claim-0", "berth-system", 8, h100))
			seat := builders.Pod("seat-0", "berth-system").ClaimFromTemplate("gpus", "seat-0-claim-0").Obj()
			seat.UID = "uid-seat-0"
			s := draSnapshot(t, nodes, nil, res)
			seats := scheduling.Gang{Members: []*corev1.Pod{seat}}
			switch how {
			case "ReservePartial":
				if n := s.ReservePartial(seats); n != 1 {
					t.Fatalf("ReservePartial placed %d seats, want 1", n)
				}
			case "ReservePlaced":
				// Two seats for one node: the placement does not fit, and the first is kept.
				two := scheduling.Gang{Members: []*corev1.Pod{seat, builders.Pod("seat-1", "berth-system").ClaimFromTemplate("gpus", "seat-0-claim-0").Obj()}}
				r := scheduling.Place(s, two)
				if r.Fits() || s.ReservePlaced(two, r) != 1 {
					t.Fatalf("two seats on one node: fits %v, want one reserved", r.Fits())
				}
			case "Assume":
				if err := s.Assume(seats.Members, scheduling.Place(s, seats)); err != nil {
					t.Fatal(err)
				}
			}
			g := scheduling.Gang{Members: []*corev1.Pod{member("m-0").Obj()}}
			if r := scheduling.Place(s, g); r.Fits() {
				t.Fatal("the gang fits while the reserved seat holds the node's GPUs")
			}
			if r := scheduling.Place(s.Without([]*corev1.Pod{seat}), g); !r.Fits() {
				t.Fatalf("without its reserved seat the gang does not fit: %s", r.Reason)
			}
		})
	}
}

// TestShortfallOfDRAGangs: a gang whose members claim devices from templates has a shortfall
// (its seats carry copies of the templates); one whose members name a claim others may share
// has none (a copy would order devices the members will not use).
func TestShortfallOfDRAGangs(t *testing.T) {
	nodes, res := draCluster(1, 0)
	res.Claims = append(res.Claims, builders.Claim("shared", "ml", 8, ""))
	s := draSnapshot(t, nodes, nil, res)
	member := draMember("h100x8")
	g := scheduling.Gang{Members: []*corev1.Pod{member("m-0").Obj(), member("m-1").Obj(), member("m-2").Obj()}}
	sf, ok := scheduling.ComputeShortfall(s, g)
	if !ok || len(sf.Missing) != 2 || len(sf.Nodes) != 1 || sf.Nodes[0] != "h-0" {
		t.Errorf("3 members of 8 H100s on one 8-H100 node: shortfall %d missing, nodes %v, ok %v; want 2 missing, [h-0], true", len(sf.Missing), sf.Nodes, ok)
	}
	named := scheduling.Gang{Members: []*corev1.Pod{
		builders.Pod("n-0", "ml").Member("g").SharedClaim("gpus", "shared").Obj(),
		builders.Pod("n-1", "ml").Member("g").SharedClaim("gpus", "shared").Obj(),
	}}
	named.Members = append(named.Members, member("n-2").Obj(), member("n-3").Obj())
	if sf, ok := scheduling.ComputeShortfall(s, named); ok {
		t.Errorf("members naming a shared claim: shortfall %d missing, ok; want none", len(sf.Missing))
	}
}

// TestDRAReplayKeepsEveryPinnedPodsDevices: a node with one GPU of product X and one of Y, two
// pinned pods not bound yet — "any" (either GPU) before "x" (X only) in the node's order. Replayed
// one at a time, "any" took X and "x" then had nothing: its device was counted nowhere, and a
// third pod was promised a GPU the node does not have. Replayed together they take both; where
// pods cannot be replayed at all, the node counts as full.
func TestDRAReplayKeepsEveryPinnedPodsDevices(t *testing.T) {
	mixed := builders.GPUSlice("n", 2, "X", "80Gi")
	mixed.Spec.Devices[1].Attributes["productName"] = resourceapi.DeviceAttribute{StringValue: ptr.To("Y")}
	x := `device.attributes["gpu.nvidia.com"].productName == "X"`
	res := scheduling.DynamicResources{Classes: []*resourceapi.DeviceClass{builders.GPUClass()}, Slices: []*resourceapi.ResourceSlice{mixed},
		Templates: []*resourceapi.ResourceClaimTemplate{builders.ClaimTemplate("one", "ml", 1, ""), builders.ClaimTemplate("x", "ml", 1, x)}}
	nodes := []*corev1.Node{builders.Node("n").Obj()}
	pinned := []scheduling.PodOnNode{
		{Pod: builders.Pod("any", "ml").ClaimFromTemplate("gpus", "one").Obj(), Node: "n"},
		{Pod: builders.Pod("x", "ml").ClaimFromTemplate("gpus", "x").Obj(), Node: "n"},
	}
	s := draSnapshot(t, nodes, pinned, res)
	if got := s.DevicesTaken(); got != 2 {
		t.Errorf("devices taken %d, want both (the pinned pods hold them)", got)
	}
	if r := scheduling.Place(s, scheduling.Gang{Members: members(1, draMember("one"))}); r.Fits() {
		t.Errorf("a third pod placed on a node whose two GPUs the pinned pods hold: %v", perNode(r))
	}
	// Pods whose claims cannot be allocated at all (two pods that want X): the node is full.
	pinned[0].Pod = builders.Pod("x2", "ml").ClaimFromTemplate("gpus", "x").Obj()
	full := scheduling.NewSnapshot(nodes, pinned, nil)
	if err := full.SetDynamicResources(res); err != nil {
		t.Fatalf("SetDynamicResources: %v", err)
	}
	if got := full.DevicesTaken(); got != 2 {
		t.Errorf("devices taken %d where pinned pods cannot be replayed, want all 2", got)
	}
}
