package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// keyGang is a PodGroup g in namespace ml with its UID set.
func keyGang() *berthv1alpha1.PodGroup {
	g := builders.PodGroup("g", "ml").MinMember(3).Obj()
	g.UID = "uid-g"
	return g
}

// keyMember is member i of gang g: gated, with the release term unless without is set.
func keyMember(i int, without bool) *builders.PodBuilder {
	b := builders.Pod(fmt.Sprintf("g-%02d", i), "ml").Member("g").Gated().GPU(1)
	if !without {
		b = b.WithReleaseTerm("g")
	}
	return b
}

// released is a member released onto node (pinned, ungated), bound when bound is set.
func released(i int, node string, bound bool) *builders.PodBuilder {
	b := builders.PodFrom(withPin(keyMember(i, false).Obj(), node, "")).Ungated()
	if bound {
		b = b.Node(node)
	}
	return b
}

func podsOf(t *testing.T, c client.Client) map[string]*corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

// TestReleaseOpensWithTheKeyLast: every member but the key is pinned and ungated first, the
// seats give way, and the key member (pinned, ungated and labelled in one patch) comes last —
// in the cycle that no longer sees the seats: until that write nothing in the gang can bind.
func TestReleaseOpensWithTheKeyLast(t *testing.T) {
	g := keyGang()
	var members []*corev1.Pod
	objs := []client.Object{g}
	for i := range 3 {
		p := keyMember(i, false).Obj()
		p.UID = types.UID(fmt.Sprintf("uid-%d", i))
		members = append(members, p)
		objs = append(objs, p)
	}
	seat := builders.Pod("seat-0", "berth-system").Label(berthv1alpha1.SeatOfLabel, string(g.UID)).Obj()
	objs = append(objs, seat)
	r, base, writes, _, _ := budgetHarness(t, objs...)
	nodeOf := map[string]string{"g-00": "n0", "g-01": "n1", "g-02": "n2"}
	if err := r.release(context.Background(), g, members, members, nodeOf, []*corev1.Pod{seat}); err != nil {
		t.Fatal(err)
	}
	seq := writes.sequence()
	if len(seq) != 3 || !strings.HasSuffix(seq[2], "seat-0") {
		t.Fatalf("writes %v: want the two other members, then the seat — and not the key before the seat is seen gone", seq)
	}
	if key := podsOf(t, base)["g-02"]; len(key.Spec.SchedulingGates) == 0 {
		t.Fatal("the key member was ungated in the cycle that deleted the seat")
	}
	// The seat's deletion starts the next cycle, whose view no longer has it: the release
	// goes on with what is still gated.
	var gated []*corev1.Pod
	for _, p := range podsOf(t, base) {
		if gateIndex(p) >= 0 {
			gated = append(gated, p)
		}
	}
	if err := r.release(context.Background(), g, gated, members, nodeOf, nil); err != nil {
		t.Fatal(err)
	}
	seq = writes.sequence()
	if len(seq) != 4 || !strings.HasSuffix(seq[3], "g-02") {
		t.Fatalf("writes %v: want the two other members, the seat, then the key g-02", seq)
	}
	got := podsOf(t, base)
	for name, p := range got {
		if name == "seat-0" {
			t.Error("the seat is still there")
			continue
		}
		if len(p.Spec.SchedulingGates) != 0 || p.Annotations[berthv1alpha1.PinnedNodeAnnotation] != nodeOf[name] {
			t.Errorf("member %s not pinned to %s and ungated: gates %v, annotations %v", name, nodeOf[name], p.Spec.SchedulingGates, p.Annotations)
		}
		if behindBarrier(p, barrierKey(g)) {
			t.Errorf("member %s with the release term pinned behind the node barrier", name)
		}
		if isKey(g, p) != (name == "g-02") {
			t.Errorf("member %s key = %v", name, isKey(g, p))
		}
	}
}

// TestReleaseWithoutTheTermKeepsTheNodeBarrier: a gang with one member the gate gave no release
// term (created before it did) is held by the node barrier, lifted after the key.
func TestReleaseWithoutTheTermKeepsTheNodeBarrier(t *testing.T) {
	g := keyGang()
	members := []*corev1.Pod{keyMember(0, true).Obj(), keyMember(1, false).Obj()}
	objs := []client.Object{g, builders.Node("n0").Obj(), builders.Node("n1").Obj()}
	for _, m := range members {
		objs = append(objs, m)
	}
	r, base, writes, _, _ := budgetHarness(t, objs...)
	nodeOf := map[string]string{"g-00": "n0", "g-01": "n1"}
	if err := r.release(context.Background(), g, members, members, nodeOf, nil); err != nil {
		t.Fatal(err)
	}
	seq := writes.sequence()
	if len(seq) != 4 || !strings.HasSuffix(seq[1], "g-01") {
		t.Fatalf("writes %v: want g-00, the key g-01, then the barrier on both nodes", seq)
	}
	got := podsOf(t, base)
	for _, name := range []string{"g-00", "g-01"} {
		if !behindBarrier(got[name], barrierKey(g)) {
			t.Errorf("member %s not pinned behind the node barrier", name)
		}
	}
	if !isKey(g, got["g-01"]) || isKey(g, got["g-00"]) {
		t.Error("the member with the release term is not the only key")
	}
	for _, n := range []string{"n0", "n1"} {
		var node corev1.Node
		if err := base.Get(context.Background(), client.ObjectKey{Name: n}, &node); err != nil {
			t.Fatal(err)
		}
		if _, ok := node.Labels[barrierKey(g)]; !ok {
			t.Errorf("node %s: barrier not lifted", n)
		}
	}
}

