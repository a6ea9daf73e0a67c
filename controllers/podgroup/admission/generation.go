package admission

import (
	"sort"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// The gang's current generation: the members admitted together (status.assignments) and what
// became of each, and the members that are not part of it yet. Pure: members in, a view out.

// jobCompletionIndex is the annotation (and label) an Indexed Job's pods carry their index in;
// a replacement keeps the index of the pod it replaces.
const jobCompletionIndex = batchv1.JobCompletionIndexAnnotation

// lostMember is an assigned member that is gone without succeeding: failed, evicted, deleted.
type lostMember struct {
	assignment berthv1alpha1.MemberAssignment
	// index is its completion index ("" when it has none or the pod is gone).
	index string
}

// generation classifies a gang's members against its assignments.
type generation struct {
	// assigned are the current generation's assignments.
	assigned []berthv1alpha1.MemberAssignment
	// live are assigned members that exist and have not finished: running, bound, or released
	// and waiting to bind, or (a release interrupted) still gated.
	live []*corev1.Pod
	// succeeded counts assigned members that completed successfully.
	succeeded int
	// lost are assigned members that are gone without succeeding.
	lost []lostMember
	// fresh are members outside the generation that carry berth's gate, are held by no other
	// scheduler's gate, and have not finished: what admission may place.
	fresh []*corev1.Pod
	// held are members outside the generation that another scheduler's gate still holds (a
	// queue has not admitted them): they are not placed, and do not count towards minMember.
	held []*corev1.Pod
}

// classify builds the generation view. members are the gang's pods not being deleted (sorted by
// name); assigned the current assignments.
func classify(members []*corev1.Pod, assigned []berthv1alpha1.MemberAssignment) generation {
	gen := generation{assigned: assigned}
	byUID := map[string]*corev1.Pod{}
	byName := map[string]*corev1.Pod{}
	for _, p := range members {
		byUID[string(p.UID)] = p
		byName[p.Name] = p
	}
	mine := map[*corev1.Pod]bool{}
	for _, a := range assigned {
		p := byName[a.Pod]
		if a.UID != "" {
			p = byUID[string(a.UID)]
		}
		switch {
		case p == nil:
			gen.lost = append(gen.lost, lostMember{assignment: a})
		case p.Status.Phase == corev1.PodSucceeded:
			mine[p] = true
			gen.succeeded++
		case p.Status.Phase == corev1.PodFailed:
			mine[p] = true
			gen.lost = append(gen.lost, lostMember{assignment: a, index: completionIndex(p)})
		default:
			mine[p] = true
			gen.live = append(gen.live, p)
		}
	}
	for _, p := range members {
		if mine[p] || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || gateIndex(p) < 0 {
			continue
		}
		if heldByOthers(p) {
			gen.held = append(gen.held, p)
		} else {
			gen.fresh = append(gen.fresh, p)
		}
	}
	return gen
}

// admitted reports whether the gang has a generation that was admitted.
func (g generation) admitted() bool { return len(g.assigned) > 0 }

// over reports whether the admitted generation has nothing left running or waiting to run.
func (g generation) over() bool { return g.admitted() && len(g.live) == 0 }

// replacementSlots is how many fresh members replace lost ones: the room minMember leaves next
// to the members still live and those that succeeded (a success frees no slot: the member after
// it belongs to the next wave).
func (g generation) replacementSlots(minMember int32) int {
	return max(0, min(len(g.lost), int(minMember)-len(g.live)-g.succeeded))
}

// replacements are the fresh members that take the lost members' slots, those of an Indexed
// Job with a lost member's index first, each paired (by pod name) with the assignment of the
// member it replaces when one is known; rest are the other fresh members.
func (g generation) replacements(minMember int32) (repl []*corev1.Pod, prev map[string]berthv1alpha1.MemberAssignment, rest []*corev1.Pod) {
	slots := g.replacementSlots(minMember)
	prev = map[string]berthv1alpha1.MemberAssignment{}
	lostByIndex := map[string]berthv1alpha1.MemberAssignment{}
	var unindexed []berthv1alpha1.MemberAssignment
	for _, l := range g.lost {
		if l.index != "" {
			lostByIndex[l.index] = l.assignment
		} else {
			unindexed = append(unindexed, l.assignment)
		}
	}
	taken := map[*corev1.Pod]bool{}
	for _, p := range g.fresh {
		if len(repl) == slots {
			break
		}
		if a, ok := lostByIndex[completionIndex(p)]; ok && completionIndex(p) != "" {
			repl, taken[p], prev[p.Name] = append(repl, p), true, a
			delete(lostByIndex, completionIndex(p))
		}
	}
	pending := append(unindexed, sortedAssignments(lostByIndex)...)
	for _, p := range g.fresh {
		if len(repl) == slots {
			break
		}
		if !taken[p] {
			taken[p] = true
			repl = append(repl, p)
			if len(pending) > 0 {
				prev[p.Name], pending = pending[0], pending[1:]
			}
		}
	}
	for _, p := range g.fresh {
		if !taken[p] {
			rest = append(rest, p)
		}
	}
	return repl, prev, rest
}

// sortedAssignments are a map's assignments in index order.
func sortedAssignments(m map[string]berthv1alpha1.MemberAssignment) []berthv1alpha1.MemberAssignment {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, errA := strconv.Atoi(keys[i])
		b, errB := strconv.Atoi(keys[j])
		if errA == nil && errB == nil {
			return a < b
		}
		return keys[i] < keys[j]
	})
	out := make([]berthv1alpha1.MemberAssignment, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

// completionIndex is an Indexed Job pod's index, or "".
func completionIndex(p *corev1.Pod) string {
	if v, ok := p.Annotations[jobCompletionIndex]; ok {
		return v
	}
	return p.Labels[jobCompletionIndex]
}

// heldByOthers reports whether a pod carries a scheduling gate other than berth's: another
// scheduler (Kueue's admission gate, say) has not let it go yet.
func heldByOthers(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name != berthv1alpha1.SchedulingGate {
			return true
		}
	}
	return false
}

// controlled reports whether a pod has a controller that recreates it.
func controlled(p *corev1.Pod) bool { return metav1.GetControllerOf(p) != nil }
