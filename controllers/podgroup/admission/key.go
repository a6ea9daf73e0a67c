package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// A gang is opened by its key member. The pod gate gives each member it holds a required
// pod-affinity term for a bound pod labelled berthv1alpha1.ReleaseLabel=<gang> (the release
// term), so members pinned and ungated still cannot bind. The key member is ungated last and
// labelled in the same patch: kube-scheduler lets it through on its own term (no pod matches
// yet and it matches itself), and once it is bound every other member's term is met. One write
// opens a gang on any number of nodes, where a node barrier costs two writes per node. Members
// without the term (pods created before the gate gave it, pods with pod affinity of their own,
// gang names that are no label value) are held by the node barrier as before.

// holdsForKey reports whether member m waits for a key member of g to be bound.
func holdsForKey(g *berthv1alpha1.PodGroup, m *corev1.Pod) bool {
	grp, ok := berthv1alpha1.ReleaseGroup(m)
	return ok && grp == g.Name
}

// isKey reports whether m is labelled as g's key member.
func isKey(g *berthv1alpha1.PodGroup, m *corev1.Pod) bool {
	return m.Labels[berthv1alpha1.ReleaseLabel] == g.Name
}

// releasedWaiting reports whether m was released (pinned, its gate gone) and is not bound yet.
func releasedWaiting(m *corev1.Pod) bool {
	_, ok := pinned(m)
	return ok && gateIndex(m) < 0 && m.Spec.NodeName == "" && m.DeletionTimestamp == nil
}

// splitKey chooses the key member among the gated members a release is about to open: the last
// one (by name) that holds for g's key; rest are the others. barrier reports whether a member
// is not held by the release term, so the node barrier must hold it.
func splitKey(g *berthv1alpha1.PodGroup, gated []*corev1.Pod) (key *corev1.Pod, rest []*corev1.Pod, barrier bool) {
	for _, m := range gated {
		if !holdsForKey(g, m) {
			barrier = true
			continue
		}
		if key == nil || m.Name > key.Name {
			key = m
		}
	}
	for _, m := range gated {
		if m != key {
			rest = append(rest, m)
		}
	}
	return key, rest, barrier
}

// keyPlan is how the key label changes on a gang: on is made the key (nil: none), off lose it.
type keyPlan struct {
	on  *corev1.Pod
	off []*corev1.Pod
}

// decideKey keeps the key label right on a gang whose release is done or was interrupted (pure):
// while a released member held by the release term waits and no assigned member is still gated
// (a release under way opens the gang itself), some live member (bound or waiting) must be the
// key, and one of the waiting members is made the key when none is (a key member deleted); once
// none waits and no release is under way (an assigned member still gated), the label comes off
// every member that has it, so the gang's next release (a restart, a replacement) is held again.
// all is every pod of the gang.
func decideKey(g *berthv1alpha1.PodGroup, all []*corev1.Pod, nodeOf map[string]string) keyPlan {
	var waiting, keys []*corev1.Pod
	liveKey, underway := false, false
	for _, m := range all {
		if isKey(g, m) {
			keys = append(keys, m)
			if m.DeletionTimestamp == nil && (m.Spec.NodeName != "" || releasedWaiting(m)) {
				liveKey = true
			}
		}
		if releasedWaiting(m) && holdsForKey(g, m) {
			waiting = append(waiting, m)
		}
		if _, assigned := nodeOf[m.Name]; assigned && gateIndex(m) >= 0 {
			underway = true
		}
	}
	switch {
	case underway:
		// The release goes on with its own key, chosen among the members still gated and
		// ungated last; a waiting member made the key now would let the gang bind partly (a
		// release stops between its steps while seats give way).
		return keyPlan{}
	case len(waiting) > 0 && !liveKey:
		return keyPlan{on: waiting[len(waiting)-1]}
	case len(waiting) > 0:
		return keyPlan{}
	}
	return keyPlan{off: keys}
}

// closing are the members of g in all whose key label must come off before a release ungates
// anything: a gated member holds no gang open (pod affinity counts only pods that are bound or
// can bind), an ungated one can, and would let a member the release ungates bind before the
// release's own key.
func closing(g *berthv1alpha1.PodGroup, all []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, m := range all {
		if isKey(g, m) && gateIndex(m) < 0 {
			out = append(out, m)
		}
	}
	return out
}

// actKey writes a keyPlan: the label set on p.on, taken off p.off.
func (r *Reconciler) actKey(ctx context.Context, g *berthv1alpha1.PodGroup, p keyPlan) error {
	errs := make([]error, 0, len(p.off)+1)
	if p.on != nil {
		errs = append(errs, r.setKeyLabel(ctx, p.on, g.Name))
	}
	for _, m := range p.off {
		errs = append(errs, r.setKeyLabel(ctx, m, ""))
	}
	return errors.Join(errs...)
}

// setKeyLabel sets (value non-empty) or removes the key label on a pod with a merge patch sent
// for a bare copy of its name (p may be the cache's own object).
func (r *Reconciler) setKeyLabel(ctx context.Context, p *corev1.Pod, value string) error {
	var v any
	if value != "" {
		v = value
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{berthv1alpha1.ReleaseLabel: v}}})
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
	if err := r.client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("setting the release key label of member %s: %w", p.Name, err)
	}
	return nil
}

// sweepKeys removes the key label from members of PodGroups that no longer exist: a PodGroup
// created again under the same name must not find its gang already open.
func (r *Reconciler) sweepKeys(ctx context.Context, cy *cycle) error {
	var errs []error
	for group, pods := range cy.members {
		if cy.groupByKey(group) != nil {
			continue
		}
		for _, p := range pods {
			if _, ok := p.Labels[berthv1alpha1.ReleaseLabel]; ok {
				errs = append(errs, r.setKeyLabel(ctx, p, ""))
			}
		}
	}
	return errors.Join(errs...)
}
