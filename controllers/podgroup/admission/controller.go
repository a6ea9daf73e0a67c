// Package admission admits gangs: it holds a PodGroup's members at their scheduling gate until
// every member fits, then pins each to the node placement chose and releases them together.
//
// One scheduling cycle runs at a time (all events map to one work item), over a snapshot of the
// informer cache:
//
//  1. Snapshot nodes and every pod that uses them, including members promised a node by an
//     earlier admission (PodGroup status.assignments) but not bound yet.
//  2. Finish releases that were started (after a restart, or a failed patch): pin and ungate
//     the remaining members of admitted gangs; place late members individually.
//  3. For each waiting gang, oldest first: place it on the snapshot (package scheduling).
//  4. If it fits: assume it in the snapshot, write the assignments to the PodGroup's status
//     (the durable promise), then pin every member and remove every gate in one burst.
//     If the status write fails, nothing was released and the next cycle starts over.
package admission

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/scheduling"
)

// Name is the controller's name in logs and metrics.
const Name = "podgroup.admission"

// resync bounds how long a cycle may wait without events (time-outs, missed events).
const resync = 30 * time.Second

// cycleKey is the single work item every event maps to.
var cycleKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "cycle"}}

// Reconciler runs gang admission cycles.
type Reconciler struct {
	Client client.Client
	// APIReader reads around the cache where staleness matters.
	APIReader client.Reader
	Clock     clock.PassiveClock
	Recorder  *events.Recorder
	// Provisioning configures whole-gang provisioning through Karpenter (seat pods).
	Provisioning ProvisioningOptions

	mu sync.Mutex
	// assumed are assignments this process wrote that the cache may not show yet, by UID.
	assumed map[string][]berthv1alpha1.MemberAssignment
	// boundSeen marks gangs whose all-bound latency was observed, by UID.
	boundSeen map[string]bool
	// withBooting returns this cycle's snapshot in which nodes that are coming up count as
	// available (set at the start of every cycle; cycles never run concurrently).
	withBooting func() *scheduling.Snapshot
	// orphansSeen marks gated members without a PodGroup that were already reported, by UID.
	orphansSeen map[types.UID]bool
}

// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=list
// +kubebuilder:rbac:groups=karpenter.sh,resources=nodeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch

// SetupWithManager registers the cycle: any change to PodGroups, pods or nodes triggers it.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	r.assumed = map[string][]berthv1alpha1.MemberAssignment{}
	r.boundSeen = map[string]bool{}
	r.orphansSeen = map[types.UID]bool{}
	toCycle := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{cycleKey}
	})
	return ctrl.ControllerManagedBy(mgr).
		Named(Name).
		Watches(&berthv1alpha1.PodGroup{}, toCycle).
		Watches(&corev1.Pod{}, toCycle).
		Watches(&corev1.Node{}, toCycle).
		Complete(r)
}

// Reconcile runs one admission cycle over the whole cluster.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	start := r.Clock.Now()
	var groups berthv1alpha1.PodGroupList
	if err := r.Client.List(ctx, &groups); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing PodGroups: %w", err)
	}
	var podList corev1.PodList
	if err := r.Client.List(ctx, &podList); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing pods: %w", err)
	}
	var nodeList corev1.NodeList
	if err := r.Client.List(ctx, &nodeList); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodes: %w", err)
	}
	pods := ptrs(podList.Items)
	nodes := ptrs(nodeList.Items)
	gs := ptrs(groups.Items)
	sort.Slice(gs, func(i, j int) bool { return older(gs[i], gs[j]) })

	recordPhases(gs)
	r.mu.Lock()
	r.forgetCaughtUp(gs)
	onNodes := podsOnNodes(pods, gs, r.assumed)
	unavailable := unavailableNodes(nodes)
	snap := scheduling.NewSnapshot(nodes, onNodes, unavailable)
	r.mu.Unlock()
	// What capacity a gang lacks is judged counting nodes that are still booting: built on
	// first use, at most once per cycle.
	var booting *scheduling.Snapshot
	r.withBooting = func() *scheduling.Snapshot {
		if booting == nil {
			booting = scheduling.NewSnapshot(nodes, onNodes, withoutBooting(unavailable, nodes, r.Clock.Now()))
		}
		return booting
	}

	members := membersByGroup(pods)
	seats := seatsByGroup(pods)
	r.reportOrphans(gs, members)
	recordGangHealth(gs, members, r.Clock.Now())
	next := resync
	var errs []error
	for _, g := range gs {
		ms := members[g.Namespace+"/"+g.Name]
		wait, err := r.admit(ctx, snap, g, ms, seats[g.UID])
		if err != nil {
			errs = append(errs, fmt.Errorf("PodGroup %s/%s: %w", g.Namespace, g.Name, err))
		}
		if wait > 0 && wait < next {
			next = wait
		}
	}
	if err := r.sweepSeats(ctx, gs, seats); err != nil {
		errs = append(errs, err)
	}
	if err := r.sweepReservations(ctx, nodes, gs); err != nil {
		errs = append(errs, err)
	}
	if err := r.sweepBarriers(ctx, nodes, gs); err != nil {
		errs = append(errs, err)
	}
	cycleDuration.Observe(r.Clock.Since(start).Seconds())
	if len(errs) > 0 {
		return reconcile.Result{}, errs[0]
	}
	return reconcile.Result{RequeueAfter: next}, nil
}