// TestReleaseResumedAfterTheRestKeepsTheKeyLast: a release cut off after every member but the
// key was ungated is resumed by the next controller with the gated key, labelled in the last
// write. A key label on an ungated member (an earlier release's, or one made key while the
// release was cut off) comes off before anything else: left there, the waiting members could
// bind while the key is still gated.
func TestReleaseResumedAfterTheRestKeepsTheKeyLast(t *testing.T) {
	for _, tc := range []struct {
		name      string
		waitKey   bool // a waiting member carries the key label
		wantFirst string
	}{
		{"no label left", false, "g-02"},
		{"a waiting member labelled key", true, "g-01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := keyGang()
			w1 := released(1, "n1", false)
			if tc.waitKey {
				w1 = w1.Label(berthv1alpha1.ReleaseLabel, "g")
			}
			all := []*corev1.Pod{released(0, "n0", false).Obj(), w1.Obj(), keyMember(2, false).Obj()}
			objs := []client.Object{g}
			for _, p := range all {
				objs = append(objs, p)
			}
			r, base, writes, _, _ := budgetHarness(t, objs...)
			nodeOf := map[string]string{"g-00": "n0", "g-01": "n1", "g-02": "n2"}
			if err := r.release(context.Background(), g, all, all, nodeOf, nil); err != nil {
				t.Fatal(err)
			}
			seq := writes.sequence()
			if len(seq) == 0 || !strings.HasSuffix(seq[0], tc.wantFirst) || !strings.HasSuffix(seq[len(seq)-1], "g-02") {
				t.Fatalf("writes %v: want %s first and the key g-02 last", seq, tc.wantFirst)
			}
			for name, p := range podsOf(t, base) {
				if isKey(g, p) != (name == "g-02") {
					t.Errorf("member %s key = %v, want only the gated member g-02", name, isKey(g, p))
				}
			}
		})
	}
}

// TestReleaseClosesATerminatingOldKey: the key member of a gang's previous run, deleted but
// still terminating on its node with the key label (kube-scheduler still counts it for pod
// affinity), would open the next run's members as soon as they are ungated. The next release
// takes the label off it before it ungates anything.
func TestReleaseClosesATerminatingOldKey(t *testing.T) {
	g := keyGang()
	g.Spec.MinMember = 2
	old := released(9, "n0", true).Label(berthv1alpha1.ReleaseLabel, "g").Obj()
	deleted := metav1.Unix(1_700_000_000, 0)
	old.DeletionTimestamp = &deleted
	old.Finalizers = []string{"test"}
	objs := []client.Object{g, builders.Node("n0").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(), old}
	for i := range 2 {
		p := keyMember(i, false).Obj()
		p.UID = types.UID(fmt.Sprintf("uid-%d", i))
		objs = append(objs, p)
	}
	r, base, writes, _, _ := budgetHarness(t, objs...)
	cycleOnce(t, r)
	var seq []string
	for _, w := range writes.sequence() {
		if strings.Contains(w, "*v1.Pod") {
			seq = append(seq, w)
		}
	}
	if len(seq) != 3 || !strings.HasSuffix(seq[0], "g-09") || !strings.HasSuffix(seq[2], "g-01") {
		t.Fatalf("pod writes %v: want the old key's label off first, then g-00, then the key g-01", seq)
	}
	got := podsOf(t, base)
	if isKey(g, got["g-09"]) {
		t.Error("the terminating old key still carries the key label")
	}
	if !isKey(g, got["g-01"]) || isKey(g, got["g-00"]) {
		t.Error("the new run's key is not g-01 alone")
	}
}

