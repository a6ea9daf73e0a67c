package admission

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/gate"
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

// admittedPlan is what a gang with an admitted generation needs in one cycle (decideAdmitted).
type admittedPlan struct {
	// over: the generation has nothing live left. With next, fresh members start the next one;
	// without, nothing is admitted, the seats go, and awaiting (when set) is the Scheduled=False
	// message saying what the gang waits for.
	over     bool
	next     bool
	awaiting string
	// nodeOf is each assigned member's node.
	nodeOf map[string]string
	// resume are assigned members still gated on nodes that exist: the release is finished.
	resume []*corev1.Pod
	// orphaned are assigned members still gated whose node is gone: they can never bind where
	// they are pinned, so they are replaced (or reported).
	orphaned []*corev1.Pod
	// dropSeats: no release to finish and no capacity request runs for the gang: its seats go.
	dropSeats bool
	// restart deletes these live members so their workload recreates the gang whole
	// (onMemberLoss RestartGang); nothing joins while it runs.
	restart *restartPlan
	// replace are replacements of lost members, placed one by one with capacity from Karpenter
	// for what does not fit; join are extra members (an elastic gang, a Job's next wave), placed
	// as they fit, only while no member has succeeded.
	replace, join joiners
}

// restartPlan deletes a gang's live members with a controller (onMemberLoss RestartGang).
type restartPlan struct {
	doomed []*corev1.Pod
	// lost names the members whose loss restarts the gang.
	lost []string
}

// decideAdmitted decides what a gang with an admitted generation needs (pure; nodeExists reads
// the cycle's snapshot):
//
//  1. A generation with nothing live left is over; fresh members start the next one, admitted
//     whole (a workload's restart, the next wave of a Job).
//  2. Members released but not bound are tended: a release that was interrupted is finished,
//     the seats give way, and a member pinned to a node that is gone is recovered. (The release
//     barrier, stranded members and GPU health are decided by their own functions.)
//  3. Lost members are replaced (onMemberLoss Replace) or the gang is restarted (RestartGang).
//     RestartGang restarts a gang whose members have a controller to recreate them; members
//     without one are replaced as with Replace (the API's promise: skipping the replacements
//     left them gated for good).
//  4. Extra members of an elastic gang are admitted as they fit; members of a Job's next wave
//     wait for the current one to finish.
func decideAdmitted(gv gangView, gen generation, nodeExists func(string) bool) admittedPlan {
	g := gv.group
	if gen.over() {
		p := admittedPlan{over: true, next: len(gen.fresh)+len(gen.held) > 0}
		if !p.next && len(gen.lost) > 0 {
			// Restarted or lost whole: say what the gang waits for (a Job's backoff can hold
			// its new pods for minutes; the Admitted condition would be stale).
			p.awaiting = awaitingRecreation(g, gen)
		}
		return p
	}
	p := admittedPlan{nodeOf: assignedNodes(gen.assigned, gen.live)}
	for _, m := range gen.live {
		if gateIndex(m) < 0 || heldByOthers(m) {
			continue
		}
		if nodeExists(p.nodeOf[m.Name]) {
			p.resume = append(p.resume, m)
		} else {
			p.orphaned = append(p.orphaned, m)
		}
	}
	p.dropSeats = len(p.resume)+len(p.orphaned) == 0 && !g.Status.Provisioning.Active()
	if len(gen.lost) > 0 && g.Spec.OnMemberLoss == berthv1alpha1.MemberLossRestartGang {
		if r := decideRestart(gen); r != nil {
			p.restart = r
			return p
		}
	}
	repl, prev, rest := gen.replacements(g.Spec.MinMember)
	p.replace = joiners{pods: repl, prev: prev, withSeats: true}
	if gen.succeeded == 0 {
		// Members beyond minMember join where there is room, without capacity of their own —
		// but a LeaderWorkerSet group admitted leader first (startupPolicy LeaderReady: its
		// workers exist only once the leader is ready) needs its workers: on a pool at zero
		// they waited gated for good, as Karpenter provisions nothing for a gated pod.
		p.join = joiners{pods: rest, withSeats: g.Labels[berthv1alpha1.AdaptedFromLabel] == gate.SourceLWS.Name}
	}
	return p
}

// decideRestart picks the live members a RestartGang deletes: those with a controller to
// recreate them (nil when there are none; the rest are left to the Replace path).
func decideRestart(gen generation) *restartPlan {
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
	return &restartPlan{doomed: doomed, lost: lost}
}

// assignedNodes maps each live assigned member (one of live) to its node, by name. An
// assignment whose pod is gone is left out: a pod created again under its name (a
// StatefulSet's, a training operator's) is another pod, not placed yet — were it taken for the
// assigned one, a release would seem under way and no waiting member would be made the key.
func assignedNodes(assigned []berthv1alpha1.MemberAssignment, live []*corev1.Pod) map[string]string {
	uidOf := make(map[string]types.UID, len(live))
	for _, m := range live {
		uidOf[m.Name] = m.UID
	}
	nodeOf := make(map[string]string, len(assigned))
	for _, a := range assigned {
		if uid, ok := uidOf[a.Pod]; ok && (a.UID == "" || a.UID == uid) {
			nodeOf[a.Pod] = a.Node
		}
	}
	return nodeOf
}