// admit moves one gang forward and says how soon it wants another look (0: only on events).
func (r *Reconciler) admit(ctx context.Context, snap *scheduling.Snapshot, g *berthv1alpha1.PodGroup, members, seats []*corev1.Pod) (time.Duration, error) {
	switch g.Status.Phase {
	case berthv1alpha1.PodGroupFailed, berthv1alpha1.PodGroupSucceeded:
		return 0, nil
	}
	r.mu.Lock()
	assigned := assignmentsOf(g, r.assumed)
	r.mu.Unlock()
	if len(assigned) > 0 {
		return 0, r.continueAdmitted(ctx, snap, g, members, assigned, seats)
	}
	if timeout, over := r.timedOut(g); over {
		return 0, r.fail(ctx, g, fmt.Sprintf("not admitted within scheduleTimeoutSeconds (%s)", timeout))
	}
	gated := gatedOnly(members)
	wait := r.untilTimeout(g)
	if int32(len(members)) < g.Spec.MinMember {
		return wait, r.setScheduled(ctx, g, metav1.ConditionFalse, berthv1alpha1.ReasonWaitingForMembers,
			fmt.Sprintf("%d of %d members exist", len(members), g.Spec.MinMember))
	}
	if len(gated) == 0 {
		// Members exist but none carries the gate: created before berth's webhook was
		// installed, or past it. berth cannot hold them; say so instead of claiming admission.
		return wait, r.setScheduled(ctx, g, metav1.ConditionFalse, berthv1alpha1.ReasonMembersNotGated,
			fmt.Sprintf("none of the %d members carries the %s scheduling gate (created before berth's webhook was installed?); kube-scheduler places them one by one", len(members), berthv1alpha1.SchedulingGate))
	}
	gang := scheduling.Gang{Members: gated}
	if g.Spec.Topology != nil {
		gang.TopologyKey = g.Spec.Topology.RequiredKey
	}
	// The gang's own seats hold capacity for it: they are free when placing it.
	res := scheduling.Place(snap.Without(seats), gang)
	if !res.Fits() {
		reason := berthv1alpha1.ReasonUnschedulable
		if res.Unsupported {
			reason = berthv1alpha1.ReasonUnsupported
		}
		placements.WithLabelValues(resultLabel(reason)).Inc()
		if reason == berthv1alpha1.ReasonUnschedulable && r.Provisioning.Enabled {
			if err := r.setScheduled(ctx, g, metav1.ConditionFalse, berthv1alpha1.ReasonWaitingForCapacity,
				"the gang does not fit existing nodes; capacity for the members without a place is requested from Karpenter (see condition CapacityProvisioned)"); err != nil {
				return 0, err
			}
			next, err := r.provision(ctx, snap, r.withBooting(), g, gang, seats, res.Reason)
			if err != nil {
				return 0, err
			}
			return minPositive(wait, next), nil
		}
		return wait, r.setScheduled(ctx, g, metav1.ConditionFalse, reason, res.Reason)
	}
	placements.WithLabelValues("admitted").Inc()
	if err := snap.Assume(gated, res); err != nil {
		return 0, err
	}
	return 0, r.commit(ctx, snap, g, gated, res, seats)
}

