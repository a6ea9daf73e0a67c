package admission

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/scheduling"
)

// Stranded members: a member released onto its node that kube-scheduler cannot bind there.
// Admission's promise holds against other gangs, but not against pods kube-scheduler places on
// its own: a plain pod that tolerates the GPU taint can take a GPU the member was promised
// between the release and the bind. A pin cannot be rewritten (pins are additions to a gated
// pod's node affinity), so a stranded member is replaced: deleted when a controller recreates
// it (it then joins the gang as a replacement, in the gang's domain, with new capacity when
// nothing fits), recreated by berth otherwise.

// DefaultStrandedAfter is how long kube-scheduler may report a released member unschedulable
// on its node before berth replaces it: long enough for a preemption in progress to finish.
const DefaultStrandedAfter = 30 * time.Second

// AvoidStrandedNodeFor is how long a gang's replacements are not placed on a node one of its
// members was stranded on. kube-scheduler refused the node for a reason berth's view does not
// show (a pod berth does not see, kube-scheduler's own view behind or ahead); placing the
// replacement there again would strand it again, every StrandedAfter, for as long as the
// reason lasts.
const AvoidStrandedNodeFor = 10 * time.Minute

// recoverStranded replaces the gang's stranded members and says how soon to look again at
// members that may become stranded: observe (how long kube-scheduler has reported each
// released member unschedulable on its node, as far as this process has seen) → decide
// (decideStranded) → act (replaceStranded). A member counts as stranded only once its gang is
// open to it (gangOpen): while a release waits for its key member or its node barrier,
// kube-scheduler reports every released member unschedulable, and that is the hold working,
// not a stranding; the clock starts when the gang opens.
func (r *Reconciler) recoverStranded(ctx context.Context, snap *scheduling.Snapshot, gv gangView, gen generation) (time.Duration, error) {
	now := r.clock.Now()
	var waiting []unschedulableMember
	for _, m := range gen.live {
		if !unschedulable(m) || !gangOpen(snap, gv, m) {
			r.unschedulableFor(m.UID, time.Time{})
			continue
		}
		waiting = append(waiting, unschedulableMember{pod: m, since: r.unschedulableFor(m.UID, now)})
	}
	stranded, next := decideStranded(now, r.opts.StrandedAfter, waiting)
	var errs []error
	for _, s := range stranded {
		node, _ := pinned(s.pod)
		replaced, err := r.replaceStranded(ctx, gv.group, s.pod, fmt.Sprintf("kube-scheduler cannot bind it to %s, the node it was released onto, for %s: %s",
			node, now.Sub(s.since).Round(time.Second), podScheduledMessage(s.pod)), unschedulable)
		errs = append(errs, err)
		if replaced {
			r.markStranded(gangKey(gv.group), node, now)
		}
	}
	return next, errors.Join(errs...)
}

// unschedulableMember is a released member kube-scheduler reports unschedulable on its node,
// since when this process has seen it so.
type unschedulableMember struct {
	pod   *corev1.Pod
	since time.Time
}

// decideStranded picks the members unschedulable for at least after at now (stranded: to be
// replaced) and says how long until the next of the others would be (0: none).
func decideStranded(now time.Time, after time.Duration, waiting []unschedulableMember) ([]unschedulableMember, time.Duration) {
	var stranded []unschedulableMember
	var next time.Duration
	for _, w := range waiting {
		if left := after - now.Sub(w.since); left > 0 {
			next = minPositive(next, left)
			continue
		}
		stranded = append(stranded, w)
	}
	return stranded, next
}

// gangOpen reports whether what holds a released member m has let go: a member held by the
// release term waits for a bound key member of its gang (the key itself holds for nothing: its
// own label meets its term), one behind the node barrier for the barrier label on its node. A
// member behind a key that is stranded itself waits until the key is replaced and another
// member becomes the key (tendKey).
func gangOpen(snap *scheduling.Snapshot, gv gangView, m *corev1.Pod) bool {
	if holdsForKey(gv.group, m) && !isKey(gv.group, m) {
		open := false
		for _, k := range gv.keyHolders() {
			if isKey(gv.group, k) && k.Spec.NodeName != "" {
				open = true
			}
		}
		if !open {
			return false
		}
	}
	key := barrierKey(gv.group)
	if behindBarrier(m, key) {
		node, _ := pinned(m)
		n, ok := snap.Node(node)
		if !ok {
			return true // the node is gone: nothing will let the member bind there
		}
		if _, lifted := n.Node.Labels[key]; !lifted {
			return false
		}
	}
	return true
}

