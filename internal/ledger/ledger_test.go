package ledger

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func counts(l *Ledger, pods []*corev1.Pod, groups []*berthv1alpha1.PodGroup) map[string]int {
	out := map[string]int{}
	for _, pn := range l.Promised(pods, groups) {
		out[pn.Pod.Name+"@"+pn.Node]++
	}
	return out
}

func TestPromisedCountsPromises(t *testing.T) {
	l := New(clocktesting.NewFakePassiveClock(t0))
	g := builders.PodGroup("g", "ml").Obj()
	g.UID = types.UID("uid-1")
	g.Status.Assignments = []berthv1alpha1.MemberAssignment{{Pod: "m0", Node: "n1"}, {Pod: "m1", Node: "n1"}, {Pod: "gone", Node: "n1"}}
	pods := []*corev1.Pod{
		builders.Pod("m0", "ml").Member("g").Obj(),                             // promised, unbound: counts on n1
		builders.Pod("m1", "ml").Member("g").Node("n1").Obj(),                  // bound: counts once
		builders.Pod("x", "ml").Node("n2").Obj(),                               // other bound pod
		builders.Pod("done", "ml").Node("n2").Phase(corev1.PodSucceeded).Obj(), // finished: nothing
	}
	if diff := cmp.Diff(map[string]int{"m0@n1": 1, "m1@n1": 1, "x@n2": 1}, counts(l, pods, []*berthv1alpha1.PodGroup{g})); diff != "" {
		t.Errorf("pods on nodes (-want +got):\n%s", diff)
	}

	// A released member counts on the node it is pinned to even when its gang's record of the
	// promise is missing (a status write that failed after the pin, a cache that trails); one
	// the record shows too counts once; a pinned member still gated is a promise only through
	// its record; a released member of a gang that is gone never binds.
	lost := builders.PodGroup("lost", "ml").Obj()
	lost.UID = types.UID("uid-2")
	recorded := builders.PodGroup("rec", "ml").Obj()
	recorded.UID = types.UID("uid-3")
	recorded.Status.Assignments = []berthv1alpha1.MemberAssignment{{Pod: "r0", UID: "r0-uid", Node: "n3"}}
	r0 := builders.Pod("r0", "ml").Member("rec").Pinned("n3").Obj()
	r0.UID = "r0-uid"
	released := []*corev1.Pod{
		builders.Pod("l0", "ml").Member("lost").Pinned("n3").Obj(),
		builders.Pod("orphan", "ml").Member("deleted-gang").Pinned("n3").Obj(),
		builders.Pod("l1", "ml").Member("lost").Pinned("n3").Gated().Obj(),
		r0,
	}
	if diff := cmp.Diff(map[string]int{"l0@n3": 1, "r0@n3": 1}, counts(l, released, []*berthv1alpha1.PodGroup{lost, recorded})); diff != "" {
		t.Errorf("released members on nodes (-want +got):\n%s", diff)
	}

	// A fresh admission the cache does not show yet still counts.
	stale := builders.PodGroup("g", "ml").Obj()
	stale.UID, stale.ResourceVersion = g.UID, "6"
	l.AssumeAssignments(g.UID, g.Status.Assignments, "7")
	if diff := cmp.Diff(map[string]int{"m0@n1": 1}, counts(l, pods[:1], []*berthv1alpha1.PodGroup{stale})); diff != "" {
		t.Errorf("assumed promise (-want +got):\n%s", diff)
	}
}

