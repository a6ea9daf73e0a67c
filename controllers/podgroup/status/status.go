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

// WorkloadState is what the status controller knows of the workload that owns a gang's members.
type WorkloadState string

// The workload states.
const (
	// WorkloadNone: the members have no controller (or it cannot be read); the gang is judged
	// by its members alone.
	WorkloadNone WorkloadState = ""
	// WorkloadActive: the workload exists and has not finished: it may still create members
	// (replacements, the next wave, a restart), so the gang is never finished.
	WorkloadActive WorkloadState = "Active"
	// WorkloadSucceeded: the workload reports it completed.
	WorkloadSucceeded WorkloadState = "Succeeded"
	// WorkloadFailed: the workload reports it failed.
	WorkloadFailed WorkloadState = "Failed"
)

// PhaseInputs is everything a PodGroup's phase is derived from.
type PhaseInputs struct {
	MinMember int32
	Members   berthv1alpha1.MemberCounts
	Workload  WorkloadState
	// Admitted: the current generation has assignments (released or being released).
	Admitted bool
	// Provisioning: a capacity request for the gang is in flight.
	Provisioning bool
	// TimedOutForGood: the gang timed out with onScheduleTimeout Fail.
	TimedOutForGood bool
}

// Phase derives a PodGroup's phase. It is a function of the present only: a gang whose members
// are all gone and whose workload still runs is waiting again (Pending), and a Failed or
// Succeeded gang that gets a new generation of members moves on again. Only a schedule timeout
// with onScheduleTimeout Fail is final.
func Phase(in PhaseInputs) berthv1alpha1.PodGroupPhase {
	c := in.Members
	live := c.Total - c.Succeeded - c.Failed
	switch {
	case in.TimedOutForGood:
		return berthv1alpha1.PodGroupFailed
	case in.Workload == WorkloadSucceeded:
		return berthv1alpha1.PodGroupSucceeded
	case in.Workload == WorkloadFailed:
		return berthv1alpha1.PodGroupFailed
	case live == 0 && in.Workload != WorkloadActive && c.Succeeded >= in.MinMember:
		return berthv1alpha1.PodGroupSucceeded
	case live == 0 && in.Workload != WorkloadActive && c.Succeeded+c.Failed > 0:
		return berthv1alpha1.PodGroupFailed
	case c.Running >= in.MinMember || (c.Running > 0 && c.Running+c.Succeeded >= in.MinMember):
		return berthv1alpha1.PodGroupRunning
	case in.Admitted:
		return berthv1alpha1.PodGroupAdmitted
	case in.Provisioning:
		return berthv1alpha1.PodGroupProvisioning
	}
	return berthv1alpha1.PodGroupPending
}

// TimedOutForGood reports whether a gang timed out with onScheduleTimeout Fail: its Scheduled
// condition says ScheduleTimeout and it was never admitted since.
func TimedOutForGood(pg *berthv1alpha1.PodGroup) bool {
	if pg.Spec.OnScheduleTimeout != berthv1alpha1.ScheduleTimeoutFail || len(pg.Status.Assignments) > 0 {
		return false
	}
	c := meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionScheduled)
	return c != nil && c.Reason == berthv1alpha1.ReasonScheduleTimeout
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

// computeStatus is the status the PodGroup should have given its member pods and its
// workload. It changes nothing in pg; conditions keep their lastTransitionTime when their status
// does not change.
func computeStatus(pg *berthv1alpha1.PodGroup, pods []corev1.Pod, wl *berthv1alpha1.WorkloadReference, state WorkloadState, now metav1.Time) berthv1alpha1.PodGroupStatus {
	st := *pg.Status.DeepCopy()
	st.ObservedGeneration = pg.Generation
	st.Members = countMembers(pods)
	st.Workload = wl
	st.Phase = Phase(PhaseInputs{
		MinMember: pg.Spec.MinMember, Members: st.Members, Workload: state,
		Admitted: len(pg.Status.Assignments) > 0, Provisioning: pg.Status.Provisioning.Active(),
		TimedOutForGood: TimedOutForGood(pg),
	})
	cond := readyCondition(st.Phase, pg.Spec.MinMember, st.Members, pg.Generation)
	cond.LastTransitionTime = now
	meta.SetStatusCondition(&st.Conditions, cond)
	return st
}
