package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	seatpkg "github.com/berth-dev/berth/internal/seat"
	"github.com/berth-dev/berth/test/builders"
)

// TestUnboundSeatsHoldTheirRoom: gang "old" is provisioning — two seats, not bound yet, and
// the node Karpenter launched for them (booting, or Ready a moment before kube-scheduler binds
// the seats). Gang "new" wants the same room and is looked at first (a higher priority; after a
// restart, a gang whose step failed was skipped the same way). The seats' room is old's: new
// asks Karpenter for its own capacity. Before, the unbound seats counted against nothing: new
// read the booting node as capacity on its way and asked for none, or was admitted onto the
// Ready node, and old's attempt lost the node it had asked for.
func TestUnboundSeatsHoldTheirRoom(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // the harness's clock
	for _, ready := range []bool{false, true} {
		t.Run(fmt.Sprintf("ready=%v", ready), func(t *testing.T) {
			old := provisioningSince(groupAt("old", 2, now.Add(-time.Hour)), now.Add(-10*time.Second), 2)
			fresh := groupAt("new", 2, now.Add(-time.Minute))
			node := builders.Node("n1").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj()
			node.CreationTimestamp = metav1.NewTime(now.Add(-30 * time.Second))
			if !ready {
				node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
			}
			objs := []client.Object{node, old, fresh}
			for i := range 2 {
				objs = append(objs, builders.Pod(fmt.Sprintf("old-%d", i), "ml").Member("old").Gated().GPU(4).WithReleaseTerm("old").Obj())
				objs = append(objs, builders.Pod(seatName(old, 1, i), "berth-system").Label(berthv1alpha1.SeatOfLabel, string(old.UID)).GPU(4).Obj())
				m := builders.Pod(fmt.Sprintf("new-%d", i), "ml").Member("new").Gated().GPU(4).WithReleaseTerm("new").Obj()
				m.Spec.Priority = new(int32(1000))
				objs = append(objs, m)
			}
			r, base := provisioningHarness(t, objs...)
			cycleOnce(t, r)
			var got berthv1alpha1.PodGroup
			if err := base.Get(context.Background(), client.ObjectKeyFromObject(fresh), &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Status.Assignments) > 0 {
				t.Fatalf("gang new admitted onto %v, the room old's unbound seats hold", got.Status.Assignments)
			}
			if p := got.Status.Provisioning; p == nil || p.Seats != 2 {
				t.Errorf("gang new's attempt = %+v, want capacity asked for both its members", p)
			}
			if err := base.Get(context.Background(), client.ObjectKeyFromObject(old), &got); err != nil {
				t.Fatal(err)
			}
			if p := got.Status.Provisioning; p == nil || p.Seats != 2 {
				t.Errorf("gang old's attempt = %+v, want its 2 seats kept, not grown", p)
			}
		})
	}
}

// TestGangPlacesIntoItsUnboundSeatsRoom: a gang's seats are not bound yet but their node is
// Ready; the gang itself is admitted there — its own seats hold the room for it, bound or not
// (and seats of a ProvisioningRequest its members consume, likewise). A gang that does not
// consume the request finds the room held.
func TestGangPlacesIntoItsUnboundSeatsRoom(t *testing.T) {
	for _, tc := range []struct {
		name    string
		seat    func(i int) *corev1.Pod
		consume bool
		admit   bool
	}{
		{name: "own seats", seat: func(i int) *corev1.Pod {
			return builders.Pod(seatName(builders.PodGroup("g", "ml").Obj(), 1, i), "berth-system").Label(berthv1alpha1.SeatOfLabel, "uid-g").GPU(8).Obj()
		}, admit: true},
		{name: "a consumed request's seats", seat: requestSeat, consume: true, admit: true},
		{name: "another request's seats", seat: requestSeat, admit: false},
		{name: "a consumed request's seats pinned to their nodes", seat: pinnedRequestSeat, consume: true, admit: true},
		{name: "another request's seats pinned to their nodes", seat: pinnedRequestSeat, admit: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pg := builders.PodGroup("g", "ml").MinMember(2).Obj()
			pg.UID = "uid-g"
			objs := []client.Object{pg}
			for i := range 2 {
				objs = append(objs, builders.Node(fmt.Sprintf("n%d", i)).GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(), tc.seat(i))
				p := builders.Pod(fmt.Sprintf("g-%d", i), "ml").Member("g").Gated().GPU(8).WithReleaseTerm("g").Obj()
				p.UID = types.UID(fmt.Sprintf("uid-%d", i))
				if tc.consume {
					p.Annotations = map[string]string{autoscalingv1.ProvisioningRequestPodAnnotationKey: "train-1"}
				}
				objs = append(objs, p)
			}
			r, base := provisioningHarness(t, objs...)
			cycleOnce(t, r)
			var got berthv1alpha1.PodGroup
			if err := base.Get(context.Background(), client.ObjectKeyFromObject(pg), &got); err != nil {
				t.Fatal(err)
			}
			if admitted := len(got.Status.Assignments) == 2; admitted != tc.admit {
				t.Errorf("admitted %v (assignments %v), want %v", admitted, got.Status.Assignments, tc.admit)
			}
		})
	}
}