// minPositive is the smaller of two waits, where 0 means "no wait wanted".
func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// commit records the placement as the gang's promise and releases the members.
func (r *Reconciler) commit(ctx context.Context, snap *scheduling.Snapshot, g *berthv1alpha1.PodGroup, gated []*corev1.Pod, res scheduling.Result, seats []*corev1.Pod) error {
	now := metav1.NewTime(r.Clock.Now())
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
		finishProvisioning(&updated.Status, g, now, r.nodeClaimsOf(ctx, snap, updated.Status.Nodes))
	}
	meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{
		Type: berthv1alpha1.ConditionScheduled, Status: metav1.ConditionTrue, Reason: berthv1alpha1.ReasonAdmitted,
		Message:            fmt.Sprintf("%d members placed on %d node(s)%s", len(assignments), len(updated.Status.Nodes), domainNote(g, res)),
		ObservedGeneration: g.Generation, LastTransitionTime: now,
	})
	if err := r.Client.Status().Update(ctx, updated); err != nil {
		// Nothing was released; the next cycle decides again on fresh state.
		return fmt.Errorf("recording admission: %w", err)
	}
	r.mu.Lock()
	r.assumed[string(g.UID)] = assignments
	r.mu.Unlock()
	if err := r.release(ctx, updated, gated, nodeOf, seats); err != nil {
		return err
	}
	released := r.Clock.Now()
	observeReleased(gated, released)
	r.Recorder.Normal(updated, events.ReasonGangAdmitted, fmt.Sprintf("released %d members together onto %v", len(gated), updated.Status.Nodes))
	log.FromContext(ctx).Info("admitted gang", "podgroup", client.ObjectKeyFromObject(g), "members", len(gated), "nodes", updated.Status.Nodes)
	return nil
}

func domainNote(g *berthv1alpha1.PodGroup, res scheduling.Result) string {
	if g.Spec.Topology == nil || res.Domain == "" {
		return ""
	}
	return fmt.Sprintf(" in %s=%s", g.Spec.Topology.RequiredKey, res.Domain)
}

// continueAdmitted finishes a release that was started and places members that appeared after
// admission.
func (r *Reconciler) continueAdmitted(ctx context.Context, snap *scheduling.Snapshot, g *berthv1alpha1.PodGroup, members []*corev1.Pod, assigned []berthv1alpha1.MemberAssignment, seats []*corev1.Pod) error {
	nodeOf := map[string]string{}
	for _, a := range assigned {
		nodeOf[a.Pod] = a.Node
	}
	var late []*corev1.Pod
	var resume []*corev1.Pod
	for _, m := range gatedOnly(members) {
		if _, ok := nodeOf[m.Name]; ok {
			resume = append(resume, m)
		} else {
			late = append(late, m)
		}
	}
	r.observeBound(g, members, nodeOf)
	if err := r.tendGPUHealth(ctx, snap, g, assigned); err != nil {
		return err
	}
	if len(resume) > 0 {
		if err := r.resume(ctx, snap, g, resume, nodeOf, seats); err != nil {
			return err
		}
	} else if err := r.giveWay(ctx, seats); err != nil {
		return err // seats of an admitted gang go before its barrier is (re)lifted
	}
	if err := r.tendBarrier(ctx, snap, g, members, nodeOf); err != nil {
		return err
	}
	if len(late) == 0 {
		return nil
	}
	return r.admitLate(ctx, snap, g, late, assigned)
}

// observeBound records the all-bound admission latency once per gang.
func (r *Reconciler) observeBound(g *berthv1alpha1.PodGroup, members []*corev1.Pod, nodeOf map[string]string) {
	uid := string(g.UID)
	if r.boundSeen[uid] || len(members) == 0 {
		return
	}
	for _, m := range members {
		if _, ok := nodeOf[m.Name]; ok && m.Spec.NodeName == "" {
			return
		}
	}
	r.boundSeen[uid] = true
	admissionLatency.WithLabelValues("bound").Observe(r.Clock.Since(lastCreated(members)).Seconds())
}

