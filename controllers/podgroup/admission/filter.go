package admission

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Which updates start a cycle. A cycle decides for the whole cluster, so an update that changes
// nothing a decision reads must not start one: on a busy cluster most pod updates are kubelet
// status reports (container states, readiness, IPs) and most node updates are heartbeats.

// podChanged reports whether a pod update changed what admission reads of a pod: its metadata
// (labels, annotations, owners, deletion), spec, phase, nominated node and PodScheduled
// condition (why kube-scheduler cannot bind it).
func podChanged(o, n *corev1.Pod) bool {
	if o.Status.Phase != n.Status.Phase || o.Status.NominatedNodeName != n.Status.NominatedNodeName ||
		!o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
		!equality.Semantic.DeepEqual(o.Labels, n.Labels) || !equality.Semantic.DeepEqual(o.Annotations, n.Annotations) ||
		!equality.Semantic.DeepEqual(o.OwnerReferences, n.OwnerReferences) {
		return true
	}
	if !scheduledConditionEqual(podCondition(o, corev1.PodScheduled), podCondition(n, corev1.PodScheduled)) {
		return true
	}
	return !equality.Semantic.DeepEqual(o.Spec, n.Spec)
}

func scheduledConditionEqual(a, b *corev1.PodCondition) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}

// nodeChanged reports whether a node update changed more than heartbeat times: a kubelet (or
// kwok) heartbeat rewrites every condition's lastHeartbeatTime every few seconds on every node,
// and a cycle for each would run the whole cluster's admission for nothing. It compares shallow
// copies: deep-copying both versions of every node on every heartbeat was the controller's
// largest source of garbage after the cycle itself.
func nodeChanged(o, n *corev1.Node) bool {
	if !conditionsEqual(o.Status.Conditions, n.Status.Conditions) {
		return true
	}
	a, b := *o, *n
	a.ResourceVersion, b.ResourceVersion = "", ""
	a.ManagedFields, b.ManagedFields = nil, nil
	a.Status.Conditions, b.Status.Conditions = nil, nil
	return !equality.Semantic.DeepEqual(&a, &b)
}

// conditionsEqual compares node conditions without their heartbeat times.
func conditionsEqual(a, b []corev1.NodeCondition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message ||
			!x.LastTransitionTime.Equal(&y.LastTransitionTime) {
			return false
		}
	}
	return true
}

// groupChanged reports whether a PodGroup update changed more than what only the status
// controller reads and writes (phase, member counts, the workload it found): every member's
// start or finish rewrites those.
func groupChanged(o, n *berthv1alpha1.PodGroup) bool {
	return !equality.Semantic.DeepEqual(admissionView(o), admissionView(n))
}

// admissionView is a shallow copy of g without the fields groupChanged ignores.
func admissionView(g *berthv1alpha1.PodGroup) berthv1alpha1.PodGroup {
	v := *g
	v.ResourceVersion = ""
	v.ManagedFields = nil
	v.Status.Phase = ""
	v.Status.Members = berthv1alpha1.MemberCounts{}
	v.Status.Workload = nil
	v.Status.ObservedGeneration = 0
	return v
}
