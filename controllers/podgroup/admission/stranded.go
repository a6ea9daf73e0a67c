package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
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

// recoverStranded replaces the gang's stranded members and says how soon to look again at
// members that may become stranded.
func (r *Reconciler) recoverStranded(ctx context.Context, gv gangView, gen generation) (time.Duration, error) {
	var next time.Duration
	var errs []error
	now := r.clock.Now()
	for _, m := range gen.live {
		if !unschedulable(m) {
			r.unschedulableFor(m.UID, time.Time{})
			continue
		}
		since := r.unschedulableFor(m.UID, now)
		if left := r.opts.StrandedAfter - now.Sub(since); left > 0 {
			next = minPositive(next, left)
			continue
		}
		node, _ := pinned(m)
		errs = append(errs, r.replaceStranded(ctx, gv.group, m, fmt.Sprintf("kube-scheduler cannot bind it to %s, the node it was released onto, for %s: %s",
			node, now.Sub(since).Round(time.Second), podScheduledMessage(m))))
	}
	return next, errors.Join(errs...)
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
// webhook. Either way it is reported.
func (r *Reconciler) replaceStranded(ctx context.Context, g *berthv1alpha1.PodGroup, p *corev1.Pod, why string) error {
	strandedMembers.Inc()
	if controlled(p) {
		r.recorder.Warning(g, events.ReasonMemberStranded, fmt.Sprintf("member %s is stranded (%s); deleting it so its controller recreates it, placed again in the gang", p.Name, why))
		if err := r.client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting stranded member %s: %w", p.Name, err)
		}
		return nil
	}
	r.recorder.Warning(g, events.ReasonMemberStranded, fmt.Sprintf("member %s is stranded (%s); berth recreates it without its pin, to be placed again in the gang", p.Name, why))
	return r.recreate(ctx, p)
}

// recreate deletes a pod and creates it again under its name: the same metadata and spec less
// what berth added (its pin, the barrier, the node) and less what the API server fills in.
func (r *Reconciler) recreate(ctx context.Context, p *corev1.Pod) error {
	again := unpinnedCopy(p)
	if err := r.client.Delete(ctx, p, client.Preconditions{UID: &p.UID}, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting stranded member %s: %w", p.Name, err)
	}
	// The name is free once the old pod is gone (an unbound pod goes at once).
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var cur corev1.Pod
		err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(p), &cur)
		return apierrors.IsNotFound(err) || (err == nil && cur.UID != p.UID), client.IgnoreNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("waiting for stranded member %s to go before recreating it: %w", p.Name, err)
	}
	if err := r.client.Create(ctx, again); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("recreating stranded member %s (it is gone; its spec was %s/%s): %w", p.Name, p.Namespace, p.Name, err)
	}
	log.FromContext(ctx).Info("recreated stranded member", "pod", client.ObjectKeyFromObject(p))
	return nil
}

// unpinnedCopy is a pod to create in p's place: p's metadata and spec without berth's pin and
// barrier, without the node, without server-set fields; the webhook gates it again.
func unpinnedCopy(p *corev1.Pod) *corev1.Pod {
	node, _ := pinned(p)
	c := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, Labels: copyMap(p.Labels), Annotations: copyMap(p.Annotations),
		Finalizers: append([]string(nil), p.Finalizers...),
	}, Spec: *p.Spec.DeepCopy()}
	delete(c.Annotations, berthv1alpha1.PinnedNodeAnnotation)
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