// requestSeat is the i-th seat of ProvisioningRequest ml/train-1, not bound yet.
func requestSeat(i int) *corev1.Pod {
	seat := builders.Pod(fmt.Sprintf("train-1-abc-%d", i), "berth-system").GPU(8).Obj()
	seat.Labels[berthv1alpha1.SeatForProvisioningRequestLabel] = "uid-pr"
	seat.Annotations = map[string]string{berthv1alpha1.SeatForProvisioningRequestAnnotation: "ml/train-1"}
	seat.UID = types.UID(fmt.Sprintf("uid-seat-%d", i))
	return seat
}

// TestBootingRoomCountedOnce: one node is coming up, with room for one of two gangs that need
// capacity. The older gang counts on it and asks for nothing; the younger finds it counted and
// asks Karpenter for its own. Before, the room a gang counted on was kept from no one: every
// gang of a burst counted the same booting nodes and none asked for capacity until those nodes
// were Ready and taken — one node boot late.
func TestBootingRoomCountedOnce(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // the harness's clock
	booting := bootingNode(builders.Node("n1").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(), now.Add(-30*time.Second))
	objs := []client.Object{booting}
	var groups []*berthv1alpha1.PodGroup
	for i, name := range []string{"a", "b"} {
		g := groupAt(name, 1, now.Add(time.Duration(i-10)*time.Minute))
		groups = append(groups, g)
		objs = append(objs, g, builders.Pod(name+"-0", "ml").Member(name).Gated().GPU(8).WithReleaseTerm(name).Obj())
	}
	r, base := provisioningHarness(t, objs...)
	cycleOnce(t, r)
	for i, want := range []int32{0, 1} {
		var got berthv1alpha1.PodGroup
		if err := base.Get(context.Background(), client.ObjectKeyFromObject(groups[i]), &got); err != nil {
			t.Fatal(err)
		}
		var seats int32
		if p := got.Status.Provisioning; p != nil {
			seats = p.Seats
		}
		if seats != want {
			t.Errorf("gang %s asked for %d seats, want %d", groups[i].Name, seats, want)
		}
	}
}

// pinnedRequestSeat is requestSeat pinned to node n<i> (the ProvisioningRequest controller pins
// the seats it books room with), not bound yet.
func pinnedRequestSeat(i int) *corev1.Pod {
	seat := requestSeat(i)
	seat.Annotations[berthv1alpha1.PinnedNodeAnnotation] = fmt.Sprintf("n%d", i)
	return seat
}