// resume releases members of an admitted gang that are still gated (a restart or a failed
// patch interrupted the release). A member whose node is gone can never bind where it is
// pinned: a member with a controller is deleted so it is recreated (and placed as a late
// member); one without is reported.
func (r *Reconciler) resume(ctx context.Context, snap *scheduling.Snapshot, g *berthv1alpha1.PodGroup, pods []*corev1.Pod, nodeOf map[string]string, seats []*corev1.Pod) error {
	var ok []*corev1.Pod
	for _, p := range pods {
		if _, exists := snap.Node(nodeOf[p.Name]); exists {
			ok = append(ok, p)
			continue
		}
		if metav1.GetControllerOf(p) != nil {
			r.Recorder.Warning(g, events.ReasonMemberReplaced, fmt.Sprintf("node %s of member %s disappeared before it was bound; deleting it so its controller recreates it", nodeOf[p.Name], p.Name))
			if err := r.Client.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting stranded member %s: %w", p.Name, err)
			}
			continue
		}
		r.Recorder.Warning(g, events.ReasonMemberStranded, fmt.Sprintf("node %s of member %s disappeared before it was bound, and the pod has no controller to recreate it: delete and recreate it", nodeOf[p.Name], p.Name))
	}
	if len(ok) == 0 {
		return nil
	}
	log.FromContext(ctx).Info("resuming release", "podgroup", client.ObjectKeyFromObject(g), "members", len(ok))
	return r.release(ctx, g, ok, nodeOf, seats)
}

// forgetCaughtUp drops assumed assignments once the cache shows them (or the group is gone).
func (r *Reconciler) forgetCaughtUp(gs []*berthv1alpha1.PodGroup) {
	live := map[string]*berthv1alpha1.PodGroup{}
	for _, g := range gs {
		live[string(g.UID)] = g
	}
	for uid, as := range r.assumed {
		g, ok := live[uid]
		if !ok || len(g.Status.Assignments) >= len(as) {
			delete(r.assumed, uid)
		}
	}
}

// reportOrphans tells, once per pod, gated members whose PodGroup does not exist that they
// wait for one: without it they would stay gated with no explanation.
func (r *Reconciler) reportOrphans(gs []*berthv1alpha1.PodGroup, members map[string][]*corev1.Pod) {
	exists := map[string]bool{}
	for _, g := range gs {
		exists[g.Namespace+"/"+g.Name] = true
	}
	for key, ms := range members {
		if exists[key] {
			continue
		}
		for _, m := range gatedOnly(ms) {
			if r.orphansSeen[m.UID] || isAdapted(m) {
				continue // adapted gangs get their PodGroup from the adapter, which reports itself
			}
			r.orphansSeen[m.UID] = true
			r.Recorder.Warning(m, events.ReasonPodGroupMissing, fmt.Sprintf(
				"pod is a member of gang %q (label %s) but no PodGroup of that name exists in namespace %s; it stays gated until one is created",
				m.Labels[berthv1alpha1.PodGroupLabel], berthv1alpha1.PodGroupLabel, m.Namespace))
		}
	}
}

// isAdapted reports whether the webhook adopted the pod from another gang scheduler.
func isAdapted(p *corev1.Pod) bool {
	s := p.Annotations[berthv1alpha1.SourceAnnotation]
	return s != "" && s != gate.SourceBerth.Name
}

// membersByGroup indexes pods carrying the pod-group label by namespace/group, sorted by name,
// leaving out pods being deleted.
func membersByGroup(pods []*corev1.Pod) map[string][]*corev1.Pod {
	out := map[string][]*corev1.Pod{}
	for _, p := range pods {
		name := p.Labels[berthv1alpha1.PodGroupLabel]
		if name == "" || p.DeletionTimestamp != nil {
			continue
		}
		k := p.Namespace + "/" + name
		out[k] = append(out[k], p)
	}
	for _, ms := range out {
		sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	}
	return out
}

func gatedOnly(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if gateIndex(p) >= 0 && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// older orders gangs first come, first served.
func older(a, b *berthv1alpha1.PodGroup) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
