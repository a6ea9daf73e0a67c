package admission

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/scheduling"
)

// setScheduled writes the Scheduled condition when it changed, with an Event for new reasons
// or messages.
func (r *Reconciler) setScheduled(ctx context.Context, g *berthv1alpha1.PodGroup, status metav1.ConditionStatus, reason, msg string) error {
	cur := meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionScheduled)
	if cur != nil && cur.Status == status && cur.Reason == reason && cur.Message == msg && cur.ObservedGeneration == g.Generation {
		return nil
	}
	updated := g.DeepCopy()
	if updated.Status.Phase == "" {
		updated.Status.Phase = berthv1alpha1.PodGroupPending
	}
	meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{
		Type: berthv1alpha1.ConditionScheduled, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: g.Generation, LastTransitionTime: metav1.NewTime(r.clock.Now()),
	})
	if err := r.client.Status().Update(ctx, updated); err != nil {
		if apierrors.IsConflict(err) {
			return nil // the next cycle writes it again
		}
		return fmt.Errorf("updating Scheduled condition: %w", err)
	}
	*g = *updated
	if reason != berthv1alpha1.ReasonWaitingForMembers {
		r.recorder.Warning(updated, events.ReasonGangUnschedulable, msg)
	}
	return nil
}

// fail moves a gang to Failed; nothing was promised to it (it was never admitted).
func (r *Reconciler) fail(ctx context.Context, g *berthv1alpha1.PodGroup, msg string) error {
	updated := g.DeepCopy()
	updated.Status.Phase = berthv1alpha1.PodGroupFailed
	meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{
		Type: berthv1alpha1.ConditionScheduled, Status: metav1.ConditionFalse, Reason: berthv1alpha1.ReasonScheduleTimeout,
		Message: msg, ObservedGeneration: g.Generation, LastTransitionTime: metav1.NewTime(r.clock.Now()),
	})
	if err := r.client.Status().Update(ctx, updated); err != nil {
		return fmt.Errorf("failing timed-out gang: %w", err)
	}
	placements.WithLabelValues(ResultTimeout).Inc()
	r.recorder.Warning(updated, events.ReasonGangTimedOut, msg)
	return nil
}

// tendGPUHealth keeps the GPUHealthy condition of an admitted gang: False, naming the nodes,
// while any node it was placed on reports unhealthy GPUs.
func (r *Reconciler) tendGPUHealth(ctx context.Context, snap *scheduling.Snapshot, g *berthv1alpha1.PodGroup, assigned []berthv1alpha1.MemberAssignment) error {
	seen := map[string]bool{}
	var sick []string
	for _, a := range assigned {
		n, ok := snap.Node(a.Node)
		if !ok || seen[a.Node] {
			continue
		}
		seen[a.Node] = true
		if strings.HasPrefix(n.Unavailable, gpuUnhealthyPrefix) {
			sick = append(sick, a.Node+" ("+n.Unavailable+")")
		}
	}
	sort.Strings(sick)
	want := metav1.Condition{Type: berthv1alpha1.ConditionGPUHealthy, Status: metav1.ConditionTrue, Reason: berthv1alpha1.ReasonNodesHealthy,
		Message: fmt.Sprintf("%d node(s) report healthy GPUs", len(seen)), ObservedGeneration: g.Generation}
	if len(sick) > 0 {
		want.Status, want.Reason = metav1.ConditionFalse, berthv1alpha1.ReasonGPUUnhealthy
		want.Message = "nodes with unhealthy GPUs: " + strings.Join(sick, ", ")
	}
	cur := meta.FindStatusCondition(g.Status.Conditions, want.Type)
	if cur == nil && len(sick) == 0 {
		return nil // nothing to say until something goes wrong
	}
	if cur != nil && cur.Status == want.Status && cur.Message == want.Message {
		return nil
	}
	var fresh berthv1alpha1.PodGroup
	if err := r.client.Get(ctx, client.ObjectKeyFromObject(g), &fresh); err != nil {
		return fmt.Errorf("reading PodGroup: %w", err)
	}
	want.LastTransitionTime = metav1.NewTime(r.clock.Now())
	meta.SetStatusCondition(&fresh.Status.Conditions, want)
	if err := r.client.Status().Update(ctx, &fresh); err != nil {
		if apierrors.IsConflict(err) {
			return nil // next cycle
		}
		return fmt.Errorf("updating GPUHealthy condition: %w", err)
	}
	if len(sick) > 0 {
		r.recorder.Warning(&fresh, events.ReasonGangNodeUnhealthy, want.Message)
	}
	return nil
}

// timedOut reports whether a waiting gang passed its scheduleTimeoutSeconds.
func (r *Reconciler) timedOut(g *berthv1alpha1.PodGroup) (time.Duration, bool) {
	t := timeoutOf(g)
	if t == 0 {
		return 0, false
	}
	return t, r.clock.Since(g.CreationTimestamp.Time) >= t
}

func (r *Reconciler) untilTimeout(g *berthv1alpha1.PodGroup) time.Duration {
	t := timeoutOf(g)
	if t == 0 {
		return 0
	}
	return max(time.Second, t-r.clock.Since(g.CreationTimestamp.Time))
}

func timeoutOf(g *berthv1alpha1.PodGroup) time.Duration {
	s := berthv1alpha1.DefaultScheduleTimeoutSeconds
	if g.Spec.ScheduleTimeoutSeconds != nil {
		s = *g.Spec.ScheduleTimeoutSeconds
	}
	return time.Duration(s) * time.Second
}