// TestBootingRoomKeptOnlyByARequest: the older gang is backing off after a failed attempt — it
// asks Karpenter for nothing now — so the node coming up is not its to keep: the younger gang
// counts on it and asks for nothing either (the gate was provisioning being on at all: the
// backing-off gang kept the room and the younger asked for a node it did not need).
func TestBootingRoomKeptOnlyByARequest(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // the harness's clock
	booting := bootingNode(builders.Node("n1").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(), now.Add(-30*time.Second))
	old := groupAt("a", 1, now.Add(-time.Hour))
	started, finished, retry := metav1.NewTime(now.Add(-20*time.Minute)), metav1.NewTime(now.Add(-10*time.Minute)), metav1.NewTime(now.Add(5*time.Minute))
	waiting := metav1.NewTime(now.Add(-time.Minute)) // within its schedule timeout
	old.Status.WaitingSince = &waiting
	old.Status.Provisioning = &berthv1alpha1.ProvisioningStatus{Attempt: 1, Seats: 1, StartedAt: &started, FinishedAt: &finished, RetryAt: &retry}
	young := groupAt("b", 1, now.Add(-time.Minute))
	objs := []client.Object{booting, old, young,
		builders.Pod("a-0", "ml").Member("a").Gated().GPU(8).WithReleaseTerm("a").Obj(),
		builders.Pod("b-0", "ml").Member("b").Gated().GPU(8).WithReleaseTerm("b").Obj()}
	r, base := provisioningHarness(t, objs...)
	cycleOnce(t, r)
	var got berthv1alpha1.PodGroup
	if err := base.Get(context.Background(), client.ObjectKeyFromObject(young), &got); err != nil {
		t.Fatal(err)
	}
	if p := got.Status.Provisioning; p != nil {
		t.Errorf("gang b asked for %d seats, want none: the booting node is room on its way for it", p.Seats)
	}
}

// groupAt is PodGroup name in namespace ml of minMember members, UID uid-<name>, created at
// created.
func groupAt(name string, minMember int32, created time.Time) *berthv1alpha1.PodGroup {
	g := builders.PodGroup(name, "ml").MinMember(minMember).Obj()
	g.UID, g.CreationTimestamp = types.UID("uid-"+name), metav1.NewTime(created)
	return g
}

// provisioningSince is g waiting and provisioning since started: attempt 1, seats seats.
func provisioningSince(g *berthv1alpha1.PodGroup, started time.Time, seats int32) *berthv1alpha1.PodGroup {
	at := metav1.NewTime(started)
	g.Status.WaitingSince = &at
	g.Status.Provisioning = &berthv1alpha1.ProvisioningStatus{Attempt: 1, Seats: seats, StartedAt: &at}
	return g
}

// bootingNode is node n created at created and not Ready yet: a node Karpenter launched, booting.
func bootingNode(n *corev1.Node, created time.Time) *corev1.Node {
	n.CreationTimestamp = metav1.NewTime(created)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	return n
}

