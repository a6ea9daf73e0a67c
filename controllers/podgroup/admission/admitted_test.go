package admission

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

// owned gives p a controller (a Job), so a RestartGang can have it recreated.
func owned(p *corev1.Pod) *corev1.Pod {
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "uid-job", Controller: &yes}}
	return p
}

// admittedSummary is what a test compares of an admittedPlan: names, not pointers.
type admittedSummary struct {
	Over, Next, Awaiting, DropSeats bool
	Resume, Orphaned, Restart       []string
	Replace, Join                   []string
}

func summarize(p admittedPlan) admittedSummary {
	s := admittedSummary{Over: p.over, Next: p.next, Awaiting: p.awaiting != "", DropSeats: p.dropSeats,
		Resume: namesOrNil(p.resume), Orphaned: namesOrNil(p.orphaned), Replace: namesOrNil(p.replace.pods), Join: namesOrNil(p.join.pods)}
	if p.restart != nil {
		s.Restart = namesOrNil(p.restart.doomed)
	}
	return s
}

// TestDecideAdmitted: what a gang with an admitted generation gets in one cycle, decided from its
// members, assignments, spec and the nodes that exist — without an API server.
func TestDecideAdmitted(t *testing.T) {
	run := func(name, idx string) *corev1.Pod { return member(name, corev1.PodRunning, false, idx) }
	gated := func(name, idx string) *corev1.Pod { return member(name, corev1.PodPending, true, idx) }
	done := func(name string) *corev1.Pod { return member(name, corev1.PodSucceeded, false, "") }
	queued := gated("q", "")
	queued.Spec.SchedulingGates = append(queued.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "kueue.x-k8s.io/admission"})
	asg := func(pods ...string) []berthv1alpha1.MemberAssignment {
		var out []berthv1alpha1.MemberAssignment
		for _, p := range pods {
			out = append(out, berthv1alpha1.MemberAssignment{Pod: p, UID: "uid-" + typesUID(p), Node: "n-" + p})
		}
		return out
	}
	provisioning := func(g *berthv1alpha1.PodGroup) {
		now := metav1.Now()
		g.Status.Provisioning = &berthv1alpha1.ProvisioningStatus{StartedAt: &now}
	}
	restartGang := func(g *berthv1alpha1.PodGroup) { g.Spec.OnMemberLoss = berthv1alpha1.MemberLossRestartGang }
	for _, tc := range []struct {
		name     string
		members  []*corev1.Pod
		assigned []berthv1alpha1.MemberAssignment
		min      int32
		gone     []string // nodes that do not exist
		edit     func(*berthv1alpha1.PodGroup)
		want     admittedSummary
	}{
		{name: "every member succeeded, nothing new: over and idle, the seats go",
			members: []*corev1.Pod{done("a"), done("b")}, assigned: asg("a", "b"), min: 2,
			want: admittedSummary{Over: true}},
		{name: "every member lost, nothing recreated yet: the condition says what the gang waits for",
			members: nil, assigned: asg("a", "b"), min: 2,
			want: admittedSummary{Over: true, Awaiting: true}},
		{name: "every member lost and fresh ones exist: the next generation starts",
			members: []*corev1.Pod{gated("c", ""), gated("d", "")}, assigned: asg("a", "b"), min: 2,
			want: admittedSummary{Over: true, Next: true}},
		{name: "only a queued member is new: the next generation starts (the queue admits it later)",
			members: []*corev1.Pod{queued}, assigned: asg("a"), min: 1,
			want: admittedSummary{Over: true, Next: true}},
		{name: "a release interrupted: the gated members are resumed, the seats stay for it",
			members: []*corev1.Pod{run("a", ""), gated("b", "")}, assigned: asg("a", "b"), min: 2,
			want: admittedSummary{Resume: []string{"b"}}},
		{name: "a gated member's node is gone: it is orphaned, not resumed",
			members: []*corev1.Pod{gated("a", ""), gated("b", "")}, assigned: asg("a", "b"), min: 2, gone: []string{"n-b"},
			want: admittedSummary{Resume: []string{"a"}, Orphaned: []string{"b"}}},
		{name: "released whole, no capacity request: the seats go",
			members: []*corev1.Pod{run("a", ""), run("b", "")}, assigned: asg("a", "b"), min: 2,
			want: admittedSummary{DropSeats: true}},
		{name: "released whole while the capacity request still runs: the seats stay",
			members: []*corev1.Pod{run("a", ""), run("b", "")}, assigned: asg("a", "b"), min: 2, edit: provisioning,
			want: admittedSummary{}},
		{name: "Replace: a lost member's replacement joins with capacity",
			members: []*corev1.Pod{run("a", "0"), gated("b-2", "1")}, assigned: []berthv1alpha1.MemberAssignment{{Pod: "a", UID: "uid-a", Node: "n-a"}, {Pod: "b", UID: "uid-b", Node: "n-b"}}, min: 2,
			want: admittedSummary{DropSeats: true, Replace: []string{"b-2"}}},
		{name: "RestartGang: the live members with a controller are restarted, nothing joins",
			members: []*corev1.Pod{owned(run("a", "0")), owned(run("c", "2")), run("bare", ""), gated("b-2", "1")}, assigned: asg("a", "b", "c", "bare"), min: 4, edit: restartGang,
			want: admittedSummary{DropSeats: true, Restart: []string{"a", "c"}}},
		{name: "RestartGang with no live member under a controller: replaced as with Replace",
			members: []*corev1.Pod{run("a", ""), gated("b-2", "")}, assigned: asg("a", "b"), min: 2, edit: restartGang,
			want: admittedSummary{DropSeats: true, Replace: []string{"b-2"}}},
		{name: "an elastic gang's extra member joins while no member has succeeded",
			members: []*corev1.Pod{run("a", ""), run("b", ""), gated("c", "")}, assigned: asg("a", "b"), min: 2,
			want: admittedSummary{DropSeats: true, Join: []string{"c"}}},
		{name: "a Job's next wave waits for the current one once a member succeeded",
			members: []*corev1.Pod{run("a", "0"), done("b"), gated("c", "2")}, assigned: asg("a", "b"), min: 2,
			want: admittedSummary{DropSeats: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := builders.PodGroup("g", "ml").MinMember(tc.min).Obj()
			if tc.edit != nil {
				tc.edit(g)
			}
			gen := classify(tc.members, tc.assigned)
			p := decideAdmitted(gangView{group: g, members: tc.members}, gen, func(n string) bool { return !slices.Contains(tc.gone, n) })
			if d := cmp.Diff(tc.want, summarize(p)); d != "" {
				t.Errorf("plan (-want +got):\n%s", d)
			}
			if p.restart != nil && !slices.Contains(p.restart.lost, "b") {
				t.Errorf("restart names lost %v, want b among them", p.restart.lost)
			}
			if p.awaiting != "" && !strings.Contains(p.awaiting, "a, b") {
				t.Errorf("awaiting %q does not name the lost members", p.awaiting)
			}
		})
	}
}

