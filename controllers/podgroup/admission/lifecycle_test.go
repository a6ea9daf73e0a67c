package admission

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/status"
	bevents "github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// member is a gang member pod with a UID, in a phase, optionally gated and indexed.
func member(name string, phase corev1.PodPhase, gated bool, index string) *corev1.Pod {
	b := builders.Pod(name, "ml").Member("g").Phase(phase)
	if gated {
		b = b.Gated()
	}
	p := b.Obj()
	p.UID = types.UID("uid-" + name)
	if index != "" {
		p.Annotations = map[string]string{jobCompletionIndex: index}
	}
	return p
}

func assign(p *corev1.Pod, node string) berthv1alpha1.MemberAssignment {
	return berthv1alpha1.MemberAssignment{Pod: p.Name, UID: p.UID, Node: node}
}

func names(ps []*corev1.Pod) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestClassify(t *testing.T) {
	r0 := member("r0", corev1.PodRunning, false, "0")
	r1 := member("r1", corev1.PodRunning, false, "1")
	r2 := member("r2", corev1.PodFailed, false, "2")
	r3 := member("r3", corev1.PodSucceeded, false, "3")
	repl2 := member("r2-retry", corev1.PodPending, true, "2")
	next4 := member("r4", corev1.PodPending, true, "4")
	queued := member("q", corev1.PodPending, true, "")
	queued.Spec.SchedulingGates = append(queued.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "kueue.x-k8s.io/admission"})
	recreated := member("r1", corev1.PodPending, true, "1") // same name, new UID
	recreated.UID = "uid-r1-new"

	gen := classify([]*corev1.Pod{r0, r2, r3, repl2, next4, queued, recreated},
		[]berthv1alpha1.MemberAssignment{assign(r0, "n0"), assign(r1, "n1"), assign(r2, "n2"), assign(r3, "n3")})
	if got := names(gen.live); !cmp.Equal(got, []string{"r0"}) {
		t.Errorf("live = %v, want [r0]", got)
	}
	if gen.succeeded != 1 || len(gen.lost) != 2 {
		t.Errorf("succeeded %d, lost %d; want 1 and 2 (r1 recreated under its name is a new member, r2 failed)", gen.succeeded, len(gen.lost))
	}
	if got := names(gen.fresh); !cmp.Equal(got, []string{"r2-retry", "r4", "r1"}) {
		t.Errorf("fresh = %v", got)
	}
	if got := names(gen.held); !cmp.Equal(got, []string{"q"}) {
		t.Errorf("held = %v, want [q] (Kueue's gate still on it)", got)
	}
	if gen.over() {
		t.Error("a generation with a live member is not over")
	}
}

