package status

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// isGated reports whether a pod still carries berth's scheduling gate.
func isGated(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == berthv1alpha1.SchedulingGate {
			return true
		}
	}
	return false
}

// countMembers counts member pods by state. Pods being deleted are not members any more.
func countMembers(pods []corev1.Pod) berthv1alpha1.MemberCounts {
	var c berthv1alpha1.MemberCounts
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		c.Total++
		switch {
		case isGated(p):
			c.Gated++
		case p.Status.Phase == corev1.PodSucceeded:
			c.Succeeded++
		case p.Status.Phase == corev1.PodFailed:
			c.Failed++
		case p.Status.Phase == corev1.PodRunning:
			c.Running++
		case p.Spec.NodeName != "":
			c.Scheduled++
		}
	}
	return c
}

// nextPhase derives the phase from the member counts. Succeeded and Failed are final; the
// Provisioning and Admitted phases are set by admission and kept until members run.
func nextPhase(current berthv1alpha1.PodGroupPhase, minMember int32, c berthv1alpha1.MemberCounts) berthv1alpha1.PodGroupPhase {
	switch current {
	case berthv1alpha1.PodGroupSucceeded, berthv1alpha1.PodGroupFailed:
		return current
	}
	switch {
	case c.Succeeded >= minMember:
		return berthv1alpha1.PodGroupSucceeded
	case c.Failed > 0 && c.Total-c.Failed < minMember:
		return berthv1alpha1.PodGroupFailed
	case c.Running+c.Succeeded >= minMember && c.Running > 0:
		return berthv1alpha1.PodGroupRunning
	case current == "":
		return berthv1alpha1.PodGroupPending
	}
	return current
}

// readyCondition is the Ready condition for a gang in phase with counts c.
func readyCondition(phase berthv1alpha1.PodGroupPhase, minMember int32, c berthv1alpha1.MemberCounts, generation int64) metav1.Condition {
	cond := metav1.Condition{Type: berthv1alpha1.ConditionReady, ObservedGeneration: generation}
	switch {
	case phase == berthv1alpha1.PodGroupSucceeded:
		cond.Status, cond.Reason = metav1.ConditionFalse, berthv1alpha1.ReasonGangSucceeded
		cond.Message = fmt.Sprintf("%d of %d members succeeded", c.Succeeded, minMember)
	case phase == berthv1alpha1.PodGroupFailed:
		cond.Status, cond.Reason = metav1.ConditionFalse, berthv1alpha1.ReasonGangFailed
		cond.Message = fmt.Sprintf("%d members failed; %d of the %d needed can still run", c.Failed, c.Total-c.Failed, minMember)
	case c.Running >= minMember:
		cond.Status, cond.Reason = metav1.ConditionTrue, berthv1alpha1.ReasonMembersRunning
		cond.Message = fmt.Sprintf("%d of %d members running", c.Running, minMember)
	case c.Total < minMember:
		cond.Status, cond.Reason = metav1.ConditionFalse, berthv1alpha1.ReasonWaitingForMembers
		cond.Message = fmt.Sprintf("%d of %d members exist", c.Total, minMember)
	default:
		cond.Status, cond.Reason = metav1.ConditionFalse, berthv1alpha1.ReasonTooFewMembersRunning
		cond.Message = fmt.Sprintf("%d of %d members running", c.Running, minMember)
	}
	return cond
}

// computeStatus is the status the PodGroup should have given its member pods. It changes
// nothing in pg; conditions keep their lastTransitionTime when their status does not change.
func computeStatus(pg *berthv1alpha1.PodGroup, pods []corev1.Pod, now metav1.Time) berthv1alpha1.PodGroupStatus {
	st := *pg.Status.DeepCopy()
	st.ObservedGeneration = pg.Generation
	st.Members = countMembers(pods)
	st.Phase = nextPhase(pg.Status.Phase, pg.Spec.MinMember, st.Members)
	cond := readyCondition(st.Phase, pg.Spec.MinMember, st.Members, pg.Generation)
	cond.LastTransitionTime = now
	meta.SetStatusCondition(&st.Conditions, cond)
	return st
}