// TestPlanRelease: the release writes close the old keys, pin and ungate the members but the key,
// and open the gang with the key last; members without the release term need the node barrier,
// lifted on every node of the release.
func TestPlanRelease(t *testing.T) {
	g := keyGang()
	oldKey := released(9, "n9", true).Label(berthv1alpha1.ReleaseLabel, "g").Obj()
	gatedOldKey := keyMember(8, false).Label(berthv1alpha1.ReleaseLabel, "g").Obj() // holds nothing open
	m0, m1, m2 := keyMember(0, false).Obj(), keyMember(1, false).Obj(), keyMember(2, true).Obj()
	bound := released(3, "n3", true).Obj()
	for _, tc := range []struct {
		name         string
		members, all []*corev1.Pod
		nodeOf       map[string]string
		ok           bool
		close, rest  []string
		key, barrier string
		lift         []string
	}{
		{name: "nothing gated: nothing to release", members: []*corev1.Pod{bound}, all: []*corev1.Pod{bound},
			nodeOf: map[string]string{"g-03": "n3"}},
		{name: "gated but unassigned: nothing to release", members: []*corev1.Pod{m0}, all: []*corev1.Pod{m0}},
		{name: "every member holds for the key: the last by name is the key, no barrier",
			members: []*corev1.Pod{m0, m1}, all: []*corev1.Pod{m0, m1, oldKey, gatedOldKey},
			nodeOf: map[string]string{"g-00": "n0", "g-01": "n1"}, ok: true,
			close: []string{"g-09"}, rest: []string{"g-00"}, key: "g-01"},
		{name: "a member without the release term: the barrier holds it, lifted on every node of the release",
			members: []*corev1.Pod{m0, m1, m2, bound}, all: []*corev1.Pod{m0, m1, m2, bound},
			nodeOf: map[string]string{"g-00": "n0", "g-01": "n0", "g-02": "n2", "g-03": "n3"}, ok: true,
			rest: []string{"g-00", "g-02"}, key: "g-01", barrier: barrierKey(g), lift: []string{"n0", "n2"}},
		{name: "no member holds for the key: the barrier alone",
			members: []*corev1.Pod{m2}, all: []*corev1.Pod{m2}, nodeOf: map[string]string{"g-02": "n2"}, ok: true,
			rest: []string{"g-02"}, barrier: barrierKey(g), lift: []string{"n2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := planRelease(g, tc.members, tc.all, tc.nodeOf)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			key := ""
			if p.key != nil {
				key = p.key.Name
			}
			got := []any{namesOrNil(p.close), namesOrNil(p.rest), key, p.barrier, p.lift}
			want := []any{tc.close, tc.rest, tc.key, tc.barrier, tc.lift}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("plan [close rest key barrier lift] (-want +got):\n%s", d)
			}
		})
	}
}