func TestReplacements(t *testing.T) {
	run := func(name, idx string) *corev1.Pod { return member(name, corev1.PodRunning, false, idx) }
	fresh := func(name, idx string) *corev1.Pod { return member(name, corev1.PodPending, true, idx) }
	for _, tc := range []struct {
		name     string
		members  []*corev1.Pod
		assigned []berthv1alpha1.MemberAssignment
		min      int32
		wantRepl []string
		wantPrev map[string]string
		wantRest []string
	}{
		{
			name:     "an Indexed Job's replacement takes its index's slot and node",
			members:  []*corev1.Pod{run("a-0", "0"), run("a-1", "1"), member("a-2", corev1.PodFailed, false, "2"), run("a-3", "3"), fresh("a-2-x", "2")},
			assigned: []berthv1alpha1.MemberAssignment{{Pod: "a-0", UID: "uid-a-0", Node: "n0"}, {Pod: "a-1", UID: "uid-a-1", Node: "n1"}, {Pod: "a-2", UID: "uid-a-2", Node: "n2"}, {Pod: "a-3", UID: "uid-a-3", Node: "n3"}},
			min:      4, wantRepl: []string{"a-2-x"}, wantPrev: map[string]string{"a-2-x": "a-2@n2"}, wantRest: nil,
		},
		{
			name:     "the next wave waits: a success frees no slot",
			members:  []*corev1.Pod{run("w-0", "0"), member("w-1", corev1.PodSucceeded, false, "1"), fresh("w-4", "4")},
			assigned: []berthv1alpha1.MemberAssignment{{Pod: "w-0", UID: "uid-w-0", Node: "n0"}, {Pod: "w-1", UID: "uid-w-1", Node: "n1"}},
			min:      2, wantRepl: nil, wantPrev: map[string]string{}, wantRest: []string{"w-4"},
		},
		{
			name:     "a deleted plain member's replacement takes its slot",
			members:  []*corev1.Pod{run("p-0", ""), fresh("p-new", "")},
			assigned: []berthv1alpha1.MemberAssignment{{Pod: "p-0", UID: "uid-p-0", Node: "n0"}, {Pod: "p-1", UID: "uid-p-1", Node: "n1"}},
			min:      2, wantRepl: []string{"p-new"}, wantPrev: map[string]string{"p-new": "p-1@n1"}, wantRest: nil,
		},
		{
			name:     "extras of an elastic gang are not replacements",
			members:  []*corev1.Pod{run("e-0", ""), run("e-1", ""), fresh("e-2", "")},
			assigned: []berthv1alpha1.MemberAssignment{{Pod: "e-0", UID: "uid-e-0", Node: "n0"}, {Pod: "e-1", UID: "uid-e-1", Node: "n1"}},
			min:      2, wantRepl: nil, wantPrev: map[string]string{}, wantRest: []string{"e-2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gen := classify(tc.members, tc.assigned)
			repl, prev, rest := gen.replacements(tc.min)
			if d := cmp.Diff(tc.wantRepl, namesOrNil(repl)); d != "" {
				t.Errorf("replacements (-want +got):\n%s", d)
			}
			gotPrev := map[string]string{}
			for name, a := range prev {
				gotPrev[name] = a.Pod + "@" + a.Node
			}
			if d := cmp.Diff(tc.wantPrev, gotPrev); d != "" {
				t.Errorf("predecessors (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantRest, namesOrNil(rest)); d != "" {
				t.Errorf("rest (-want +got):\n%s", d)
			}
		})
	}
}

func namesOrNil(ps []*corev1.Pod) []string {
	if len(ps) == 0 {
		return nil
	}
	return names(ps)
}

// clockHarness is a Reconciler on a fake client holding one PodGroup.
func clockHarness(t *testing.T, pg *berthv1alpha1.PodGroup) (*Reconciler, *clocktesting.FakeClock, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := berthv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pg).WithStatusSubresource(pg).Build()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	rec := bevents.NewRecorder(events.NewFakeRecorder(100))
	return New(c, c, clk, rec, Options{}), clk, c
}

func read(t *testing.T, c client.Client, pg *berthv1alpha1.PodGroup) *berthv1alpha1.PodGroup {
	t.Helper()
	var got berthv1alpha1.PodGroup
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pg), &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

