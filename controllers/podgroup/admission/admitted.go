package admission

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/scheduling"
)

// commit records the placement as the gang's promise and releases the members.
func (r *Reconciler) commit(ctx context.Context, cy *cycle, gv gangView, gated []*corev1.Pod, res scheduling.Result) error {
	g := gv.group
	now := metav1.NewTime(r.clock.Now())
	assignments := make([]berthv1alpha1.MemberAssignment, len(res.Assignments))
	nodeOf := map[string]string{}
	for i, a := range res.Assignments {
		assignments[i] = berthv1alpha1.MemberAssignment{Pod: a.Pod, Node: a.Node}
		nodeOf[a.Pod] = a.Node
	}
	updated := g.DeepCopy()
	updated.Status.Assignments = assignments
	updated.Status.Phase = berthv1alpha1.PodGroupAdmitted
	updated.Status.AdmittedAt = &now
	updated.Status.Nodes = res.Nodes()
	if g.Status.Provisioning.Active() {
		finishProvisioning(&updated.Status, g, now, r.nodeClaimsOf(ctx, cy.snap, updated.Status.Nodes))
	}
	meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{
		Type: berthv1alpha1.ConditionScheduled, Status: metav1.ConditionTrue, Reason: berthv1alpha1.ReasonAdmitted,
		Message:            fmt.Sprintf("%d members placed on %d node(s)%s", len(assignments), len(updated.Status.Nodes), domainNote(g, res)),
		ObservedGeneration: g.Generation, LastTransitionTime: now,
	})
	if err := r.client.Status().Update(ctx, updated); err != nil {
		// Nothing was released; the next cycle decides again on fresh state.
		return fmt.Errorf("recording admission: %w", err)
	}
	placements.WithLabelValues(ResultAdmitted).Inc()
	r.assume(g, assignments)
	if err := r.release(ctx, updated, gated, nodeOf, gv.seats); err != nil {
		return err
	}
	observeReleased(gated, r.clock.Now())
	r.recorder.Normal(updated, events.ReasonGangAdmitted, fmt.Sprintf("released %d members together onto %v", len(gated), updated.Status.Nodes))
	log.FromContext(ctx).Info("admitted gang", "podgroup", client.ObjectKeyFromObject(g), "members", len(gated), "nodes", updated.Status.Nodes)
	return nil
}

// domainNote names the topology domain a gang was placed in, for the Scheduled message.
func domainNote(g *berthv1alpha1.PodGroup, res scheduling.Result) string {
	if g.Spec.Topology == nil || res.Domain == "" {
		return ""
	}
	return fmt.Sprintf(" in %s=%s", g.Spec.Topology.RequiredKey, res.Domain)
}

// continueAdmitted tends an admitted gang: it reports the health of its nodes, finishes a
// release that was started (seats give way before the barrier is lifted again), and places
// members that appeared after admission.
func (r *Reconciler) continueAdmitted(ctx context.Context, cy *cycle, gv gangView, assigned []berthv1alpha1.MemberAssignment) error {
	g := gv.group
	nodeOf := map[string]string{}
	for _, a := range assigned {
		nodeOf[a.Pod] = a.Node
	}
	var late, resume []*corev1.Pod
	for _, m := range gatedOnly(gv.members) {
		if _, ok := nodeOf[m.Name]; ok {
			resume = append(resume, m)
		} else {
			late = append(late, m)
		}
	}
	r.observeBound(g, gv.members, nodeOf)
	// Health reporting is independent of the release: its error does not stop it.
	healthErr := r.tendGPUHealth(ctx, cy.snap, g, assigned)
	if err := r.finishRelease(ctx, cy, gv, resume, nodeOf); err != nil {
		return errors.Join(healthErr, err)
	}
	if len(late) == 0 {
		return healthErr
	}
	return errors.Join(healthErr, r.admitLate(ctx, cy.snap, g, late, assigned))
}

// finishRelease releases assigned members that are still gated, or else lets the gang's seats
// go, and keeps the release barrier right. The steps are ordered: seats must be gone before
// the barrier lets members bind into their capacity.
func (r *Reconciler) finishRelease(ctx context.Context, cy *cycle, gv gangView, resume []*corev1.Pod, nodeOf map[string]string) error {
	if len(resume) > 0 {
		if err := r.resume(ctx, cy.snap, gv, resume, nodeOf); err != nil {
			return err
		}
	} else if err := r.giveWay(ctx, gv.seats); err != nil {
		return err
	}
	return r.tendBarrier(ctx, cy.snap, gv.group, gv.members, nodeOf)
}

// observeBound records the all-bound admission latency once per gang.
func (r *Reconciler) observeBound(g *berthv1alpha1.PodGroup, members []*corev1.Pod, nodeOf map[string]string) {
	uid := string(g.UID)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.boundSeen[uid] || len(members) == 0 {
		return
	}
	for _, m := range members {
		if _, ok := nodeOf[m.Name]; ok && m.Spec.NodeName == "" {
			return
		}
	}
	r.boundSeen[uid] = true
	admissionLatency.WithLabelValues("bound").Observe(r.clock.Since(lastCreated(members)).Seconds())
}

// resume releases members of an admitted gang that are still gated (a restart or a failed
// patch interrupted the release). A member whose node is gone can never bind where it is
// pinned: a member with a controller is deleted so it is recreated (and placed as a late
// member); one without is reported.
func (r *Reconciler) resume(ctx context.Context, snap *scheduling.Snapshot, gv gangView, pods []*corev1.Pod, nodeOf map[string]string) error {
	g := gv.group
	var ok []*corev1.Pod
	var errs []error
	for _, p := range pods {
		if _, exists := snap.Node(nodeOf[p.Name]); exists {
			ok = append(ok, p)
			continue
		}
		if metav1.GetControllerOf(p) != nil {
			r.recorder.Warning(g, events.ReasonMemberReplaced, fmt.Sprintf("node %s of member %s disappeared before it was bound; deleting it so its controller recreates it", nodeOf[p.Name], p.Name))
			if err := r.client.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting stranded member %s: %w", p.Name, err))
			}
			continue
		}
		r.recorder.Warning(g, events.ReasonMemberStranded, fmt.Sprintf("node %s of member %s disappeared before it was bound, and the pod has no controller to recreate it: delete and recreate it", nodeOf[p.Name], p.Name))
	}
	if len(ok) > 0 {
		log.FromContext(ctx).Info("resuming release", "podgroup", client.ObjectKeyFromObject(g), "members", len(ok))
		errs = append(errs, r.release(ctx, g, ok, nodeOf, gv.seats))
	}
	return errors.Join(errs...)
}
