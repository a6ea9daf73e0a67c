package admission

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// strandedMember is a member of gang g released onto node (pinned, ungated, unbound) that
// kube-scheduler reports unschedulable; barrier names the node barrier it waits behind, if any.
func strandedMember(name, node, barrier string, term bool) *corev1.Pod {
	b := builders.Pod(name, "ml").Member("g").GPU(1)
	if term {
		b = b.WithReleaseTerm("g")
	}
	p := withPin(b.Obj(), node, barrier)
	p.UID = types.UID("uid-" + p.Name)
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/8 nodes are available: 8 node(s) didn't match pod affinity rules"}}
	return p
}

// TestStrandedOnlyOnceTheGangIsOpen: while a release waits for its key member or its node
// barrier, kube-scheduler reports every released member unschedulable; that is the hold, not a
// stranding (the CI run that found it had replaced a member whose key was held up by an API
// server restart). The member is stranded only once what holds it has let go.
func TestStrandedOnlyOnceTheGangIsOpen(t *testing.T) {
	g := builders.PodGroup("g", "ml").MinMember(2).Obj()
	g.UID = "uid-g"
	barrier := barrierKey(g)
	node := builders.Node("n1").GPU(8).Obj()
	lifted := builders.Node("n1").GPU(8).Obj()
	lifted.Labels[barrier] = "true"
	held := strandedMember("m-0", "n1", "", true)
	key := strandedMember("m-1", "n1", "", true)
	key.Labels[berthv1alpha1.ReleaseLabel] = "g"
	boundKey := key.DeepCopy()
	boundKey.Spec.NodeName = "n1"
	behind := strandedMember("b-0", "n1", barrier, false)
	plain := strandedMember("p-0", "n1", "", false)
	snap := func(n *corev1.Node) *scheduling.Snapshot { return scheduling.NewSnapshot([]*corev1.Node{n}, nil, nil) }

	for _, tc := range []struct {
		name    string
		snap    *scheduling.Snapshot
		members []*corev1.Pod
		m       *corev1.Pod
		want    bool
	}{
		{"release term, key not bound yet", snap(node), []*corev1.Pod{held, key}, held, false},
		{"release term, no key at all", snap(node), []*corev1.Pod{held}, held, false},
		{"release term, key bound", snap(node), []*corev1.Pod{held, boundKey}, held, true},
		{"the released key itself", snap(node), []*corev1.Pod{held, key}, key, true},
		{"node barrier not lifted", snap(node), []*corev1.Pod{behind}, behind, false},
		{"node barrier lifted", snap(lifted), []*corev1.Pod{behind}, behind, true},
		{"node barrier, node gone", scheduling.NewSnapshot(nil, nil, nil), []*corev1.Pod{behind}, behind, true},
		{"held by nothing", snap(node), []*corev1.Pod{plain}, plain, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gv := gangView{group: g, members: tc.members}
			if got := gangOpen(tc.snap, gv, tc.m); got != tc.want {
				t.Errorf("gangOpen = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestReplaceStrandedRereadsTheMember: the cache said a member was unbound and stranded, but
// the API server has it bound by now (the cache was behind after an API server restart): it
// is not deleted. When the API server agrees it is stranded, it is recreated unpinned.
func TestReplaceStrandedRereadsTheMember(t *testing.T) {
	ctx := context.Background()
	g := builders.PodGroup("g", "ml").MinMember(2).Obj()
	stale := strandedMember("m-0", "n1", "", false)

	bound := stale.DeepCopy()
	bound.Spec.NodeName = "n1"
	bound.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	r, _, c := clockHarness(t, g)
	if err := c.Create(ctx, bound); err != nil {
		t.Fatal(err)
	}
	live := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(bound), live); err != nil {
		t.Fatal(err)
	}
	stale.UID, stale.ResourceVersion = live.UID, "1"
	if replaced, err := r.replaceStranded(ctx, g, stale, "test", unschedulable); err != nil || replaced {
		t.Fatalf("replaced %v, %v; want a bound member left alone", replaced, err)
	}
	after := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(bound), after); err != nil {
		t.Fatalf("the bound member is gone: %v", err)
	}
	if after.UID != live.UID || after.Spec.NodeName != "n1" {
		t.Errorf("the bound member was replaced: %+v", after.ObjectMeta)
	}

	// The API server agrees: recreated under its name, without the pin.
	r2, _, c2 := clockHarness(t, g)
	still := strandedMember("m-0", "n1", "", false) // the fake client keeps the UID given
	if err := c2.Create(ctx, still); err != nil {
		t.Fatal(err)
	}
	if err := c2.Get(ctx, client.ObjectKeyFromObject(still), still); err != nil {
		t.Fatal(err)
	}
	if replaced, err := r2.replaceStranded(ctx, g, still, "test", unschedulable); err != nil || !replaced {
		t.Fatalf("replaced %v, %v; want the stranded member replaced", replaced, err)
	}
	again := &corev1.Pod{}
	if err := c2.Get(ctx, client.ObjectKeyFromObject(still), again); err != nil {
		t.Fatalf("the stranded member was not recreated: %v", err)
	}
	if again.UID == still.UID {
		t.Error("the stranded member was not replaced")
	}
	if _, ok := pinned(again); ok {
		t.Error("the recreated member keeps its pin")
	}

	// Gone in the meantime: nothing to do, no error.
	if replaced, err := r2.replaceStranded(ctx, g, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nope", Namespace: "ml"}}, "test", unschedulable); err != nil || replaced {
		t.Errorf("a member that is gone: replaced %v, %v", replaced, err)
	}
	var p corev1.Pod
	if err := c2.Get(ctx, client.ObjectKey{Namespace: "ml", Name: "nope"}, &p); !apierrors.IsNotFound(err) {
		t.Errorf("something was created for a member that is gone: %v", err)
	}
}

// TestReplacementAvoidsTheStrandedNode: kube-scheduler refused node n1 for a reason berth does
// not see (the CI run that found it: kube-scheduler still counted a pod deleted while its watch
// was reconnecting); a replacement placed on n1 again, its predecessor's node, would be
// stranded again every 30 s. For AvoidStrandedNodeFor the gang's joiners go elsewhere.
func TestReplacementAvoidsTheStrandedNode(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	r := New(nil, nil, clocktesting.NewFakePassiveClock(t0), nil, Options{})
	snap := scheduling.NewSnapshot([]*corev1.Node{builders.Node("n1").GPU(8).Obj(), builders.Node("n2").GPU(8).Obj()}, nil, nil)
	p := builders.Pod("m-0", "ml").Member("g").GPU(1).NodeAffinityIn("zone", "a", "b").Obj()
	for _, n := range []string{"n1", "n2"} {
		snapNode, _ := snap.Node(n)
		snapNode.Node.Labels["zone"] = "a"
	}
	if res := placeOne(snap, p, "n1"); !res.Fits() || res.Assignments[0].Node != "n1" {
		t.Fatalf("without a stranding the replacement goes to its predecessor's node: %+v", res)
	}
	r.markStranded("ml/g", "n1", t0)
	avoid := r.avoidedNodes("ml/g", t0.Add(time.Minute))
	if !avoid["n1"] || len(avoid) != 1 {
		t.Fatalf("avoided %v, want n1", avoid)
	}
	res := placeOne(snap, avoiding(p, avoid), "")
	if !res.Fits() || res.Assignments[0].Node != "n2" {
		t.Errorf("placed %+v, want n2: n1 is avoided and the pod's own zone term still holds", res)
	}
	if got := avoiding(p, avoid); len(got.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions) != 1 {
		t.Error("the pod's own node-affinity requirement was lost")
	}
	if p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields != nil {
		t.Error("avoiding modified the member itself")
	}
	if avoid := r.avoidedNodes("ml/g", t0.Add(AvoidStrandedNodeFor)); len(avoid) != 0 || len(r.strandedOn) != 0 {
		t.Errorf("after %s still avoided: %v", AvoidStrandedNodeFor, avoid)
	}
}

func TestDecideStranded(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	m := func(name string, for_ time.Duration) unschedulableMember {
		return unschedulableMember{pod: builders.Pod(name, "ml").Obj(), since: now.Add(-for_)}
	}
	for _, tc := range []struct {
		name     string
		waiting  []unschedulableMember
		want     []string
		wantNext time.Duration
	}{
		{"nobody waits", nil, nil, 0},
		{"not yet: look again when the first would be", []unschedulableMember{m("a", 10*time.Second), m("b", 25*time.Second)}, nil, 5 * time.Second},
		{"at the threshold it is stranded", []unschedulableMember{m("a", 30*time.Second), m("b", 20*time.Second)}, []string{"a"}, 10 * time.Second},
		{"all stranded: nothing to wait for", []unschedulableMember{m("a", time.Minute), m("b", time.Hour)}, []string{"a", "b"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, next := decideStranded(now, 30*time.Second, tc.waiting)
			var names []string
			for _, s := range got {
				names = append(names, s.pod.Name)
			}
			if d := cmp.Diff(tc.want, names); d != "" || next != tc.wantNext {
				t.Errorf("stranded (-want +got):\n%s; next %v, want %v", d, next, tc.wantNext)
			}
		})
	}
}