func TestDecideWait(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	noFit := waitView{now: now, timeout: time.Minute, reason: berthv1alpha1.ReasonUnschedulable, why: "no node has 8 GPUs free"}
	with := func(f func(v *waitView)) waitView { v := noFit; f(&v); return v }
	retryMsg := "not admitted within scheduleTimeoutSeconds (1m0s, timeout 1): the gang gives back its capacity request and the room it held, and waits again from 2026-01-01T12:01:00Z; it is still admitted if it fits before"
	for _, tc := range []struct {
		name string
		v    waitView
		want waitPlan
	}{{
		name: "a gang that fits is admitted without starting its clock",
		v:    with(func(v *waitView) { v.fits = true }),
		want: waitPlan{admit: true},
	}, {
		name: "a gang that fits at its deadline is admitted, not timed out",
		v:    with(func(v *waitView) { v.fits, v.waitingSince = true, now.Add(-time.Hour) }),
		want: waitPlan{admit: true},
	}, {
		name: "the first look starts the clock and says why it waits",
		v:    noFit,
		want: waitPlan{startWait: true, wait: time.Minute, result: ResultNoFit, reserve: true, reason: berthv1alpha1.ReasonUnschedulable, message: "no node has 8 GPUs free"},
	}, {
		name: "with provisioning, capacity is requested",
		v:    with(func(v *waitView) { v.provisioning = true }),
		want: waitPlan{startWait: true, wait: time.Minute, result: ResultNoFit, reserve: true, provision: true, reason: berthv1alpha1.ReasonWaitingForCapacity,
			message: "the gang does not fit existing nodes; capacity for the members without a place is requested from Karpenter (see condition CapacityProvisioned)"},
	}, {
		name: "an unsupported gang asks for no capacity",
		v: with(func(v *waitView) {
			v.provisioning, v.reason, v.why = true, berthv1alpha1.ReasonUnsupported, "uses a host port"
		}),
		want: waitPlan{startWait: true, wait: time.Minute, result: ResultUnsupported, reserve: true, reason: berthv1alpha1.ReasonUnsupported, message: "uses a host port"},
	}, {
		name: "the time left is the next deadline",
		v:    with(func(v *waitView) { v.waitingSince = now.Add(-50 * time.Second) }),
		want: waitPlan{wait: 10 * time.Second, result: ResultNoFit, reserve: true, reason: berthv1alpha1.ReasonUnschedulable, message: "no node has 8 GPUs free"},
	}, {
		name: "at least a second, never a busy loop",
		v:    with(func(v *waitView) { v.waitingSince = now.Add(-time.Minute + time.Millisecond) }),
		want: waitPlan{wait: time.Second, result: ResultNoFit, reserve: true, reason: berthv1alpha1.ReasonUnschedulable, message: "no node has 8 GPUs free"},
	}, {
		name: "at the deadline a Retry gang times out and backs off",
		v:    with(func(v *waitView) { v.waitingSince = now.Add(-time.Minute) }),
		want: waitPlan{result: ResultTimeout, timedOut: &timedOut{timeouts: 1, retryAt: now.Add(time.Minute), message: retryMsg}},
	}, {
		name: "the backoff doubles with each timeout of the wait",
		v:    with(func(v *waitView) { v.waitingSince, v.timeouts = now.Add(-time.Hour), 2 }),
		want: waitPlan{result: ResultTimeout, timedOut: &timedOut{timeouts: 3, retryAt: now.Add(4 * time.Minute), message: "not admitted within scheduleTimeoutSeconds (1m0s, timeout 3): the gang gives back its capacity request and the room it held, and waits again from 2026-01-01T12:04:00Z; it is still admitted if it fits before"}},
	}, {
		name: "Fail gives up for good",
		v:    with(func(v *waitView) { v.waitingSince, v.failOnTimeout = now.Add(-2*time.Minute), true }),
		want: waitPlan{result: ResultTimeout, timedOut: &timedOut{fail: true, message: "not admitted within scheduleTimeoutSeconds (1m0s); onScheduleTimeout is Fail, so the gang gives up for good"}},
	}, {
		name: "backing off, it holds nothing and asks for nothing",
		v: with(func(v *waitView) {
			v.provisioning, v.waitingSince, v.retryAt = true, now.Add(-time.Hour), now.Add(30*time.Second)
		}),
		want: waitPlan{hold: true, wait: 30 * time.Second, result: ResultNoFit},
	}, {
		name: "after the backoff a whole new wait starts",
		v:    with(func(v *waitView) { v.waitingSince, v.retryAt, v.timeouts = now.Add(-time.Hour), now, 1 }),
		want: waitPlan{startWait: true, wait: time.Minute, result: ResultNoFit, reserve: true, reason: berthv1alpha1.ReasonUnschedulable, message: "no node has 8 GPUs free"},
	}, {
		name: "0 waits forever",
		v:    with(func(v *waitView) { v.timeout, v.waitingSince = 0, now.Add(-100*time.Hour) }),
		want: waitPlan{result: ResultNoFit, reserve: true, reason: berthv1alpha1.ReasonUnschedulable, message: "no node has 8 GPUs free"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, decideWait(tc.v), cmp.AllowUnexported(waitPlan{}, timedOut{})); d != "" {
				t.Errorf("plan (-want +got):\n%s", d)
			}
		})
	}
}

