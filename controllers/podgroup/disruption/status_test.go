package disruption

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

func member(name, node string, phase corev1.PodPhase) *builders.PodBuilder {
	return builders.Pod(name, "ml").Member("g").Node(node).Phase(phase)
}

func podList(ps ...*builders.PodBuilder) []corev1.Pod {
	out := make([]corev1.Pod, 0, len(ps))
	for _, p := range ps {
		out = append(out, *p.Obj())
	}
	return out
}

func gang(phase berthv1alpha1.PodGroupPhase, nodes ...string) *berthv1alpha1.PodGroup {
	pg := builders.PodGroup("g", "ml").MinMember(2).Obj()
	pg.Generation = 3
	pg.Status.Phase = phase
	pg.Status.Nodes = nodes
	return pg
}

func TestBackingNodes(t *testing.T) {
	members := podList(
		member("a", "n2", corev1.PodRunning),
		member("b", "n1", corev1.PodRunning),
		member("c", "n3", corev1.PodSucceeded),
		member("d", "", corev1.PodPending),
		member("e", "n1", corev1.PodPending),
	)
	tests := []struct {
		name string
		pg   *berthv1alpha1.PodGroup
		want []string
	}{
		{"running: nodes of bound, unfinished members", gang(berthv1alpha1.PodGroupRunning, "n9"), []string{"n1", "n2"}},
		{"admitted: also where admission placed it", gang(berthv1alpha1.PodGroupAdmitted, "n9", "n1"), []string{"n1", "n2", "n9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, backingNodes(tt.pg, members)); diff != "" {
				t.Errorf("backingNodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFindDisruptions(t *testing.T) {
	now := metav1.Now()
	node := func(name string) *corev1.Node { return builders.Node(name).Obj() }
	tainted := node("n1")
	tainted.Spec.Taints = []corev1.Taint{karpv1.DisruptedNoScheduleTaint}
	deleting := node("n1")
	deleting.DeletionTimestamp = &now
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "nc-1", DeletionTimestamp: &now}}
	liveClaim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "nc-1"}}
	target := member("a", "n1", corev1.PodRunning).Obj()
	target.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"}}
	restarted := target.DeepCopy()
	restarted.Status.Conditions[0].Reason = berthv1alpha1.DisruptionReasonGangRestart
	succeededTarget := target.DeepCopy()
	succeededTarget.Status.Phase = corev1.PodSucceeded
	tests := []struct {
		name    string
		members []corev1.Pod
		nodes   []nodeState
		want    []disruption
	}{
		{"healthy", nil, []nodeState{{Name: "n1", Node: node("n1"), Claim: liveClaim}}, nil},
		{"gone", nil, []nodeState{{Name: "n1"}}, []disruption{{"n1", CauseNodeGone, "node deleted while members were bound to it", ""}}},
		{"node deleting wins over the taint", nil, []nodeState{{Name: "n1", Node: func() *corev1.Node { n := deleting.DeepCopy(); n.Spec.Taints = tainted.Spec.Taints; return n }()}},
			[]disruption{{"n1", CauseNodeDeleting, "node is being deleted", ""}}},
		{"NodeClaim deleting", nil, []nodeState{{Name: "n1", Node: node("n1"), Claim: claim}},
			[]disruption{{"n1", CauseNodeClaimDeleting, "NodeClaim nc-1 is being deleted", ""}}},
		{"tainted", nil, []nodeState{{Name: "n1", Node: tainted}},
			[]disruption{{"n1", CauseDisruptedTaint, "Karpenter tainted it karpenter.sh/disrupted", ""}}},
		{"member is a disruption target", []corev1.Pod{*target}, []nodeState{{Name: "n1", Node: node("n1")}},
			[]disruption{{"n1", CauseDisruptionTarget, "member a is a disruption target (EvictionByEvictionAPI)", ""}}},
		{"berth's own restart is no node disruption", []corev1.Pod{*restarted}, []nodeState{{Name: "n1", Node: node("n1")}}, nil},
		{"succeeded members do not count", []corev1.Pod{*succeededTarget}, []nodeState{{Name: "n1", Node: node("n1")}}, nil},
		{"the node's NodePool, else its NodeClaim's", nil, []nodeState{
			{Name: "n1", Node: builders.Node("n1").Label(karpv1.NodePoolLabelKey, "gpu-h100").Obj(), Claim: claim},
			{Name: "n2", Claim: &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "nc-2", DeletionTimestamp: &now, Labels: map[string]string{karpv1.NodePoolLabelKey: "gpu-l4"}}}}},
			[]disruption{{"n1", CauseNodeClaimDeleting, "NodeClaim nc-1 is being deleted", "gpu-h100"}, {"n2", CauseNodeGone, "node deleted while members were bound to it", "gpu-l4"}}},
		{"sorted by node", nil, []nodeState{{Name: "n2"}, {Name: "n1", Node: tainted}},
			[]disruption{{"n1", CauseDisruptedTaint, "Karpenter tainted it karpenter.sh/disrupted", ""}, {"n2", CauseNodeGone, "node deleted while members were bound to it", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, findDisruptions(tt.members, tt.nodes)); diff != "" {
				t.Errorf("findDisruptions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDisruptedCondition(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	gone := disruption{"n2", CauseNodeGone, "node deleted while members were bound to it", ""}
	taint := disruption{"n1", CauseDisruptedTaint, "Karpenter tainted it karpenter.sh/disrupted", ""}
	withCond := func(msg string) *berthv1alpha1.PodGroup {
		pg := gang(berthv1alpha1.PodGroupRunning)
		pg.Status.Conditions = []metav1.Condition{{Type: berthv1alpha1.ConditionDisrupted, Status: metav1.ConditionTrue,
			Reason: berthv1alpha1.ReasonNodeDisrupted, Message: msg, LastTransitionTime: t0, ObservedGeneration: 3}}
		return pg
	}
	tests := []struct {
		name      string
		pg        *berthv1alpha1.PodGroup
		found     []disruption
		wantCond  metav1.Condition
		wantFresh []disruption
	}{
		{"nothing found, no condition", gang(berthv1alpha1.PodGroupRunning), nil, metav1.Condition{}, nil},
		{"first disruption", gang(berthv1alpha1.PodGroupRunning), []disruption{taint},
			metav1.Condition{Type: berthv1alpha1.ConditionDisrupted, Status: metav1.ConditionTrue, Reason: berthv1alpha1.ReasonNodeDisrupted,
				Message: "nodes backing the gang were disrupted: n1 (Karpenter tainted it karpenter.sh/disrupted)", LastTransitionTime: t1, ObservedGeneration: 3},
			[]disruption{taint}},
		{"already reported: no change", withCond("nodes backing the gang were disrupted: n1 (Karpenter tainted it karpenter.sh/disrupted)"),
			[]disruption{{"n1", CauseNodeGone, "later the node went away", ""}},
			withCond("nodes backing the gang were disrupted: n1 (Karpenter tainted it karpenter.sh/disrupted)").Status.Conditions[0], nil},
		{"a second node is added, keeping the first and the transition time",
			withCond("nodes backing the gang were disrupted: n1 (Karpenter tainted it karpenter.sh/disrupted)"), []disruption{taint, gone},
			metav1.Condition{Type: berthv1alpha1.ConditionDisrupted, Status: metav1.ConditionTrue, Reason: berthv1alpha1.ReasonNodeDisrupted,
				Message:            "nodes backing the gang were disrupted: n1 (Karpenter tainted it karpenter.sh/disrupted); n2 (node deleted while members were bound to it)",
				LastTransitionTime: t0, ObservedGeneration: 3},
			[]disruption{gone}},
		{"a foreign message names no nodes", withCond("set by hand"), []disruption{gone},
			metav1.Condition{Type: berthv1alpha1.ConditionDisrupted, Status: metav1.ConditionTrue, Reason: berthv1alpha1.ReasonNodeDisrupted,
				Message: "nodes backing the gang were disrupted: n2 (node deleted while members were bound to it)", LastTransitionTime: t0, ObservedGeneration: 3},
			[]disruption{gone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.pg.DeepCopy()
			cond, fresh := disruptedCondition(tt.pg, tt.found, t1)
			if diff := cmp.Diff(tt.wantCond, cond); diff != "" {
				t.Errorf("condition (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantFresh, fresh); diff != "" {
				t.Errorf("fresh (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tt.pg); diff != "" {
				t.Errorf("disruptedCondition changed its input:\n%s", diff)
			}
		})
	}
}

func TestReportedNodesRoundTrip(t *testing.T) {
	var found []disruption
	for _, n := range []string{"ip-10-0-0-1.ec2.internal", "b", "a"} {
		found = append(found, disruption{n, CauseDisruptionTarget, "member x; y is a target", ""})
	}
	cond, fresh := disruptedCondition(gang(berthv1alpha1.PodGroupRunning), found, metav1.Now())
	if len(fresh) != 3 {
		t.Fatalf("fresh = %v", fresh)
	}
	got := reportedNodes(&cond)
	if len(got) != 3 || got["a"] == "" || got["b"] == "" || got["ip-10-0-0-1.ec2.internal"] == "" {
		t.Errorf("reportedNodes(%q) = %v", cond.Message, got)
	}
}
