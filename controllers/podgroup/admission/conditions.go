package admission

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/scheduling"
)

// updateStatus writes the PodGroup's status after mutate changed a copy of it, when it changed
// semantically, and leaves the stored result in g. Admission owns assignments, provisioning,
// the wait clock and the Scheduled, CapacityProvisioned and GPUHealthy conditions; the status
// controller derives the phase from them. A lost optimistic-lock race comes back as a conflict
// (the cycle decides again on fresh state).
func (r *Reconciler) updateStatus(ctx context.Context, g *berthv1alpha1.PodGroup, mutate func(st *berthv1alpha1.PodGroupStatus)) error {
	updated := g.DeepCopy()
	mutate(&updated.Status)
	if equality.Semantic.DeepEqual(updated.Status, g.Status) {
		return nil
	}
	if err := r.client.Status().Update(ctx, updated); err != nil {
		return fmt.Errorf("updating the status of PodGroup %s/%s: %w", g.Namespace, g.Name, err)
	}
	*g = *updated
	return nil
}

// setCondition sets a condition in a status being mutated, keeping its transition time when its
// status does not change.
func (r *Reconciler) setCondition(st *berthv1alpha1.PodGroupStatus, g *berthv1alpha1.PodGroup, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: truncate(msg, 32000),
		ObservedGeneration: g.Generation, LastTransitionTime: metav1.NewTime(r.clock.Now()),
	})
}

// setScheduled writes the Scheduled condition when it changed, with a Warning Event when a gang
// that cannot go ahead gets a new reason (waiting for members is no warning). A new message
// under the same status and reason (counts that changed) is written at most once per
// messageRefresh.
func (r *Reconciler) setScheduled(ctx context.Context, cy *cycle, g *berthv1alpha1.PodGroup, status metav1.ConditionStatus, reason, msg string) error {
	cur := meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionScheduled)
	sameReason := cur != nil && cur.Status == status && cur.Reason == reason && cur.ObservedGeneration == g.Generation
	if sameReason && (cur.Message == msg || !r.refreshDue(cy, g, berthv1alpha1.ConditionScheduled)) {
		return nil
	}
	if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
		r.setCondition(st, g, berthv1alpha1.ConditionScheduled, status, reason, msg)
	}); err != nil {
		return err
	}
	r.refreshed(g, berthv1alpha1.ConditionScheduled)
	switch {
	case sameReason:
	case reason == berthv1alpha1.ReasonWaitingForMembers, reason == berthv1alpha1.ReasonHeldByOtherScheduler:
	default:
		r.recorder.Warning(g, events.ReasonGangUnschedulable, msg)
	}
	return nil
}

// messageRefresh is how often a condition whose status and reason stay the same is rewritten
// for a new message. Readers act on status and reason; the counts in a message are detail, and
// rewriting them on every change of the cluster cost a write, a cycle and an event to every
// watcher per waiting gang per change.
const messageRefresh = time.Minute

// refreshKey names one condition of one gang.
type refreshKey struct {
	uid types.UID
	typ string
}

// refreshDue reports whether a message-only change of condition typ of g may be written in
// cycle cy; when not, it asks the cycle to come back when it may (cy.refreshAt).
func (r *Reconciler) refreshDue(cy *cycle, g *berthv1alpha1.PodGroup, typ string) bool {
	r.mu.Lock()
	last, ok := r.lastWritten[refreshKey{g.UID, typ}]
	r.mu.Unlock()
	if !ok {
		return true // not written by this process yet
	}
	due := last.Add(messageRefresh)
	if !cy.now.Before(due) {
		return true
	}
	if cy.refreshAt.IsZero() || due.Before(cy.refreshAt) {
		cy.refreshAt = due
	}
	return false
}

// refreshed records that condition typ of g was just written.
func (r *Reconciler) refreshed(g *berthv1alpha1.PodGroup, typ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastWritten[refreshKey{g.UID, typ}] = r.clock.Now()
}

// refreshWait returns how long until the soonest message refresh cycle cy put off (0: none),
// forgetting gangs that are gone.
func (r *Reconciler) refreshWait(cy *cycle) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	uids := make(map[types.UID]bool, len(cy.groups))
	for _, g := range cy.groups {
		uids[g.UID] = true
	}
	for k := range r.lastWritten {
		if !uids[k.uid] {
			delete(r.lastWritten, k)
		}
	}
	if cy.refreshAt.IsZero() {
		return 0
	}
	return max(time.Second, cy.refreshAt.Sub(r.clock.Now()))
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
	if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
		r.setCondition(st, g, want.Type, want.Status, want.Reason, want.Message)
	}); err != nil {
		return err
	}
	if len(sick) > 0 {
		r.recorder.Warning(g, events.ReasonGangNodeUnhealthy, want.Message)
	}
	return nil
}

// timeoutOf is the gang's schedule timeout; 0 waits forever.
func timeoutOf(g *berthv1alpha1.PodGroup) time.Duration {
	s := berthv1alpha1.DefaultScheduleTimeoutSeconds
	if g.Spec.ScheduleTimeoutSeconds != nil {
		s = *g.Spec.ScheduleTimeoutSeconds
	}
	return time.Duration(s) * time.Second
}