// TestPromisedCountsOtherUsersSeats: a ProvisioningRequest's seat pinned to a node books its
// room before it binds — the gang admission of the same process must see it (it counted pinned
// pods of live gangs only, and promised the same GPUs) — and a seat this process created that
// the cache does not show yet counts too, once.
func TestPromisedCountsOtherUsersSeats(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	l := New(clk)
	seat := builders.Pod("pr-seat", "berth-system").Label(berthv1alpha1.SeatForProvisioningRequestLabel, "pr-uid").Pinned("n1").Obj()
	seat.UID = "seat-uid"
	if diff := cmp.Diff(map[string]int{"pr-seat@n1": 1}, counts(l, []*corev1.Pod{seat}, nil)); diff != "" {
		t.Errorf("a pinned seat in the cache (-want +got):\n%s", diff)
	}
	l.AssumePod(seat, "n1")
	if diff := cmp.Diff(map[string]int{"pr-seat@n1": 1}, counts(l, nil, nil)); diff != "" {
		t.Errorf("a seat created, not in the cache yet (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"pr-seat@n1": 1}, counts(l, []*corev1.Pod{seat}, nil)); diff != "" {
		t.Errorf("a seat assumed and in the cache counts once (-want +got):\n%s", diff)
	}
	l.CatchUp([]*corev1.Pod{seat}, nil)
	if len(l.pods) != 0 {
		t.Errorf("the cache shows the seat: still assumed %v", l.pods)
	}
	l.AssumePod(seat, "n1")
	clk.SetTime(t0.Add(2 * podTTL))
	l.CatchUp(nil, nil)
	if len(l.pods) != 0 {
		t.Errorf("an assumed seat the cache never showed (deleted at once) is kept past its TTL: %v", l.pods)
	}
}

func TestCatchUpAssignments(t *testing.T) {
	l := New(nil)
	for _, uid := range []types.UID{"caught-up", "stale", "deleted"} {
		l.AssumeAssignments(uid, []berthv1alpha1.MemberAssignment{{Pod: "a", Node: "n"}}, "10")
	}
	caught := builders.PodGroup("a", "ml").Obj()
	caught.UID, caught.ResourceVersion = "caught-up", "10"
	caught.Status.Assignments = []berthv1alpha1.MemberAssignment{{Pod: "a", Node: "n"}}
	stale := builders.PodGroup("b", "ml").Obj()
	stale.UID, stale.ResourceVersion = "stale", "9"
	l.CatchUp(nil, []*berthv1alpha1.PodGroup{caught, stale})
	if _, ok := l.assignments["stale"]; !ok || len(l.assignments) != 1 {
		t.Errorf("assumed after catching up = %v, want only the stale one", l.assignments)
	}
}

// TestAssumedReplacementAndGeneration: a replacement adds one assignment to a status the cache
// shows with the others, and a new generation replaces an old one's: the cache's status is
// non-empty and older than the write — the write's assignments count until the cache shows its
// version (the ledger counted a status of as many or more as caught up, and promised the
// replacement's and the new generation's nodes again).
func TestAssumedReplacementAndGeneration(t *testing.T) {
	l := New(nil)
	cached := builders.PodGroup("g", "ml").Obj()
	cached.UID, cached.ResourceVersion = "uid-g", "5"
	cached.Status.Assignments = []berthv1alpha1.MemberAssignment{{Pod: "a", Node: "old-1"}, {Pod: "b", Node: "old-2"}}
	next := []berthv1alpha1.MemberAssignment{{Pod: "a2", Node: "new-1"}}
	l.AssumeAssignments(cached.UID, next, "6")
	l.CatchUp(nil, []*berthv1alpha1.PodGroup{cached})
	if diff := cmp.Diff(next, l.Assignments(cached)); diff != "" {
		t.Errorf("a new generation the cache does not show yet (-want +got):\n%s", diff)
	}
	cached.ResourceVersion, cached.Status.Assignments = "6", next
	l.CatchUp(nil, []*berthv1alpha1.PodGroup{cached})
	if len(l.assignments) != 0 {
		t.Errorf("caught up, still assumed: %v", l.assignments)
	}
}

// TestHeldRoomCounts: the room a native gang's seats give way to its members counts on its node
// once the seat is gone from the cache (while it is there it counts as itself, once), until the
// owner releases it or its time passes.
func TestHeldRoomCounts(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	l := New(clk)
	seat := builders.Pod("ng-seat-0", "berth-system").Label(berthv1alpha1.SeatForNativeGroupLabel, "ng-uid").GPU(8).Node("n1").Obj()
	seat.UID = "seat-uid"
	l.Hold("ng-uid", []scheduling.PodOnNode{{Pod: seat, Node: "n1"}}, t0.Add(time.Minute))
	if diff := cmp.Diff(map[string]int{"ng-seat-0@n1": 1}, counts(l, []*corev1.Pod{seat}, nil)); diff != "" {
		t.Errorf("seat still cached (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"ng-seat-0@n1": 1}, counts(l, nil, nil)); diff != "" {
		t.Errorf("seat gone, room held (-want +got):\n%s", diff)
	}
	l.Release("ng-uid")
	if got := counts(l, nil, nil); len(got) != 0 {
		t.Errorf("released, still held: %v", got)
	}
	l.Hold("ng-uid", []scheduling.PodOnNode{{Pod: seat, Node: "n1"}}, t0.Add(time.Minute))
	clk.SetTime(t0.Add(time.Minute))
	if got := counts(l, nil, nil); len(got) != 0 {
		t.Errorf("past its time, still held: %v", got)
	}
	l.CatchUp(nil, nil)
	if len(l.holds) != 0 {
		t.Errorf("CatchUp kept an expired hold: %v", l.holds)
	}
	// A hold that stands for a pod (a copy of it under the seat's UID) stops counting once that
	// pod is bound: it counts as itself then, once.
	pod := builders.Pod("c0", "team-a").GPU(8).Obj()
	pod.UID = "c0-uid"
	standIn := pod.DeepCopy()
	standIn.UID = seat.UID
	l.Hold("pr-uid", []scheduling.PodOnNode{{Pod: standIn, Node: "n1"}}, t0.Add(2*time.Minute))
	if diff := cmp.Diff(map[string]int{"c0@n1": 1}, counts(l, []*corev1.Pod{pod}, nil)); diff != "" {
		t.Errorf("the pod waits, its room held (-want +got):\n%s", diff)
	}
	bound := builders.PodFrom(pod).Node("n1").Obj()
	if diff := cmp.Diff(map[string]int{"c0@n1": 1}, counts(l, []*corev1.Pod{bound}, nil)); diff != "" {
		t.Errorf("the pod bound: counted as itself, once (-want +got):\n%s", diff)
	}
	if got := l.Held("pr-uid"); len(got) != 1 {
		t.Errorf("Held = %v, want the hold until released", got)
	}
}