// TestDecideHold: the node barrier goes up where a released member behind it waits on a node that
// exists without it, comes off the nodes that carry it with no member waiting there (nor one
// still gated), and the key label follows decideKey.
func TestDecideHold(t *testing.T) {
	g := keyGang()
	key := barrierKey(g)
	waiting := builders.PodFrom(withPin(keyMember(0, true).Obj(), "waits", key)).Ungated().Obj()
	lifted := builders.PodFrom(withPin(keyMember(1, true).Obj(), "waits-lifted", key)).Ungated().Obj()
	gated := keyMember(2, true).Obj()
	gone := builders.PodFrom(withPin(keyMember(3, true).Obj(), "gone", key)).Ungated().Obj()
	boundKey := released(4, "n4", true).Label(berthv1alpha1.ReleaseLabel, "g").Obj()
	members := []*corev1.Pod{waiting, lifted, gated, gone, boundKey}
	nodeOf := map[string]string{waiting.Name: "waits", lifted.Name: "waits-lifted", gated.Name: "gated", gone.Name: "gone", boundKey.Name: "n4"}
	labelled := map[string]bool{"stale": true, "gated": true, "waits-lifted": true}
	p := decideHold(g, members, nodeOf, barrierView{
		key:      key,
		labelled: []string{"gated", "stale", "waits-lifted"},
		node: func(name string) (bool, bool) {
			return name != "gone", labelled[name]
		},
	})
	if d := cmp.Diff([]any{[]string{"waits"}, []string{"stale"}}, []any{p.up, p.down}); d != "" {
		t.Errorf("barrier [up down] (-want +got):\n%s", d)
	}
	// A member is still gated and assigned: a release is under way, the key is left alone.
	if p.key.on != nil || len(p.key.off) != 0 {
		t.Errorf("key plan %+v during a release under way, want none", p.key)
	}
	// Once nothing is gated and nobody waits for a key, the bound key's label comes off.
	p = decideHold(g, []*corev1.Pod{boundKey}, map[string]string{boundKey.Name: "n4"}, barrierView{key: key, node: func(string) (bool, bool) { return true, false }})
	if d := cmp.Diff([]string{"g-04"}, namesOrNil(p.key.off)); d != "" || len(p.up)+len(p.down) != 0 {
		t.Errorf("key off (-want +got):\n%s; barrier up %v down %v", d, p.up, p.down)
	}
}