// tendAdmitted looks after a gang with an admitted generation: observe (the cycle's view),
// decide (decideAdmitted), act (actAdmitted).
func (r *Reconciler) tendAdmitted(ctx context.Context, cy *cycle, gv gangView, gen generation) (time.Duration, error) {
	p := decideAdmitted(gv, gen, func(name string) bool {
		_, ok := cy.snap.Node(name)
		return ok
	})
	return r.actAdmitted(ctx, cy, gv, gen, p)
}

// actAdmitted carries out an admittedPlan in order: an ended generation is closed or the next
// started; else the release is finished (or the seats go) and the barrier kept right — a failure
// there ends the cycle's work on the gang, since what follows must not race an unfinished
// release —, then GPU health, stranded members, and the restart or the joiners, every step tried
// and the errors joined.
func (r *Reconciler) actAdmitted(ctx context.Context, cy *cycle, gv gangView, gen generation, p admittedPlan) (time.Duration, error) {
	g := gv.group
	if p.over {
		if p.next {
			return r.newGeneration(ctx, cy, gv, gen)
		}
		if p.awaiting != "" {
			if err := r.setScheduled(ctx, cy, g, metav1.ConditionFalse, berthv1alpha1.ReasonWaitingForMembers, p.awaiting); err != nil {
				return 0, err
			}
		}
		return 0, r.deleteSeats(ctx, gv.seats) // finished or idle: nothing to admit
	}
	r.observeBound(g, gen.live, p.nodeOf)
	errs := []error{r.tendGPUHealth(ctx, cy.snap, g, gen.assigned)}
	if err := r.finishRelease(ctx, cy, gv, p); err != nil {
		return 0, errors.Join(append(errs, err)...)
	}
	wait, err := r.recoverStranded(ctx, cy.snap, gv, gen)
	errs = append(errs, err)
	if p.restart != nil {
		return wait, errors.Join(append(errs, r.restartGang(ctx, gv, *p.restart))...)
	}
	next, err := r.admitIndividually(ctx, cy, gv, gen, p.replace)
	errs = append(errs, err)
	wait = minPositive(wait, next)
	_, err = r.admitIndividually(ctx, cy, gv, gen, p.join)
	return wait, errors.Join(append(errs, err)...)
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

// finishRelease finishes an interrupted release (members pinned to a node that is gone are
// replaced), or else lets the gang's seats go when the plan says so, and keeps the release
// barrier right. The steps are ordered: seats must be gone before the barrier lets members bind
// into their capacity.
func (r *Reconciler) finishRelease(ctx context.Context, cy *cycle, gv gangView, p admittedPlan) error {
	g, nodeOf := gv.group, p.nodeOf
	var errs []error
	for _, m := range p.orphaned {
		_, err := r.replaceStranded(ctx, g, m, fmt.Sprintf("node %s, which it was pinned to, disappeared before it was bound", nodeOf[m.Name]), r.nodeGone(ctx, nodeOf[m.Name]))
		errs = append(errs, err)
	}
	if len(p.resume) > 0 {
		log.FromContext(ctx).Info("resuming release", "podgroup", client.ObjectKeyFromObject(g), "members", len(p.resume))
		errs = append(errs, r.release(ctx, g, p.resume, gv.keyHolders(), nodeOf, gv.seats))
	}
	if p.dropSeats {
		errs = append(errs, r.deleteSeats(ctx, gv.seats))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return r.tendBarrier(ctx, cy, g, gv.members, nodeOf)
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

// restartGang deletes the members a restartPlan dooms, marked as disrupted, so the workload
// recreates the whole gang and the new generation is admitted whole (onMemberLoss RestartGang).
func (r *Reconciler) restartGang(ctx context.Context, gv gangView, p restartPlan) error {
	r.recorder.Warning(gv.group, events.ReasonGangRestarting, fmt.Sprintf(
		"member(s) %v lost and onMemberLoss is RestartGang: deleting the %d live members so their workload recreates the gang, admitted whole", p.lost, len(p.doomed)))
	why := fmt.Sprintf("berth restarts gang %s whole (onMemberLoss RestartGang): member(s) %v lost", gv.group.Name, p.lost)
	return parallel(p.doomed, func(_ int, m *corev1.Pod) error {
		if err := r.disrupt(ctx, m, berthv1alpha1.DisruptionReasonGangRestart, why, client.Preconditions{UID: &m.UID}); err != nil {
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

// nodeGone is a replaceStranded check for a member pinned to a node the cache no longer has: the
// API server must not have it either.
func (r *Reconciler) nodeGone(ctx context.Context, node string) func(*corev1.Pod) bool {
	return func(*corev1.Pod) bool {
		var n corev1.Node
		return apierrors.IsNotFound(r.apiReader.Get(ctx, client.ObjectKey{Name: node}, &n))
	}
}
