package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// metadataNameField is the node field a pin selects on.
const metadataNameField = "metadata.name"

// isBarrier reports whether a node label key is a release barrier.
func isBarrier(key string) bool { return strings.HasPrefix(key, berthv1alpha1.BarrierLabelPrefix) }

// barrierKey is the node label of one gang's release barrier.
func barrierKey(g *berthv1alpha1.PodGroup) string {
	return berthv1alpha1.BarrierLabelPrefix + string(g.UID)
}

// pinned reports the node a member was pinned to, if any.
func pinned(p *corev1.Pod) (string, bool) {
	n, ok := p.Annotations[berthv1alpha1.PinnedNodeAnnotation]
	return n, ok
}

// gateIndex is the position of berth's gate in the pod's schedulingGates, or -1.
func gateIndex(p *corev1.Pod) int {
	for i, g := range p.Spec.SchedulingGates {
		if g.Name == berthv1alpha1.SchedulingGate {
			return i
		}
	}
	return -1
}

// withPin returns a copy of p required to run on node: a metadata.name match (and, with a
// barrier, the barrier label) added to every required node-affinity term (or one new term),
// which Kubernetes accepts while the pod is still gated, plus the berthv1alpha1.PinnedNodeAnnotation.
func withPin(p *corev1.Pod, node, barrier string) *corev1.Pod {
	out := p.DeepCopy()
	pin := corev1.NodeSelectorRequirement{Key: metadataNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
	var wait []corev1.NodeSelectorRequirement
	if barrier != "" {
		wait = []corev1.NodeSelectorRequirement{{Key: barrier, Operator: corev1.NodeSelectorOpExists}}
	}
	requireOnNode(out, []corev1.NodeSelectorRequirement{pin}, wait)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[berthv1alpha1.PinnedNodeAnnotation] = node
	return out
}

// pinAndUngate pins a gated member to its node and removes berth's gate in one patch: Kubernetes
// accepts narrowing a pod's node affinity in the very update that removes its gates (what must
// be gated is the pod as it was). The pin names the node barrier when there is one; key, when
// set, makes the member its gang's key member (key.go) in the same patch. Until the gang is
// opened the member still cannot bind. Optimistic lock: a concurrent change (another
// scheduler's gate removed, a user's edit) is retried by the next cycle, never overwritten. A
// member an earlier release pinned but did not ungate only loses its gate (and gains the key).
func (r *Reconciler) pinAndUngate(ctx context.Context, p *corev1.Pod, node, barrier, key string) error {
	if n, ok := pinned(p); ok {
		if n != node {
			return fmt.Errorf("member %s is already pinned to %s, not %s", p.Name, n, node)
		}
		return r.ungate(ctx, p, key)
	}
	out := withPin(p, node, barrier)
	if i := gateIndex(out); i >= 0 {
		out.Spec.SchedulingGates = slices.Delete(out.Spec.SchedulingGates, i, i+1)
	}
	if key != "" {
		if out.Labels == nil {
			out.Labels = map[string]string{}
		}
		out.Labels[berthv1alpha1.ReleaseLabel] = key
	}
	if err := r.client.Patch(ctx, out, client.MergeFromWithOptions(p, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("pinning member %s to %s and removing its gate: %w", p.Name, node, err)
	}
	return nil
}

// ungate removes berth's gate (and, with key set, labels the member its gang's key) with a JSON
// patch that first tests the gate is where we saw it. The patch is sent for a bare copy of the
// pod's name: p may be the cache's own object, which must never receive the response.
func (r *Reconciler) ungate(ctx context.Context, p *corev1.Pod, key string) error {
	i := gateIndex(p)
	if i < 0 {
		return nil
	}
	ops := []map[string]any{
		{"op": "test", "path": fmt.Sprintf("/spec/schedulingGates/%d/name", i), "value": berthv1alpha1.SchedulingGate},
		{"op": "remove", "path": fmt.Sprintf("/spec/schedulingGates/%d", i)},
	}
	if key != "" {
		if p.Labels == nil {
			ops = append(ops, map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{berthv1alpha1.ReleaseLabel: key}})
		} else {
			ops = append(ops, map[string]any{"op": "add", "path": "/metadata/labels/" + strings.ReplaceAll(berthv1alpha1.ReleaseLabel, "/", "~1"), "value": key})
		}
	}
	patch, _ := json.Marshal(ops)
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
	if err := r.client.Patch(ctx, target, client.RawPatch(types.JSONPatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the gate of member %s: %w", p.Name, err)
	}
	return nil
}

// release opens members of gang g onto their assigned nodes so that none can bind before the
// last gate is gone. The members other than the key (key.go) are pinned and ungated, one patch
// each in one parallel burst; the seats give way (seats deleted only now: the release stops
// there and goes on in the cycle their deletion starts); then the key member is pinned, ungated and
// labelled in one patch, which opens every member held by the release term. Members without the
// term are held by the node barrier instead, lifted on the gang's nodes after the key. A key
// label left on an ungated pod (all: every member of the gang and those being deleted still
// labelled) comes off first: an earlier release's key, or a member made the key after a release
// was cut off, would let the members ungated in step 1 bind before the last gate is gone. Every
// step is idempotent, so a restarted controller simply runs it again. Writes: one per member
// (plus two per node where a member needs the node barrier), plus the seats' deletion.
func (r *Reconciler) release(ctx context.Context, g *berthv1alpha1.PodGroup, members, all []*corev1.Pod, nodeOf map[string]string, seats []*corev1.Pod) error {
	p, ok := planRelease(g, members, all, nodeOf)
	if !ok {
		return r.deleteSeats(ctx, seats)
	}
	if err := r.fence(ctx); err != nil {
		return fmt.Errorf("not releasing: %w", err)
	}
	return r.actRelease(ctx, g, p, seats)
}

// releasePlan is a release of a gang's assigned, gated members, in the order it is written.
type releasePlan struct {
	// close: ungated members whose key label comes off first.
	close []*corev1.Pod
	// rest are pinned and ungated next (nothing binds yet); then the seats give way.
	rest []*corev1.Pod
	// key is pinned, ungated and labelled last: it opens the gang (nil: no member holds for
	// the key; the barrier alone holds them).
	key *corev1.Pod
	// barrier is the node barrier the pins name ("" when every member holds for the key),
	// lifted on lift after the key.
	barrier string
	lift    []string
	// nodeOf is each member's node.
	nodeOf map[string]string
}

// planRelease plans the release of members (pure); all is every pod of the gang, for the key
// labels to close. It reports false when no assigned member is gated: nothing to release.
func planRelease(g *berthv1alpha1.PodGroup, members, all []*corev1.Pod, nodeOf map[string]string) (releasePlan, bool) {
	var gated []*corev1.Pod
	for _, m := range members {
		if gateIndex(m) >= 0 {
			if _, ok := nodeOf[m.Name]; ok {
				gated = append(gated, m)
			}
		}
	}
	if len(gated) == 0 {
		return releasePlan{}, false
	}
	p := releasePlan{close: closing(g, all), nodeOf: nodeOf}
	var needsBarrier bool
	p.key, p.rest, needsBarrier = splitKey(g, gated)
	if needsBarrier {
		p.barrier = barrierKey(g)
		nodes := map[string]bool{}
		for _, m := range gated {
			nodes[nodeOf[m.Name]] = true
		}
		p.lift = slices.Sorted(maps.Keys(nodes))
	}
	return p, true
}

// actRelease writes a releasePlan step by step; a step that fails ends it (the next cycle plans
// again from what was written), and so does a seat still to be seen gone.
func (r *Reconciler) actRelease(ctx context.Context, g *berthv1alpha1.PodGroup, p releasePlan, seats []*corev1.Pod) error {
	if err := r.actKey(ctx, g, keyPlan{off: p.close}); err != nil {
		return err
	}
	if faultArmed("mid-release") {
		// For the restart tests: half of the members released, then the process dies.
		gated := append(slices.Clip(p.rest), p.key)
		if p.key == nil {
			gated = p.rest
		}
		for _, m := range gated[:(len(gated)+1)/2] {
			if err := r.pinAndUngate(ctx, m, p.nodeOf[m.Name], p.barrier, ""); err != nil {
				return err
			}
		}
		faultPoint("mid-release")
	}
	// 1. Pin and ungate every member but the key: still nothing binds.
	if err := parallel(p.rest, func(_ int, m *corev1.Pod) error { return r.pinAndUngate(ctx, m, p.nodeOf[m.Name], p.barrier, "") }); err != nil {
		return err
	}
	faultPoint("after-ungate")
	// 2. Seats give way: the capacity they held is the members' now, and nothing binds yet.
	// Seats deleted only now must be seen gone first: the release goes on in the cycle their
	// deletion starts.
	if wait, err := r.giveWay(ctx, seats); err != nil || wait {
		return err
	}
	// 3. The key member opens the gang: kube-scheduler binds it, then the others.
	if p.key != nil {
		if err := r.pinAndUngate(ctx, p.key, p.nodeOf[p.key.Name], p.barrier, g.Name); err != nil {
			return err
		}
	}
	// 4. Lift the node barrier on the gang's nodes for the members without the release term.
	return parallel(p.lift, func(_ int, n string) error { return r.setNodeLabel(ctx, n, p.barrier, true) })
}

// setNodeLabel adds (value "true") or removes a label on a node with a merge patch.
func (r *Reconciler) setNodeLabel(ctx context.Context, node, key string, present bool) error {
	var value any
	if present {
		value = "true"
	}
	if err := r.patchNode(ctx, node, "", map[string]any{key: value}, nil); err != nil {
		return fmt.Errorf("setting label %s: %w", key, err)
	}
	return nil
}

// patchNode merge-patches node's labels and annotations (a nil value removes the key; a nil
// map leaves that field alone), only on the node at resourceVersion rv when rv is set (a node
// changed since answers Conflict). A node that is gone needs nothing.
func (r *Reconciler) patchNode(ctx context.Context, node, rv string, labels, annotations map[string]any) error {
	meta := map[string]any{}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	if labels != nil {
		meta["labels"] = labels
	}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return fmt.Errorf("encoding the patch of node %s: %w", node, err)
	}
	n := &corev1.Node{}
	n.Name = node
	if err := r.client.Patch(ctx, n, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patching node %s: %w", node, err)
	}
	return nil
}

// requireOnNode ANDs the node-field requirements fields and the node-label requirements exprs
// into every required node-affinity term of p (or one new term). p is modified: callers pass a
// copy.
func requireOnNode(p *corev1.Pod, fields, exprs []corev1.NodeSelectorRequirement) {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	if p.Spec.Affinity.NodeAffinity == nil {
		p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := p.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: append([]corev1.NodeSelectorRequirement(nil), fields...), MatchExpressions: append([]corev1.NodeSelectorRequirement(nil), exprs...)}}}
		return
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchFields = append(terms[i].MatchFields, fields...)
		terms[i].MatchExpressions = append(terms[i].MatchExpressions, exprs...)
	}
}

// parallel runs f for every item, at most maxParallelWrites at once, and returns every error,
// joined.
func parallel[T any](items []T, f func(int, T) error) error {
	switch len(items) {
	case 0: // most calls of a settled cycle: nothing to write, nothing to allocate
		return nil
	case 1:
		return f(0, items[0])
	}
	var wg sync.WaitGroup
	errs := make([]error, len(items))
	slots := make(chan struct{}, maxParallelWrites)
	for i, it := range items {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			errs[i] = f(i, it)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// maxParallelWrites bounds the writes parallel has in flight: a gang of hundreds of members
// released at once is hundreds of requests, not hundreds at once (client-go's rate limiter
// would queue them anyway, each goroutine holding its pod).
const maxParallelWrites = 16