// TestNotStoodFor: the members a gang's booting room is kept for are those no seat stands for —
// matched by the member a seat names, else (a ProvisioningRequest's seats, a seat whose member
// was placed or renamed) by shape, by fit, and last by count: taken by count alone, a gang of a
// one-GPU leader and eight-GPU workers with a seat for a worker kept a worker's room and left
// its leader's to the gangs after it.
func TestNotStoodFor(t *testing.T) {
	leader := builders.Pod("job-leader", "ml").Member("job").GPU(1).Obj()
	w0 := builders.Pod("job-worker-0", "ml").Member("job").GPU(8).Obj()
	w1 := builders.Pod("job-worker-1", "ml").Member("job").GPU(8).Obj()
	seatFor := func(m *corev1.Pod) *corev1.Pod {
		s := builders.Pod("seat-"+m.Name, "berth-system").GPU(8).Obj()
		if m == leader {
			s = builders.Pod("seat-"+m.Name, "berth-system").GPU(1).Obj()
		}
		s.Annotations = map[string]string{berthv1alpha1.SeatForMemberAnnotation: m.Name}
		return s
	}
	other := builders.Pod("job-other", "ml").Member("job").GPU(8).Obj() // placed on a Ready node
	// A ProvisioningRequest's seat from a PodTemplate that asks for its GPU under limits only:
	// no GPU request (the API server copies limits to requests on a Pod, not a PodTemplate).
	shapeless := builders.Pod("seat-shapeless", "berth-system").Obj()
	shapeless.Annotations = map[string]string{}
	twoGPUs := builders.Pod("seat-2", "berth-system").GPU(2).Obj()
	heavy := builders.Pod("job-heavy", "ml").Member("job").GPU(8).Obj()
	heavy.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}
	heavy.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}}}}
	madeFor := func(m *corev1.Pod) *corev1.Pod { // a request's seat: seat.Pod, no member named
		return seatpkg.Pod(m, "berth-system", "seat-"+m.Name, "pause")
	}
	names := func(ps []*corev1.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	tests := []struct {
		name        string
		rest, seats []*corev1.Pod
		want        []string
	}{
		{"no seats: every member", []*corev1.Pod{leader, w0}, nil, []string{"job-leader", "job-worker-0"}},
		{"a worker's seat leaves the leader, not the other worker's room", []*corev1.Pod{leader, w0, w1}, []*corev1.Pod{seatFor(w1)}, []string{"job-leader", "job-worker-0"}},
		{"the leader's seat", []*corev1.Pod{leader, w0}, []*corev1.Pod{seatFor(leader)}, []string{"job-worker-0"}},
		{"a seat whose member was placed stands for a member of its shape", []*corev1.Pod{leader, w0}, []*corev1.Pod{seatFor(other)}, []string{"job-leader"}},
		{"a seat whose member was placed stands for one that fits in it", []*corev1.Pod{leader}, []*corev1.Pod{seatFor(other)}, nil},
		{"a seat of another shape stands for a member it holds before one it cannot", []*corev1.Pod{w0, leader}, []*corev1.Pod{twoGPUs}, []string{"job-worker-0"}},
		{"a seat of no known shape stands for the first member left (as many stood for as seats)", []*corev1.Pod{leader, w0}, []*corev1.Pod{shapeless}, []string{"job-worker-0"}},
		{"seats made by seat.Pod match members with overhead and init containers", []*corev1.Pod{leader, heavy}, []*corev1.Pod{madeFor(heavy)}, []string{"job-leader"}},
		{"a request's seats stand for members of their shape", []*corev1.Pod{leader, w0, w1}, []*corev1.Pod{requestSeat(0), requestSeat(1)}, []string{"job-leader"}},
		{"a named seat first, then a request's by shape", []*corev1.Pod{leader, w0, w1}, []*corev1.Pod{requestSeat(0), seatFor(w0)}, []string{"job-leader"}},
		{"more seats than members", []*corev1.Pod{w0}, []*corev1.Pod{requestSeat(0), requestSeat(1), seatFor(w0)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(notStoodFor(tc.rest, tc.seats)); !slices.Equal(got, tc.want) {
				t.Errorf("notStoodFor = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBootingRoomKeptForTheMembersWithoutASeat: gang "old" — a one-GPU leader and an
// eight-GPU worker — is provisioning: a seat, not bound yet, stands for its worker (on the
// eight-GPU node coming up), and its request counted on the one-GPU node coming up for its
// leader. A younger gang of one GPU finds that node kept and asks Karpenter for its own. Taken
// by count, old's one seat stood for its first member, the leader: the worker's room was kept
// (where none was left), the leader's was not, and the younger gang counted on it.
func TestBootingRoomKeptForTheMembersWithoutASeat(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // the harness's clock
	old := provisioningSince(groupAt("old", 2, now.Add(-time.Hour)), now.Add(-10*time.Second), 1)
	young := groupAt("young", 1, now.Add(-time.Minute))
	seat := builders.Pod(seatName(old, 1, 0), "berth-system").Label(berthv1alpha1.SeatOfLabel, string(old.UID)).GPU(8).Obj()
	seat.Annotations = map[string]string{berthv1alpha1.SeatForMemberAnnotation: "old-worker"}
	objs := []client.Object{old, young, seat,
		bootingNode(builders.Node("n1").GPU(1).Allocatable(corev1.ResourceCPU, "96").Obj(), now.Add(-30*time.Second)),
		bootingNode(builders.Node("n2").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(), now.Add(-30*time.Second)),
		builders.Pod("old-leader", "ml").Member("old").Gated().GPU(1).WithReleaseTerm("old").Obj(),
		builders.Pod("old-worker", "ml").Member("old").Gated().GPU(8).WithReleaseTerm("old").Obj(),
		builders.Pod("young-0", "ml").Member("young").Gated().GPU(1).WithReleaseTerm("young").Obj()}
	r, base := provisioningHarness(t, objs...)
	cycleOnce(t, r)
	for _, tc := range []struct {
		g     *berthv1alpha1.PodGroup
		seats int32
	}{{old, 1}, {young, 1}} {
		var got berthv1alpha1.PodGroup
		if err := base.Get(context.Background(), client.ObjectKeyFromObject(tc.g), &got); err != nil {
			t.Fatal(err)
		}
		if p := got.Status.Provisioning; p == nil || p.Seats != tc.seats {
			t.Errorf("gang %s's attempt = %+v, want %d seat", tc.g.Name, p, tc.seats)
		}
	}
}

// TestConsumedRequestsBootingRoomIsTheGangs: Kueue admitted a gang's job on a
// ProvisioningRequest whose seats are not bound yet: their nodes are coming up. The gang does
// not fit the Ready nodes and judges what it lacks counting the booting ones — where the
// request's seats, which stand for its members, hold the room. It asks Karpenter for nothing:
// judged with the request's seats holding that room against it, it asked for a second batch
// of the capacity the request had already brought. A gang that does not consume the request
// finds the room held and asks for its own.
func TestConsumedRequestsBootingRoomIsTheGangs(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // the harness's clock
	for _, tc := range []struct {
		name    string
		consume bool
		want    int32
	}{
		{name: "the gang consumes the request", consume: true, want: 0},
		{name: "another gang", consume: false, want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := groupAt("g", 2, now.Add(-10*time.Minute))
			objs := []client.Object{g}
			for i := range 2 {
				n := bootingNode(builders.Node(fmt.Sprintf("n%d", i)).GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(), now.Add(-30*time.Second))
				m := builders.Pod(fmt.Sprintf("g-%d", i), "ml").Member("g").Gated().GPU(8).WithReleaseTerm("g").Obj()
				m.UID = types.UID(fmt.Sprintf("uid-%d", i))
				if tc.consume {
					m.Annotations = map[string]string{autoscalingv1.ProvisioningRequestPodAnnotationKey: "train-1"}
				}
				objs = append(objs, n, requestSeat(i), m)
			}
			r, base := provisioningHarness(t, objs...)
			cycleOnce(t, r)
			var got berthv1alpha1.PodGroup
			if err := base.Get(context.Background(), client.ObjectKeyFromObject(g), &got); err != nil {
				t.Fatal(err)
			}
			var seats int32
			if p := got.Status.Provisioning; p != nil {
				seats = p.Seats
			}
			if seats != tc.want {
				t.Errorf("the gang asked for %d seats, want %d (provisioning %+v)", seats, tc.want, got.Status.Provisioning)
			}
		})
	}
}

// TestConsumedRequestsBoundSeatsAreTheGangs: a gang of four consumes a ProvisioningRequest of
// two whose seats are bound on Ready nodes. The gang places two members into the seats' room,
// as its own, and asks Karpenter for the other two — counted against it, the request's bound
// seats made it ask for four.
func TestConsumedRequestsBoundSeatsAreTheGangs(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // the harness's clock
	g := groupAt("g", 4, now.Add(-10*time.Minute))
	objs := []client.Object{g}
	for i := range 2 {
		seat := requestSeat(i)
		seat.Spec.NodeName = fmt.Sprintf("n%d", i)
		objs = append(objs, builders.Node(seat.Spec.NodeName).GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(), seat)
	}
	for i := range 4 {
		m := builders.Pod(fmt.Sprintf("g-%d", i), "ml").Member("g").Gated().GPU(8).WithReleaseTerm("g").Obj()
		m.UID = types.UID(fmt.Sprintf("uid-%d", i))
		m.Annotations = map[string]string{autoscalingv1.ProvisioningRequestPodAnnotationKey: "train-1"}
		objs = append(objs, m)
	}
	r, base := provisioningHarness(t, objs...)
	cycleOnce(t, r) // reserves the nodes its placeable members would use
	cycleOnce(t, r) // then asks for the rest
	var got berthv1alpha1.PodGroup
	if err := base.Get(context.Background(), client.ObjectKeyFromObject(g), &got); err != nil {
		t.Fatal(err)
	}
	if p := got.Status.Provisioning; p == nil || p.Seats != 2 {
		t.Errorf("the gang's attempt = %+v, want 2 seats (the request's two hold the others' room); conditions %+v", p, got.Status.Conditions)
	}
}

// TestConsumedRequestsSeatsOnTheirWay: the seats of a ProvisioningRequest the gang's members
// consume are on no node yet (Karpenter launched nodes for them that have not registered). The
// members they stand for wait for them, saying so, and only members beyond the request's seats
// (a request smaller than the gang, a member of a shape no seat covers) get seats of the gang's
// own — counted nowhere, the request's seats made the gang ask Karpenter for a second batch.
// A seat bound to a node berth's cache has not brought yet (kube-scheduler binds a seat the
// moment its node registers; the pod's watch and the node's are apart) is on its way too: read
// as bound, it stood for nothing, and the gang asked for a seat of its own a second before it
// ran on the request's two nodes (seen on CI: a third NodeClaim launched).
func TestConsumedRequestsSeatsOnTheirWay(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // the harness's clock
	for _, tc := range []struct {
		name          string
		members       int
		seatGPUs      int64
		consume       bool
		boundUnseen   bool
		want          int32
		wantCondition string
	}{
		{name: "as many seats as members", members: 2, seatGPUs: 8, consume: true, want: 0, wantCondition: "2 member(s) wait for the capacity of ProvisioningRequest ml/train-1"},
		{name: "a seat bound to a node not seen yet", members: 2, seatGPUs: 8, consume: true, boundUnseen: true, want: 0, wantCondition: "2 member(s) wait for the capacity of ProvisioningRequest ml/train-1"},
		{name: "a request smaller than the gang", members: 4, seatGPUs: 8, consume: true, want: 2},
		{name: "seats too small for the members", members: 2, seatGPUs: 4, consume: true, want: 2},
		{name: "another gang's request", members: 2, seatGPUs: 8, consume: false, want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := groupAt("g", int32(tc.members), now.Add(-10*time.Minute))
			objs := []client.Object{g}
			for i := range 2 {
				s := requestSeat(i)
				s.Spec.Containers[0].Resources.Requests[corev1.ResourceName("nvidia.com/gpu")] = *resource.NewQuantity(tc.seatGPUs, resource.DecimalSI)
				s.Spec.Containers[0].Resources.Limits = s.Spec.Containers[0].Resources.Requests
				if tc.boundUnseen && i == 1 {
					s.Spec.NodeName = "registered-a-moment-ago"
				}
				objs = append(objs, s)
			}
			for i := range tc.members {
				m := builders.Pod(fmt.Sprintf("g-%d", i), "ml").Member("g").Gated().GPU(8).WithReleaseTerm("g").Obj()
				m.UID = types.UID(fmt.Sprintf("uid-%d", i))
				if tc.consume {
					m.Annotations = map[string]string{autoscalingv1.ProvisioningRequestPodAnnotationKey: "train-1"}
				}
				objs = append(objs, m)
			}
			r, base := provisioningHarness(t, objs...)
			cycleOnce(t, r)
			cycleOnce(t, r) // a running attempt does not grow into the request's seats either
			var got berthv1alpha1.PodGroup
			if err := base.Get(context.Background(), client.ObjectKeyFromObject(g), &got); err != nil {
				t.Fatal(err)
			}
			var seats int32
			if p := got.Status.Provisioning; p != nil {
				seats = p.Seats
			}
			if seats != tc.want {
				t.Errorf("the gang asked for %d seats, want %d (provisioning %+v)", seats, tc.want, got.Status.Provisioning)
			}
			if tc.wantCondition != "" {
				c := meta.FindStatusCondition(got.Status.Conditions, berthv1alpha1.ConditionCapacityProvisioned)
				if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, tc.wantCondition) {
					t.Errorf("CapacityProvisioned = %+v, want False saying %q", c, tc.wantCondition)
				}
			}
		})
	}
}