// unschedulable reports whether kube-scheduler reports a released, unbound member
// unschedulable.
func unschedulable(p *corev1.Pod) bool {
	if p.Spec.NodeName != "" || gateIndex(p) >= 0 || p.Status.NominatedNodeName != "" {
		return false
	}
	if _, ok := pinned(p); !ok {
		return false
	}
	c := podCondition(p, corev1.PodScheduled)
	return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
}

// unschedulableFor records that member uid is unschedulable at now (a zero now: it is not) and
// returns since when berth has seen it so. The PodScheduled condition cannot say: it was False
// (SchedulingGated) since the pod was created, and a False that stays False keeps its
// lastTransitionTime, so a member that waited an hour for capacity would look stranded the
// moment kube-scheduler first tried it — and every release has such a moment, while the
// barrier holds. The clock starts again when the controller restarts.
func (r *Reconciler) unschedulableFor(uid types.UID, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.IsZero() {
		delete(r.unschedulableSeen, uid)
		return time.Time{}
	}
	since, ok := r.unschedulableSeen[uid]
	if !ok {
		since = now
		r.unschedulableSeen[uid] = now
	}
	return since
}

// forgetUnschedulable drops what unschedulableFor remembers of pods that no longer exist.
func (r *Reconciler) forgetUnschedulable(exists func(types.UID) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid := range r.unschedulableSeen {
		if !exists(uid) {
			delete(r.unschedulableSeen, uid)
		}
	}
}

// podScheduledMessage is kube-scheduler's word on why a pod is not scheduled.
func podScheduledMessage(p *corev1.Pod) string {
	if c := podCondition(p, corev1.PodScheduled); c != nil && c.Message != "" {
		return c.Message
	}
	return "no reason given"
}

// replaceStranded replaces a member that can never bind where it is pinned: a member with a
// controller is deleted (its controller recreates it and it joins the gang as a replacement);
// one without is recreated by berth under its own name, without the pin, gated again by the
// webhook. Either way it is reported. The decision was made on the cache, which can be behind
// (a watch that reconnects after an API server restart takes seconds): the member is read
// again from the API server and replaced only if it is the same pod, still unbound and still
// stranded by stillStranded, and it is deleted only at the resourceVersion read, so a member
// kube-scheduler binds in the meantime is never deleted.
func (r *Reconciler) replaceStranded(ctx context.Context, g *berthv1alpha1.PodGroup, p *corev1.Pod, why string, stillStranded func(*corev1.Pod) bool) (replaced bool, err error) {
	var live corev1.Pod
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(p), &live); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading stranded member %s before replacing it: %w", p.Name, err)
	}
	if live.UID != p.UID || live.Spec.NodeName != "" || live.DeletionTimestamp != nil || !stillStranded(&live) {
		log.FromContext(ctx).Info("member no longer stranded; not replacing it", "pod", client.ObjectKeyFromObject(p), "node", live.Spec.NodeName)
		return false, nil
	}
	strandedMembers.Inc()
	pre := client.Preconditions{UID: &live.UID, ResourceVersion: &live.ResourceVersion}
	if controlled(&live) {
		r.recorder.Warning(g, events.ReasonMemberStranded, fmt.Sprintf("member %s is stranded (%s); deleting it so its controller recreates it, placed again in the gang", p.Name, why))
		switch err := r.disrupt(ctx, &live, berthv1alpha1.DisruptionReasonMemberStranded, fmt.Sprintf("berth replaces stranded member %s: %s", p.Name, why), pre); {
		case apierrors.IsConflict(err):
			return false, nil // it changed since it was read: the next cycle looks again
		case err != nil:
			return false, fmt.Errorf("replacing stranded member: %w", err)
		}
		return true, nil
	}
	r.recorder.Warning(g, events.ReasonMemberStranded, fmt.Sprintf("member %s is stranded (%s); berth recreates it without its pin, to be placed again in the gang", p.Name, why))
	return r.recreate(ctx, g, &live, pre)
}

// gangKey names a gang across its PodGroups: namespace/name.
func gangKey(g *berthv1alpha1.PodGroup) string { return g.Namespace + "/" + g.Name }