func TestWaitClockWrites(t *testing.T) {
	ctx := context.Background()
	noFit := scheduling.Result{Reason: "no room"}
	t.Run("the clock starts, runs out and the gang retries later", func(t *testing.T) {
		pg := builders.PodGroup("g", "ml").MinMember(2).ScheduleTimeout(60).OnScheduleTimeout(berthv1alpha1.ScheduleTimeoutRetry).Obj()
		r, clk, c := clockHarness(t, pg)
		cy := &cycle{now: clk.Now(), snap: scheduling.NewSnapshot(nil, nil, nil)}
		look := func() (time.Duration, error) {
			gv := gangView{group: read(t, c, pg)}
			return r.actWait(ctx, cy, gv, scheduling.Gang{}, noFit, decideWait(r.waitView(gv.group, noFit)))
		}
		if wait, err := look(); err != nil || wait != time.Minute {
			t.Fatalf("first look: %v, %v; want the whole minute", wait, err)
		}
		if got := read(t, c, pg).Status.WaitingSince; got == nil || !got.Time.Equal(clk.Now()) {
			t.Fatalf("waitingSince = %v, want now", got)
		}
		clk.Step(time.Minute)
		if wait, err := look(); err != nil || wait != 0 {
			t.Fatalf("at the timeout: %v, %v; want the gang timed out", wait, err)
		}
		got := read(t, c, pg)
		cond := meta.FindStatusCondition(got.Status.Conditions, berthv1alpha1.ConditionScheduled)
		if got.Status.ScheduleTimeouts != 1 || got.Status.ScheduleRetryAt == nil || !got.Status.ScheduleRetryAt.Time.Equal(clk.Now().Add(time.Minute)) ||
			cond == nil || cond.Reason != berthv1alpha1.ReasonScheduleTimeout || status.TimedOutForGood(got) {
			t.Fatalf("after a Retry timeout: timeouts %d, retryAt %v, condition %+v", got.Status.ScheduleTimeouts, got.Status.ScheduleRetryAt, cond)
		}
		clk.Step(time.Minute)
		if wait, err := look(); err != nil || wait != time.Minute {
			t.Fatalf("after the backoff: %v, %v; want a new whole wait", wait, err)
		}
		if got := read(t, c, pg); got.Status.ScheduleRetryAt != nil || !got.Status.WaitingSince.Time.Equal(clk.Now()) || got.Status.ScheduleTimeouts != 1 {
			t.Errorf("a new wait: retryAt %v, waitingSince %v, timeouts %d", got.Status.ScheduleRetryAt, got.Status.WaitingSince, got.Status.ScheduleTimeouts)
		}
	})
	t.Run("Fail gives up for good", func(t *testing.T) {
		pg := builders.PodGroup("g", "ml").MinMember(2).ScheduleTimeout(60).OnScheduleTimeout(berthv1alpha1.ScheduleTimeoutFail).Obj()
		r, clk, c := clockHarness(t, pg)
		pg.Status.WaitingSince = &metav1.Time{Time: clk.Now().Add(-2 * time.Minute)}
		if err := c.Status().Update(ctx, pg); err != nil {
			t.Fatal(err)
		}
		g := read(t, c, pg)
		if err := r.timeOut(ctx, gangView{group: g}, *decideWait(r.waitView(g, noFit)).timedOut); err != nil {
			t.Fatal(err)
		}
		if got := read(t, c, pg); !status.TimedOutForGood(got) || got.Status.ScheduleRetryAt != nil {
			t.Errorf("not timed out for good: %+v", got.Status)
		}
	})
}

