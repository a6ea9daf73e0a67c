package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/scheduling"
)

// commit records the placement as the gang's promise (a new generation's assignments) and
// releases the members.
func (r *Reconciler) commit(ctx context.Context, cy *cycle, gv gangView, members []*corev1.Pod, res scheduling.Result) error {
	g := gv.group
	now := metav1.NewTime(r.clock.Now())
	uidOf := map[string]string{}
	for _, m := range members {
		uidOf[m.Name] = string(m.UID)
	}
	assignments := make([]berthv1alpha1.MemberAssignment, len(res.Assignments))
	nodeOf := map[string]string{}
	for i, a := range res.Assignments {
		assignments[i] = berthv1alpha1.MemberAssignment{Pod: a.Pod, UID: typesUID(uidOf[a.Pod]), Node: a.Node}
		nodeOf[a.Pod] = a.Node
	}
	nodes := res.Nodes()
	var claims []string
	if g.Status.Provisioning.Active() {
		claims = r.nodeClaimsOf(ctx, cy, nodes)
	}
	msg := fmt.Sprintf("%d members placed on %d node(s)%s", len(assignments), len(nodes), domainNote(g, res))
	if err := r.fence(ctx); err != nil {
		return fmt.Errorf("not recording admission: %w", err)
	}
	if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
		st.Assignments, st.AdmittedAt, st.Nodes = assignments, &now, nodes
		st.WaitingSince, st.ScheduleRetryAt, st.ScheduleTimeouts = nil, nil, 0
		finishProvisioning(st, g, now, claims)
		r.setCondition(st, g, berthv1alpha1.ConditionScheduled, metav1.ConditionTrue, berthv1alpha1.ReasonAdmitted, msg)
	}); err != nil {
		// Nothing was released; the next cycle decides again on fresh state.
		return fmt.Errorf("recording admission: %w", err)
	}
	placements.WithLabelValues(ResultAdmitted).Inc()
	r.assume(g, assignments)
	if err := r.release(ctx, g, members, gv.keyHolders(), nodeOf, gv.seats); err != nil {
		return err
	}
	observeReleased(members, r.clock.Now())
	r.recorder.Normal(g, events.ReasonGangAdmitted, fmt.Sprintf("released %d members together onto %v", len(members), nodes))
	log.FromContext(ctx).Info("admitted gang", "podgroup", client.ObjectKeyFromObject(g), "members", len(members), "nodes", nodes, "restarts", g.Status.Restarts)
	return nil
}

// domainNote names the topology domain a gang was placed in, for the Scheduled message.
func domainNote(g *berthv1alpha1.PodGroup, res scheduling.Result) string {
	if g.Spec.Topology == nil || res.Domain == "" {
		return ""
	}
	return fmt.Sprintf(" in %s=%s", g.Spec.Topology.RequiredKey, res.Domain)
}