// markStranded records that a member of the gang named key was stranded on node at now.
func (r *Reconciler) markStranded(key, node string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.strandedOn[key] == nil {
		r.strandedOn[key] = map[string]time.Time{}
	}
	r.strandedOn[key][node] = now
}

// avoidedNodes are the nodes the members of the gang named key are not placed on at now
// (AvoidStrandedNodeFor after a member was stranded there) — its joiners, and its next
// generation whole: a LeaderWorkerSet group restarts whole when a member is replaced
// (RecreateGroupOnPodRestart), as a new PodGroup of the same name, and placed on the same node
// again it was stranded again, every StrandedAfter, each time reloading its model. Older
// records are dropped.
func (r *Reconciler) avoidedNodes(key string, now time.Time) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for node, at := range r.strandedOn[key] {
		if now.Sub(at) >= AvoidStrandedNodeFor {
			delete(r.strandedOn[key], node)
			continue
		}
		out[node] = true
	}
	if len(r.strandedOn[key]) == 0 {
		delete(r.strandedOn, key)
	}
	return out
}

// avoiding is member p as placement must see it when it may not go on the nodes in avoid: a
// metadata.name NotIn requirement added to every required node-affinity term (or one new term).
// Only placement sees it; what is written to the pod is its pin.
func avoiding(p *corev1.Pod, avoid map[string]bool) *corev1.Pod {
	if len(avoid) == 0 {
		return p
	}
	out := p.DeepCopy()
	requireOnNode(out, []corev1.NodeSelectorRequirement{{Key: metadataNameField, Operator: corev1.NodeSelectorOpNotIn, Values: slices.Sorted(maps.Keys(avoid))}}, nil)
	return out
}

// avoidingAll is gang g as placement must see it when its members may not go on the nodes in
// avoid (g itself when there are none).
func avoidingAll(g scheduling.Gang, avoid map[string]bool) scheduling.Gang {
	if len(avoid) == 0 {
		return g
	}
	out := scheduling.Gang{Members: make([]*corev1.Pod, len(g.Members)), TopologyKey: g.TopologyKey}
	for i, m := range g.Members {
		out.Members[i] = avoiding(m, avoid)
	}
	return out
}

// unpinnedCopy is a pod to create in p's place: p's metadata (owner references too: none is a
// controller, or the pod would not be recreated by berth) and spec without berth's pin,
// barrier and key label, without the node, without server-set fields and without finalizers
// (theirs to add, whose controllers would never remove them from a pod they did not see
// created); the webhook gates it again.
func unpinnedCopy(p *corev1.Pod) *corev1.Pod {
	node, _ := pinned(p)
	c := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, Labels: maps.Clone(p.Labels), Annotations: maps.Clone(p.Annotations),
		OwnerReferences: slices.Clone(p.OwnerReferences),
	}, Spec: *p.Spec.DeepCopy()}
	delete(c.Annotations, berthv1alpha1.PinnedNodeAnnotation)
	delete(c.Labels, berthv1alpha1.ReleaseLabel) // a new member is nobody's key until released
	c.Spec.NodeName = ""
	c.Spec.SchedulingGates = nil
	c.Spec.Affinity = withoutPin(c.Spec.Affinity, node)
	return c
}

// withoutPin removes what withPin added to an affinity: the metadata.name requirement on node
// and the release barrier, dropping terms and structures left empty.
func withoutPin(aff *corev1.Affinity, node string) *corev1.Affinity {
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return aff
	}
	sel := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	var terms []corev1.NodeSelectorTerm
	for _, t := range sel.NodeSelectorTerms {
		var fields, exprs []corev1.NodeSelectorRequirement
		for _, f := range t.MatchFields {
			ours := f.Key == metadataNameField && len(f.Values) == 1 && f.Values[0] == node
			if !ours {
				fields = append(fields, f)
			}
		}
		for _, e := range t.MatchExpressions {
			if !isBarrier(e.Key) {
				exprs = append(exprs, e)
			}
		}
		if len(fields) > 0 || len(exprs) > 0 {
			terms = append(terms, corev1.NodeSelectorTerm{MatchFields: fields, MatchExpressions: exprs})
		}
	}
	if len(terms) == 0 {
		aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = nil
	} else {
		sel.NodeSelectorTerms = terms
	}
	if aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil && len(aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		aff.NodeAffinity = nil
	}
	if aff.NodeAffinity == nil && aff.PodAffinity == nil && aff.PodAntiAffinity == nil {
		return nil
	}
	return aff
}