func TestDecideMembersWait(t *testing.T) {
	gated := func(name string, gates ...string) *corev1.Pod {
		p := member(name, corev1.PodPending, false, "")
		for _, g := range gates {
			p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
		}
		return p
	}
	waiting := berthv1alpha1.PodGroupStatus{WaitingSince: &metav1.Time{}}
	for _, tc := range []struct {
		name    string
		st      berthv1alpha1.PodGroupStatus
		gen     generation
		members int
		want    membersWait
	}{{
		name: "too few members: the clock stops",
		st:   waiting, gen: generation{fresh: []*corev1.Pod{gated("a", berthv1alpha1.SchedulingGate)}}, members: 1,
		want: membersWait{stopClock: true, reason: berthv1alpha1.ReasonWaitingForMembers, message: "1 of 2 members exist"},
	}, {
		name: "a queue holds one: said, no clock to stop",
		gen:  generation{fresh: []*corev1.Pod{gated("a", berthv1alpha1.SchedulingGate)}, held: []*corev1.Pod{gated("b", berthv1alpha1.SchedulingGate, "kueue.x-k8s.io/admission")}}, members: 2,
		want: membersWait{reason: berthv1alpha1.ReasonHeldByOtherScheduler, message: "1 of 2 members are held by another scheduler's gate (kueue.x-k8s.io/admission); the gang waits for them, and its schedule timeout has not started"},
	}, {
		name:    "members without berth's gate are not claimed",
		members: 2,
		want:    membersWait{reason: berthv1alpha1.ReasonMembersNotGated, message: "none of the 2 members carries the " + berthv1alpha1.SchedulingGate + " scheduling gate (created before berth's webhook was installed?); kube-scheduler places them one by one"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, decideMembersWait(tc.st, tc.gen, tc.members, 2), cmp.AllowUnexported(membersWait{})); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestScheduleBackoff(t *testing.T) {
	var got []time.Duration
	for n := int32(1); n <= 7; n++ {
		got = append(got, scheduleBackoff(n))
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("backoff (-want +got):\n%s", d)
	}
}

func TestUnpinnedCopy(t *testing.T) {
	orig := builders.Pod("p", "ml").Member("g").GPU(1).NodeAffinityIn("zone", "a").Obj()
	pinnedPod := withPin(orig, "n1", berthv1alpha1.BarrierLabelPrefix+"uid")
	pinnedPod.Spec.NodeName = ""
	pinnedPod.UID, pinnedPod.ResourceVersion = "uid-p", "42"
	pinnedPod.Labels[berthv1alpha1.ReleaseLabel] = "g"
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "run-config", UID: "uid-cm"}
	pinnedPod.OwnerReferences = []metav1.OwnerReference{owner}
	pinnedPod.Finalizers = []string{"example.com/hold"}
	got := unpinnedCopy(pinnedPod)
	if d := cmp.Diff([]metav1.OwnerReference{owner}, got.OwnerReferences); d != "" {
		t.Errorf("owner references of the copy (-want +got): %s", d)
	}
	if len(got.Finalizers) != 0 {
		t.Errorf("the copy carries finalizers %v no controller of them saw it created with", got.Finalizers)
	}
	if d := cmp.Diff(orig.Spec.Affinity, got.Spec.Affinity); d != "" {
		t.Errorf("affinity after removing the pin (-want +got):\n%s", d)
	}
	if _, key := got.Labels[berthv1alpha1.ReleaseLabel]; key {
		t.Error("the copy keeps the key label: a new member would open its gang before it is released")
	}
	if _, ok := got.Annotations[berthv1alpha1.PinnedNodeAnnotation]; ok || got.UID != "" || got.ResourceVersion != "" || len(got.Spec.SchedulingGates) != 0 {
		t.Errorf("copy keeps what the server or berth set: %+v", got.ObjectMeta)
	}
	plain := withPin(builders.Pod("q", "ml").Obj(), "n1", berthv1alpha1.BarrierLabelPrefix+"uid")
	if got := unpinnedCopy(plain); got.Spec.Affinity != nil {
		t.Errorf("a pod that had no affinity gets %+v back", got.Spec.Affinity)
	}
}

// TestStrandedClockStartsWhenSeen: a released member's PodScheduled condition has been False
// since it was created (SchedulingGated), so its lastTransitionTime says nothing about how long
// kube-scheduler has found it unschedulable; berth's clock starts when it first sees it so.
func TestStrandedClockStartsWhenSeen(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	r := New(nil, nil, clocktesting.NewFakePassiveClock(t0), nil, Options{})
	p := withPin(builders.Pod("m-0", "ml").Member("g").Obj(), "node-a", "")
	p.UID = "m-0"
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}
	if !unschedulable(p) {
		t.Fatal("a pinned, released, unbound member reported Unschedulable is not unschedulable")
	}
	if got := r.unschedulableFor(p.UID, t0); !got.Equal(t0) {
		t.Errorf("first seen %s, want now (%s), not the condition's transition an hour ago", got, t0)
	}
	if got := r.unschedulableFor(p.UID, t0.Add(10*time.Second)); !got.Equal(t0) {
		t.Errorf("seen again: since %s, want %s", got, t0)
	}
	r.unschedulableFor(p.UID, time.Time{}) // bound, or schedulable again
	if got := r.unschedulableFor(p.UID, t0.Add(20*time.Second)); !got.Equal(t0.Add(20 * time.Second)) {
		t.Errorf("after it was schedulable: since %s, want a fresh start", got)
	}
	r.forgetUnschedulable(func(types.UID) bool { return false })
	if len(r.unschedulableSeen) != 0 {
		t.Error("a deleted pod is remembered")
	}
	gatedPod := p.DeepCopy()
	gatedPod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: berthv1alpha1.SchedulingGate}}
	if unschedulable(gatedPod) {
		t.Error("a gated member counts as stranded")
	}
}

