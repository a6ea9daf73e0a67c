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
	"strings"
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
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/scheduling"
)

// Name is the controller's name in logs and metrics.
const Name = "podgroup.admission"

// Condition reasons of the Scheduled condition.
const (
	ReasonWaitingForMembers = "WaitingForMembers"
	ReasonUnschedulable     = "Unschedulable"
	ReasonUnsupported       = "Unsupported"
	ReasonAdmitted          = "Admitted"
	ReasonTimeout           = "ScheduleTimeout"
	ReasonNotGated          = "MembersNotGated"
)

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

	mu sync.Mutex
	// assumed are assignments this process wrote that the cache may not show yet, by UID.
	assumed map[string][]berthv1alpha1.MemberAssignment
	// boundSeen marks gangs whose all-bound latency was observed, by UID.
	boundSeen map[string]bool
}

// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch

// SetupWithManager registers the cycle: any change to PodGroups, pods or nodes triggers it.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	r.assumed = map[string][]berthv1alpha1.MemberAssignment{}
	r.boundSeen = map[string]bool{}
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
	snap := scheduling.NewSnapshot(nodes, podsOnNodes(pods, gs, r.assumed), unavailableNodes(nodes))
	r.mu.Unlock()

	members := membersByGroup(pods)
	next := resync
	var errs []error
	for _, g := range gs {
		ms := members[g.Namespace+"/"+g.Name]
		wait, err := r.admit(ctx, snap, g, ms)
		if err != nil {
			errs = append(errs, fmt.Errorf("PodGroup %s/%s: %w", g.Namespace, g.Name, err))
		}
		if wait > 0 && wait < next {
			next = wait
		}
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
func (r *Reconciler) admit(ctx context.Context, snap *scheduling.Snapshot, g *berthv1alpha1.PodGroup, members []*corev1.Pod) (time.Duration, error) {
	switch g.Status.Phase {
	case berthv1alpha1.PodGroupFailed, berthv1alpha1.PodGroupSucceeded:
		return 0, nil
	}
	r.mu.Lock()
	assigned := assignmentsOf(g, r.assumed)
	r.mu.Unlock()
	if len(assigned) > 0 {
		return 0, r.continueAdmitted(ctx, snap, g, members, assigned)
	}
	if timeout, over := r.timedOut(g); over {
		return 0, r.fail(ctx, g, fmt.Sprintf("not admitted within scheduleTimeoutSeconds (%s)", timeout))
	}
	gated := gatedOnly(members)
	wait := r.untilTimeout(g)
	if int32(len(members)) < g.Spec.MinMember {
		return wait, r.setScheduled(ctx, g, metav1.ConditionFalse, ReasonWaitingForMembers,
			fmt.Sprintf("%d of %d members exist", len(members), g.Spec.MinMember))
	}
	if len(gated) == 0 {
		// Members exist but none carries the gate: created before berth's webhook was
		// installed, or past it. berth cannot hold them; say so instead of claiming admission.
		return wait, r.setScheduled(ctx, g, metav1.ConditionFalse, ReasonNotGated,
			fmt.Sprintf("none of the %d members carries the %s scheduling gate (created before berth's webhook was installed?); kube-scheduler places them one by one", len(members), berthv1alpha1.SchedulingGate))
	}
	gang := scheduling.Gang{Members: gated}
	if g.Spec.Topology != nil {
		gang.TopologyKey = g.Spec.Topology.RequiredKey
	}
	res := scheduling.Place(snap, gang)
	if !res.Fits() {
		reason := ReasonUnschedulable
		if res.Unsupported {
			reason = ReasonUnsupported
		}
		placements.WithLabelValues(resultLabel(reason)).Inc()
		return wait, r.setScheduled(ctx, g, metav1.ConditionFalse, reason, res.Reason)
	}
	placements.WithLabelValues("admitted").Inc()
	if err := snap.Assume(gated, res); err != nil {
		return 0, err
	}
	return 0, r.commit(ctx, g, gated, res)
}

// commit records the placement as the gang's promise and releases the members.
func (r *Reconciler) commit(ctx context.Context, g *berthv1alpha1.PodGroup, gated []*corev1.Pod, res scheduling.Result) error {
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
	meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{
		Type: berthv1alpha1.ConditionScheduled, Status: metav1.ConditionTrue, Reason: ReasonAdmitted,
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
	if err := r.release(ctx, updated, gated, nodeOf); err != nil {
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
func (r *Reconciler) continueAdmitted(ctx context.Context, snap *scheduling.Snapshot, g *berthv1alpha1.PodGroup, members []*corev1.Pod, assigned []berthv1alpha1.MemberAssignment) error {
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
		if err := r.resume(ctx, snap, g, resume, nodeOf); err != nil {
			return err
		}
	}
	if err := r.tendBarrier(ctx, snap, g, members, nodeOf); err != nil {
		return err
	}
	if len(late) == 0 {
		return nil
	}
	return r.admitLate(ctx, snap, g, late, assigned)
}

// tendBarrier keeps a gang's release barrier right: up on the nodes of members that are
// released but not bound yet (a restart may have stopped a release between removing the gates
// and lifting the barrier), and gone from every node once no member waits for it.
func (r *Reconciler) tendBarrier(ctx context.Context, snap *scheduling.Snapshot, g *berthv1alpha1.PodGroup, members []*corev1.Pod, nodeOf map[string]string) error {
	key := barrierKey(g)
	waiting := map[string]bool{}
	for _, m := range members {
		if node, ok := nodeOf[m.Name]; ok && m.Spec.NodeName == "" && gateIndex(m) < 0 {
			waiting[node] = true
		}
	}
	for _, n := range snap.Nodes() {
		_, has := n.Node.Labels[key]
		switch {
		case waiting[n.Name()] && !has:
			if err := r.setNodeLabel(ctx, n.Name(), key, true); err != nil {
				return err
			}
		case !waiting[n.Name()] && has && !r.gatedAssigned(members, nodeOf, n.Name()):
			if err := r.setNodeLabel(ctx, n.Name(), key, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// gatedAssigned reports whether a still-gated member is assigned to node (its release is in
// progress in this very cycle, so the barrier stays).
func (r *Reconciler) gatedAssigned(members []*corev1.Pod, nodeOf map[string]string, node string) bool {
	for _, m := range members {
		if nodeOf[m.Name] == node && gateIndex(m) >= 0 {
			return true
		}
	}
	return false
}

// sweepBarriers removes release barriers of PodGroups that no longer exist.
func (r *Reconciler) sweepBarriers(ctx context.Context, nodes []*corev1.Node, gs []*berthv1alpha1.PodGroup) error {
	live := map[string]bool{}
	for _, g := range gs {
		live[barrierKey(g)] = true
	}
	for _, n := range nodes {
		for k := range n.Labels {
			if strings.HasPrefix(k, BarrierPrefix) && !live[k] {
				if err := r.setNodeLabel(ctx, n.Name, k, false); err != nil {
					return err
				}
			}
		}
	}
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
	want := metav1.Condition{Type: berthv1alpha1.ConditionGPUHealthy, Status: metav1.ConditionTrue, Reason: "NodesHealthy",
		Message: fmt.Sprintf("%d node(s) report healthy GPUs", len(seen)), ObservedGeneration: g.Generation}
	if len(sick) > 0 {
		want.Status, want.Reason = metav1.ConditionFalse, "GPUUnhealthy"
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
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(g), &fresh); err != nil {
		return fmt.Errorf("reading PodGroup: %w", err)
	}
	want.LastTransitionTime = metav1.NewTime(r.Clock.Now())
	meta.SetStatusCondition(&fresh.Status.Conditions, want)
	if err := r.Client.Status().Update(ctx, &fresh); err != nil {
		if apierrors.IsConflict(err) {
			return nil // next cycle
		}
		return fmt.Errorf("updating GPUHealthy condition: %w", err)
	}
	if len(sick) > 0 {
		r.Recorder.Warning(&fresh, events.ReasonGangNodeUnhealthy, want.Message)
	}
	return nil
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
func (r *Reconciler) resume(ctx context.Context, snap *scheduling.Snapshot, g *berthv1alpha1.PodGroup, pods []*corev1.Pod, nodeOf map[string]string) error {
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
	return r.release(ctx, g, ok, nodeOf)
}

// admitLate places members created after the gang was admitted (a replacement for a failed or
// evicted member, say) one by one, in the gang's topology domain when it has one. Each is
// recorded in the assignments before it is released. A late member that does not fit stays
// gated and the Scheduled condition says so.
func (r *Reconciler) admitLate(ctx context.Context, snap *scheduling.Snapshot, g *berthv1alpha1.PodGroup, late []*corev1.Pod, assigned []berthv1alpha1.MemberAssignment) error {
	domain := ""
	if g.Spec.Topology != nil {
		for _, a := range assigned {
			if n, ok := snap.Node(a.Node); ok {
				domain = n.Node.Labels[g.Spec.Topology.RequiredKey]
				break
			}
		}
	}
	for _, p := range late {
		candidate := p
		if domain != "" {
			candidate = p.DeepCopy()
			if candidate.Spec.NodeSelector == nil {
				candidate.Spec.NodeSelector = map[string]string{}
			}
			candidate.Spec.NodeSelector[g.Spec.Topology.RequiredKey] = domain
		}
		res := scheduling.Place(snap, scheduling.Gang{Members: []*corev1.Pod{candidate}})
		if !res.Fits() {
			placements.WithLabelValues("no_fit").Inc()
			r.Recorder.Warning(g, events.ReasonLateMemberWaiting, fmt.Sprintf("member %s, created after admission, does not fit yet: %s", p.Name, res.Reason))
			continue
		}
		if err := snap.Assume([]*corev1.Pod{candidate}, res); err != nil {
			return err
		}
		var cur berthv1alpha1.PodGroup
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(g), &cur); err != nil {
			return fmt.Errorf("reading PodGroup: %w", err)
		}
		node := res.Assignments[0].Node
		cur.Status.Assignments = append(assignmentsWithout(cur.Status.Assignments, p.Name), berthv1alpha1.MemberAssignment{Pod: p.Name, Node: node})
		if err := r.Client.Status().Update(ctx, &cur); err != nil {
			return fmt.Errorf("recording late member %s: %w", p.Name, err)
		}
		r.mu.Lock()
		r.assumed[string(g.UID)] = cur.Status.Assignments
		r.mu.Unlock()
		placements.WithLabelValues("admitted").Inc()
		if err := r.release(ctx, g, []*corev1.Pod{p}, map[string]string{p.Name: node}); err != nil {
			return err
		}
		r.Recorder.Normal(g, events.ReasonLateMemberAdmitted, fmt.Sprintf("member %s, created after admission, released onto %s", p.Name, node))
	}
	return nil
}

func assignmentsWithout(as []berthv1alpha1.MemberAssignment, pod string) []berthv1alpha1.MemberAssignment {
	out := make([]berthv1alpha1.MemberAssignment, 0, len(as))
	for _, a := range as {
		if a.Pod != pod {
			out = append(out, a)
		}
	}
	return out
}

// timedOut reports whether a waiting gang passed its scheduleTimeoutSeconds.
func (r *Reconciler) timedOut(g *berthv1alpha1.PodGroup) (time.Duration, bool) {
	t := timeoutOf(g)
	if t == 0 {
		return 0, false
	}
	return t, r.Clock.Since(g.CreationTimestamp.Time) >= t
}

func (r *Reconciler) untilTimeout(g *berthv1alpha1.PodGroup) time.Duration {
	t := timeoutOf(g)
	if t == 0 {
		return 0
	}
	return max(time.Second, t-r.Clock.Since(g.CreationTimestamp.Time))
}

func timeoutOf(g *berthv1alpha1.PodGroup) time.Duration {
	s := berthv1alpha1.DefaultScheduleTimeoutSeconds
	if g.Spec.ScheduleTimeoutSeconds != nil {
		s = *g.Spec.ScheduleTimeoutSeconds
	}
	return time.Duration(s) * time.Second
}

// fail moves a gang to Failed; nothing was promised to it (it was never admitted).
func (r *Reconciler) fail(ctx context.Context, g *berthv1alpha1.PodGroup, msg string) error {
	updated := g.DeepCopy()
	updated.Status.Phase = berthv1alpha1.PodGroupFailed
	meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{
		Type: berthv1alpha1.ConditionScheduled, Status: metav1.ConditionFalse, Reason: ReasonTimeout,
		Message: msg, ObservedGeneration: g.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now()),
	})
	if err := r.Client.Status().Update(ctx, updated); err != nil {
		return fmt.Errorf("failing timed-out gang: %w", err)
	}
	placements.WithLabelValues("timeout").Inc()
	r.Recorder.Warning(updated, events.ReasonGangTimedOut, msg)
	return nil
}

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
		ObservedGeneration: g.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now()),
	})
	if err := r.Client.Status().Update(ctx, updated); err != nil {
		if apierrors.IsConflict(err) {
			return nil // the next cycle writes it again
		}
		return fmt.Errorf("updating Scheduled condition: %w", err)
	}
	if reason != ReasonWaitingForMembers {
		r.Recorder.Warning(updated, events.ReasonGangUnschedulable, msg)
	}
	return nil
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