// TestDecideKey: the key label follows who waits — a waiting gang with no live key gets one (the
// key member deleted, a release cut off before its last write), one with a key is left alone,
// and the label comes off once every member is bound and no release is under way.
func TestDecideKey(t *testing.T) {
	deleting := released(2, "n2", false).Label(berthv1alpha1.ReleaseLabel, "g").Obj()
	deleting.DeletionTimestamp = &metav1.Time{}
	deleting.Finalizers = []string{"test"}
	tests := []struct {
		name     string
		pods     []*corev1.Pod
		nodeOf   map[string]string
		wantKeys []string
	}{
		{"a release cut off before the key: the last waiting member becomes it",
			[]*corev1.Pod{released(0, "n0", false).Obj(), released(1, "n1", false).Obj()}, nil, []string{"g-01"}},
		{"the key member deleted while the others wait: another becomes it",
			[]*corev1.Pod{released(0, "n0", false).Obj(), released(1, "n1", false).Obj(), deleting}, nil, []string{"g-01", "g-02"}},
		{"a bound key opens the waiting members: nothing to do",
			[]*corev1.Pod{released(0, "n0", false).Obj(), released(1, "n1", true).Label(berthv1alpha1.ReleaseLabel, "g").Obj()}, nil, []string{"g-01"}},
		{"everyone bound: the key label comes off",
			[]*corev1.Pod{released(0, "n0", true).Obj(), released(1, "n1", true).Label(berthv1alpha1.ReleaseLabel, "g").Obj()}, nil, nil},
		{"a release under way: the label stays until it is done",
			[]*corev1.Pod{keyMember(0, false).Obj(), released(1, "n1", true).Label(berthv1alpha1.ReleaseLabel, "g").Obj()},
			map[string]string{"g-00": "n0", "g-01": "n1"}, []string{"g-01"}},
		{"a release stopped while seats give way, a member still gated: no waiting member becomes the key (it would open the gang partly)",
			[]*corev1.Pod{released(0, "n0", false).Obj(), keyMember(1, false).Obj()},
			map[string]string{"g-00": "n0", "g-01": "n1"}, nil},
		{"members without the release term wait for no key",
			[]*corev1.Pod{builders.PodFrom(withPin(keyMember(0, true).Obj(), "n0", barrierKey(keyGang()))).Ungated().Obj()}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := keyGang()
			p := decideKey(g, tt.pods, tt.nodeOf)
			keys := map[string]bool{}
			for _, m := range tt.pods {
				keys[m.Name] = isKey(g, m)
			}
			for _, m := range p.off {
				keys[m.Name] = false
			}
			if p.on != nil {
				keys[p.on.Name] = true
			}
			var got []string
			for name, k := range keys {
				if k {
					got = append(got, name)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.wantKeys) {
				t.Errorf("keys %v, want %v", got, tt.wantKeys)
			}
		})
	}
}

// TestAPodMadeAgainIsNotItsNamesAssignment: a released key member that never bound is deleted
// and created again under its name, gated (a StatefulSet's, a training operator's). The new pod
// is not the assigned one: no release is under way on its account, and a member released and
// waiting is made the key — taken for the assigned pod, it held the waiting members (and their
// GPUs) until the new pod was placed, for good where nothing could place it.
func TestAPodMadeAgainIsNotItsNamesAssignment(t *testing.T) {
	g := keyGang()
	waiting := released(0, "n0", false).Obj()
	waiting.UID = "uid-0"
	again := keyMember(1, false).Obj()
	again.UID = "uid-1-again"
	assigned := []berthv1alpha1.MemberAssignment{{Pod: "g-00", UID: "uid-0", Node: "n0"}, {Pod: "g-01", UID: "uid-1", Node: "n1"}}
	pods := []*corev1.Pod{waiting, again}
	gen := classify(pods, assigned)
	nodeOf := assignedNodes(gen.assigned, gen.live)
	if d := cmp.Diff(map[string]string{"g-00": "n0"}, nodeOf); d != "" {
		t.Fatalf("assigned nodes (-want +got):\n%s", d)
	}
	if p := decideKey(g, pods, nodeOf); p.on == nil || p.on.Name != "g-00" {
		t.Fatalf("key plan %+v: want the waiting member g-00 made the key", p)
	}
	// The pod of an assignment recorded without a UID (an older berth) is matched by name.
	legacy := []berthv1alpha1.MemberAssignment{{Pod: "g-00", Node: "n0"}}
	if d := cmp.Diff(map[string]string{"g-00": "n0"}, assignedNodes(legacy, []*corev1.Pod{waiting})); d != "" {
		t.Errorf("assigned nodes without UIDs (-want +got):\n%s", d)
	}
}

// TestActKeyWritesThePlan: actKey labels the member made the key and takes the label off the
// others, in the API.
func TestActKeyWritesThePlan(t *testing.T) {
	g := keyGang()
	on := released(0, "n0", false).Obj()
	off := released(1, "n1", true).Label(berthv1alpha1.ReleaseLabel, "g").Obj()
	r, base, _, _, _ := budgetHarness(t, g, on, off)
	if err := r.actKey(context.Background(), g, keyPlan{on: on, off: []*corev1.Pod{off}}); err != nil {
		t.Fatal(err)
	}
	got := podsOf(t, base)
	if !isKey(g, got["g-00"]) || isKey(g, got["g-01"]) {
		t.Errorf("keys after actKey: g-00 %v, g-01 %v; want g-00 alone", isKey(g, got["g-00"]), isKey(g, got["g-01"]))
	}
}