// tendAdmitted looks after a gang with an admitted generation:
//
//  1. A generation with nothing live left is over; fresh members start the next one, admitted
//     whole (a workload's restart, the next wave of a Job).
//  2. Members released but not bound are tended: a release that was interrupted is finished,
//     the seats give way, the release barrier follows who still waits, and a member
//     kube-scheduler cannot bind where it was pinned is recovered.
//  3. Lost members are replaced (onMemberLoss Replace) or the gang is restarted (RestartGang).
//  4. Extra members of an elastic gang are admitted as they fit; members of a Job's next wave
//     wait for the current one to finish.
func (r *Reconciler) tendAdmitted(ctx context.Context, cy *cycle, gv gangView, gen generation) (time.Duration, error) {
	g := gv.group
	if gen.over() {
		if len(gen.fresh)+len(gen.held) == 0 {
			if len(gen.lost) > 0 {
				// Restarted or lost whole: say what the gang waits for (a Job's backoff can
				// hold its new pods for minutes; the Admitted condition would be stale).
				if err := r.setScheduled(ctx, cy, g, metav1.ConditionFalse, berthv1alpha1.ReasonWaitingForMembers, awaitingRecreation(g, gen)); err != nil {
					return 0, err
				}
			}
			return 0, r.deleteSeats(ctx, gv.seats) // finished or idle: nothing to admit
		}
		return r.newGeneration(ctx, cy, gv, gen)
	}
	nodeOf := map[string]string{}
	for _, a := range gen.assigned {
		nodeOf[a.Pod] = a.Node
	}
	var resume []*corev1.Pod
	for _, m := range gen.live {
		if gateIndex(m) >= 0 && !heldByOthers(m) {
			resume = append(resume, m)
		}
	}
	r.observeBound(g, gen.live, nodeOf)
	errs := []error{r.tendGPUHealth(ctx, cy.snap, g, gen.assigned)}
	if err := r.finishRelease(ctx, cy, gv, resume, nodeOf); err != nil {
		return 0, errors.Join(append(errs, err)...)
	}
	wait, err := r.recoverStranded(ctx, cy.snap, gv, gen)
	errs = append(errs, err)
	// RestartGang restarts a gang whose members have a controller to recreate them; members
	// without one are replaced as with Replace (the API's promise: skipping the replacements
	// left them gated for good).
	if len(gen.lost) > 0 && g.Spec.OnMemberLoss == berthv1alpha1.MemberLossRestartGang && slices.ContainsFunc(gen.live, controlled) {
		return wait, errors.Join(append(errs, r.restartGang(ctx, gv, gen))...)
	}
	repl, prev, rest := gen.replacements(g.Spec.MinMember)
	next, err := r.admitIndividually(ctx, cy, gv, gen, joiners{pods: repl, prev: prev, withSeats: true})
	errs = append(errs, err)
	wait = minPositive(wait, next)
	if gen.succeeded == 0 {
		_, err := r.admitIndividually(ctx, cy, gv, gen, joiners{pods: rest})
		errs = append(errs, err)
	}
	return wait, errors.Join(errs...)
}

// awaitingRecreation says what a gang whose generation ended with lost members and no new
// members waits for.
func awaitingRecreation(g *berthv1alpha1.PodGroup, gen generation) string {
	lost := make([]string, 0, len(gen.lost))
	for _, l := range gen.lost {
		lost = append(lost, l.assignment.Pod)
	}
	sort.Strings(lost)
	if n := len(lost); n > 8 {
		lost = append(lost[:8], fmt.Sprintf("and %d more", n-8))
	}
	return fmt.Sprintf("generation %d ended with %d member(s) lost or restarted (%s); waiting for their workload to recreate them, admitted whole as generation %d. "+
		"A Job recreates pods only after its pod failure backoff: 10 s doubling per failed pod, up to 10 min, counting pods berth deleted even when podFailurePolicy ignores them (set backoffLimitPerIndex for a backoff per rank)",
		g.Status.Restarts+1, len(gen.lost), strings.Join(lost, ", "), g.Status.Restarts+2)
}

// finishRelease releases assigned members that are still gated, or else lets the gang's seats
// go once no capacity request runs for it, and keeps the release barrier right. The steps are
// ordered: seats must be gone before the barrier lets members bind into their capacity.
func (r *Reconciler) finishRelease(ctx context.Context, cy *cycle, gv gangView, resume []*corev1.Pod, nodeOf map[string]string) error {
	if len(resume) > 0 {
		if err := r.resume(ctx, cy.snap, gv, resume, nodeOf); err != nil {
			return err
		}
	} else if !gv.group.Status.Provisioning.Active() {
		if err := r.deleteSeats(ctx, gv.seats); err != nil {
			return err
		}
	}
	return r.tendBarrier(ctx, cy, gv.group, gv.members, nodeOf)
}

// newGeneration ends a generation that has nothing live left and starts the next: the
// assignments go (the wait clock starts again), the restart is counted and reported, and the
// fresh members are admitted whole — in this very cycle when they are enough.
func (r *Reconciler) newGeneration(ctx context.Context, cy *cycle, gv gangView, gen generation) (time.Duration, error) {
	g := gv.group
	msg := fmt.Sprintf("generation %d ended (%d succeeded, %d lost); %d new member(s) are admitted whole as generation %d",
		g.Status.Restarts+1, gen.succeeded, len(gen.lost), len(gen.fresh)+len(gen.held), g.Status.Restarts+2)
	if err := r.tendBarrier(ctx, cy, g, nil, nil); err != nil {
		return 0, err
	}
	if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
		st.Assignments, st.AdmittedAt, st.Nodes, st.NodeClaims = nil, nil, nil, nil
		st.WaitingSince, st.ScheduleRetryAt, st.ScheduleTimeouts = nil, nil, 0
		st.Restarts++
		r.setCondition(st, g, berthv1alpha1.ConditionScheduled, metav1.ConditionFalse, berthv1alpha1.ReasonWaitingForMembers, msg)
	}); err != nil {
		return 0, err
	}
	r.forget(g)
	generations.Inc()
	r.recorder.Normal(g, events.ReasonGangRestarted, msg)
	log.FromContext(ctx).Info("new generation", "podgroup", client.ObjectKeyFromObject(g), "restarts", g.Status.Restarts)
	return r.admitWhole(ctx, cy, gv, classify(gv.members, nil))
}