func TestPlanJoins(t *testing.T) {
	nodes := []*corev1.Node{builders.Node("n1").GPU(8).Obj(), builders.Node("n2").GPU(8).Obj()}
	// n1 has 4 GPUs taken by a running member, n2 is empty.
	running := builders.Pod("g-0", "ml").Member("g").GPU(4).Node("n1").Obj()
	repl := func(name string, gpus int) *corev1.Pod {
		return builders.Pod(name, "ml").Member("g").Gated().GPU(gpus).Obj()
	}
	prev := map[string]berthv1alpha1.MemberAssignment{"g-1b": {Pod: "g-1", UID: "old", Node: "n1"}}
	for _, tc := range []struct {
		name        string
		pods        []*corev1.Pod
		avoid       map[string]bool
		wantJoins   []string // pod@node
		wantWaiting []string
	}{
		{"a replacement goes on its predecessor's node", []*corev1.Pod{repl("g-1b", 4)}, nil, []string{"g-1b@n1"}, nil},
		{"not where its predecessor was stranded", []*corev1.Pod{repl("g-1b", 4)}, map[string]bool{"n1": true}, []string{"g-1b@n2"}, nil},
		{"each placement counts for the next", []*corev1.Pod{repl("g-2", 8), repl("g-3", 8)}, nil, []string{"g-2@n2"}, []string{"g-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cy := &cycle{snap: scheduling.NewSnapshot(nodes, []scheduling.PodOnNode{{Pod: running, Node: "n1"}}, nil)}
			gv := gangView{group: builders.PodGroup("g", "ml").MinMember(2).Obj()}
			p, err := planJoins(cy, gv, "", tc.avoid, joiners{pods: tc.pods, prev: prev, withSeats: true})
			if err != nil {
				t.Fatal(err)
			}
			var joins, waiting []string
			for _, j := range p.joins {
				joins = append(joins, j.pod.Name+"@"+j.node)
				if j.pod.Name == "g-1b" && j.prev.UID != "old" {
					t.Errorf("the replacement's predecessor = %+v, want g-1's assignment", j.prev)
				}
			}
			for _, w := range p.waiting {
				waiting = append(waiting, w.pod.Name)
				if w.reason == "" {
					t.Errorf("%s waits without a reason", w.pod.Name)
				}
			}
			if d := cmp.Diff(tc.wantJoins, joins); d != "" {
				t.Errorf("joins (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantWaiting, waiting); d != "" {
				t.Errorf("waiting (-want +got):\n%s", d)
			}
		})
	}
}

// TestAttemptOfAGangShortOfMembersEndsAtItsTimeout: a gang's members go while its capacity
// request runs (a Job suspended). The request runs on until its timeout — a member recreated
// a moment later finds it — and is then withdrawn, its seats with it, without a backoff: it ran
// on for as long as the gang waited, the seats holding the nodes launched for them.
func TestAttemptOfAGangShortOfMembersEndsAtItsTimeout(t *testing.T) {
	for _, tc := range []struct {
		name       string
		noSeat     bool   // its seat is gone (preempted, or a withdrawal whose status write failed)
		seatOn     string // the seat's node ("": unbound)
		nodes      []*corev1.Node
		wantReason string
		wantRetry  bool // a failure: backed off, counted in a row
	}{
		// Its capacity came: withdrawn, not failed — no backoff, the next request starts once the
		// members are back.
		{"its seat on a Ready node", false, "n1", []*corev1.Node{builders.Node("n1").GPU(8).Obj()}, berthv1alpha1.ReasonProvisioningWithdrawn, false},
		// Its capacity did not come either (a NodePool limit): a failure, whatever the members did.
		{"its seat got no node", false, "", nil, berthv1alpha1.ReasonProvisioningFailed, true},
		// No seat left to judge: no sign the capacity failed.
		{"its seat is gone", true, "", nil, berthv1alpha1.ReasonProvisioningWithdrawn, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pg := builders.PodGroup("g", "ml").MinMember(2).ProvisioningTimeout(60).Obj()
			pg.UID = "uid-g"
			r, clk, c := clockHarness(t, pg)
			pg.Status.Provisioning = &berthv1alpha1.ProvisioningStatus{Attempt: 3, Seats: 1, StartedAt: &metav1.Time{Time: clk.Now()}}
			if err := c.Status().Update(ctx, pg); err != nil {
				t.Fatal(err)
			}
			seat := builders.Pod("g-seat", "berth-system").Label(berthv1alpha1.SeatOfLabel, "uid-g").Obj()
			seat.Spec.NodeName = tc.seatOn
			if err := c.Create(ctx, seat); err != nil {
				t.Fatal(err)
			}
			seats := []*corev1.Pod{seat}
			if tc.noSeat {
				seats = nil
			}
			look := func() (time.Duration, error) {
				cy := &cycle{now: clk.Now(), snap: scheduling.NewSnapshot(tc.nodes, nil, nil)}
				return r.attemptShortOfMembers(ctx, cy, gangView{group: read(t, c, pg), seats: seats})
			}
			clk.Step(20 * time.Second)
			if wait, err := look(); err != nil || wait != 40*time.Second {
				t.Fatalf("within the timeout: %v, %v; want to look again in the 40 s left", wait, err)
			}
			if !read(t, c, pg).Status.Provisioning.Active() {
				t.Fatal("the request ended within its timeout")
			}
			clk.Step(40 * time.Second)
			wait, err := look()
			if err != nil {
				t.Fatal(err)
			}
			got := read(t, c, pg)
			p := got.Status.Provisioning
			cond := meta.FindStatusCondition(got.Status.Conditions, berthv1alpha1.ConditionCapacityProvisioned)
			if p.Active() || cond == nil || cond.Reason != tc.wantReason {
				t.Fatalf("at the timeout: provisioning %+v, condition %+v; want the request ended with reason %s", p, cond, tc.wantReason)
			}
			step, _ := decideAttempt(clk.Now(), p, time.Minute)
			if tc.wantRetry {
				// The first failure in a row, though the third attempt: the shortest backoff.
				if p.RetryAt == nil || p.Failures != 1 || wait != provisioningBackoffBase || step != attemptBackOff ||
					!strings.Contains(p.LastFailure, "1 of 1 seats got no node") || !strings.Contains(p.LastFailure, "fallen short of members") {
					t.Errorf("a failed request: %+v, requeued after %v, next step %v; want 1 failure, backed off %v, the seat's trouble and the members said", p, wait, step, provisioningBackoffBase)
				}
			} else if p.RetryAt != nil || p.Failures != 0 || step != attemptStart {
				t.Errorf("a withdrawn request: %+v, next step %v; want no backoff, no failure, a start at once", p, step)
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(seat), &corev1.Pod{}); !tc.noSeat && !apierrors.IsNotFound(err) {
				t.Errorf("the ended request's seat: %v, want it deleted", err)
			}
		})
	}
}