// TestSweepKeys: a PodGroup deleted with its key still labelled leaves no open gang behind for
// a PodGroup created again under its name.
func TestSweepKeys(t *testing.T) {
	stale := released(0, "n0", true).Label(berthv1alpha1.ReleaseLabel, "g").Obj()
	r, base, _, _, _ := budgetHarness(t, stale)
	if err := r.sweepKeys(context.Background(), &cycle{members: membersByGroup([]*corev1.Pod{stale})}); err != nil {
		t.Fatal(err)
	}
	if isKey(keyGang(), podsOf(t, base)["g-00"]) {
		t.Error("the key label of a deleted PodGroup's member is still there")
	}
}

// TestReleaseDoesNotWaitForATerminatingSeat: a seat already deleted whose removal someone
// else's finalizer holds is not waited for (kube-scheduler counts it until it goes): the key is
// released in the same call, and the seat is not deleted again.
func TestReleaseDoesNotWaitForATerminatingSeat(t *testing.T) {
	g := keyGang()
	var members []*corev1.Pod
	objs := []client.Object{g}
	for i := range 3 {
		p := keyMember(i, false).Obj()
		p.UID = types.UID(fmt.Sprintf("uid-%d", i))
		members = append(members, p)
		objs = append(objs, p)
	}
	seat := builders.Pod("seat-0", "berth-system").Label(berthv1alpha1.SeatOfLabel, string(g.UID)).Obj()
	seat.Finalizers = []string{"example.com/hold"}
	now := metav1.Now()
	seat.DeletionTimestamp = &now
	objs = append(objs, seat)
	r, _, writes, _, _ := budgetHarness(t, objs...)
	nodeOf := map[string]string{"g-00": "n0", "g-01": "n1", "g-02": "n2"}
	if err := r.release(context.Background(), g, members, members, nodeOf, []*corev1.Pod{seat}); err != nil {
		t.Fatal(err)
	}
	seq := writes.sequence()
	if len(seq) != 3 || !strings.HasSuffix(seq[2], "g-02") || slices.ContainsFunc(seq, func(w string) bool { return strings.HasSuffix(w, "seat-0") }) {
		t.Fatalf("writes %v: want the two other members then the key g-02, and the terminating seat left alone", seq)
	}
}

// TestTendBarrier: the node barrier goes up where a released member behind it waits and comes
// off the nodes that carry it with no member waiting there (nor one still gated); the gang's
// other nodes and the other gangs' barriers are left alone.
func TestTendBarrier(t *testing.T) {
	g := keyGang()
	key := barrierKey(g)
	withLabel := func(name, label string) *corev1.Node {
		n := builders.Node(name).Obj()
		n.Labels[label] = "true"
		return n
	}
	nodes := []*corev1.Node{
		builders.Node("waits").Obj(),   // a released member waits here: barrier goes up
		withLabel("stale", key),        // nothing waits: barrier comes off
		withLabel("gated", key),        // a member still gated is assigned here: it stays
		withLabel("other", key+"-x"),   // another gang's barrier: untouched
		builders.Node("idle").Obj(),    // nothing: untouched
		withLabel("waits-lifted", key), // a member waits and the barrier is up: untouched
	}
	waiting := builders.PodFrom(withPin(keyMember(0, true).Obj(), "waits", key)).Ungated().Obj()
	lifted := builders.PodFrom(withPin(keyMember(1, true).Obj(), "waits-lifted", key)).Ungated().Obj()
	gated := keyMember(2, true).Obj()
	objs := []client.Object{g, waiting, lifted, gated}
	for _, n := range nodes {
		objs = append(objs, n)
	}
	r, _, writes, _, _ := budgetHarness(t, objs...)
	cy := &cycle{nodes: nodes, snap: scheduling.NewSnapshot(nodes, nil, nil)}
	members := []*corev1.Pod{waiting, lifted, gated}
	nodeOf := map[string]string{waiting.Name: "waits", lifted.Name: "waits-lifted", gated.Name: "gated"}
	if err := r.tendBarrier(context.Background(), cy, g, members, nodeOf); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range writes.sequence() {
		if strings.Contains(w, "*v1.Node") {
			got = append(got, w[strings.LastIndex(w, " ")+1:])
		}
	}
	slices.Sort(got)
	if want := []string{"stale", "waits"}; !slices.Equal(got, want) {
		t.Errorf("nodes written %v, want %v", got, want)
	}
}