// restartGang deletes every live member that has a controller, so the workload recreates the
// whole gang and the new generation is admitted whole (onMemberLoss RestartGang). Members
// without a controller cannot be recreated by anyone: they are left to the Replace path.
func (r *Reconciler) restartGang(ctx context.Context, gv gangView, gen generation) error {
	var doomed []*corev1.Pod
	for _, m := range gen.live {
		if controlled(m) {
			doomed = append(doomed, m)
		}
	}
	if len(doomed) == 0 {
		return nil
	}
	lost := make([]string, 0, len(gen.lost))
	for _, l := range gen.lost {
		lost = append(lost, l.assignment.Pod)
	}
	r.recorder.Warning(gv.group, events.ReasonGangRestarting, fmt.Sprintf(
		"member(s) %v lost and onMemberLoss is RestartGang: deleting the %d live members so their workload recreates the gang, admitted whole", lost, len(doomed)))
	why := fmt.Sprintf("berth restarts gang %s whole (onMemberLoss RestartGang): member(s) %v lost", gv.group.Name, lost)
	return parallel(doomed, func(_ int, p *corev1.Pod) error {
		if err := r.disrupt(ctx, p, berthv1alpha1.DisruptionReasonGangRestart, why, client.Preconditions{UID: &p.UID}); err != nil {
			return fmt.Errorf("restarting the gang: %w", err)
		}
		return nil
	})
}

// observeBound records the all-bound admission latency once per generation.
func (r *Reconciler) observeBound(g *berthv1alpha1.PodGroup, live []*corev1.Pod, nodeOf map[string]string) {
	key := fmt.Sprintf("%s/%d", g.UID, g.Status.Restarts)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.boundSeen[key] || len(live) == 0 {
		return
	}
	for _, m := range live {
		if _, ok := nodeOf[m.Name]; ok && m.Spec.NodeName == "" {
			return
		}
	}
	r.boundSeen[key] = true
	admissionLatency.WithLabelValues("bound").Observe(r.clock.Since(lastCreated(live)).Seconds())
}

// resume releases members of an admitted gang that are still gated (a restart or a failed
// patch interrupted the release). A member whose node is gone can never bind where it is
// pinned: a member with a controller is deleted so it is recreated (and placed as a
// replacement); one without is reported.
func (r *Reconciler) resume(ctx context.Context, snap *scheduling.Snapshot, gv gangView, pods []*corev1.Pod, nodeOf map[string]string) error {
	g := gv.group
	var ok []*corev1.Pod
	var errs []error
	for _, p := range pods {
		if _, exists := snap.Node(nodeOf[p.Name]); exists {
			ok = append(ok, p)
			continue
		}
		_, err := r.replaceStranded(ctx, g, p, fmt.Sprintf("node %s, which it was pinned to, disappeared before it was bound", nodeOf[p.Name]), r.nodeGone(ctx, nodeOf[p.Name]))
		errs = append(errs, err)
	}
	if len(ok) > 0 {
		log.FromContext(ctx).Info("resuming release", "podgroup", client.ObjectKeyFromObject(g), "members", len(ok))
		errs = append(errs, r.release(ctx, g, ok, gv.keyHolders(), nodeOf, gv.seats))
	}
	return errors.Join(errs...)
}

// nodeGone is a replaceStranded check for a member pinned to a node the cache no longer has: the
// API server must not have it either.
func (r *Reconciler) nodeGone(ctx context.Context, node string) func(*corev1.Pod) bool {
	return func(*corev1.Pod) bool {
		var n corev1.Node
		return apierrors.IsNotFound(r.apiReader.Get(ctx, client.ObjectKey{Name: node}, &n))
	}
}
