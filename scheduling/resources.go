package scheduling

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// vec is a resource vector in milli-units, indexed by a resIndex.
type vec []int64

// resIndex assigns each resource name a slot in vec.
type resIndex struct {
	slot  map[corev1.ResourceName]int
	names []corev1.ResourceName
}

func newResIndex() *resIndex {
	ri := &resIndex{slot: map[corev1.ResourceName]int{}}
	ri.add(corev1.ResourcePods) // slot 0: every pod takes one
	return ri
}

func (ri *resIndex) add(name corev1.ResourceName) int {
	if i, ok := ri.slot[name]; ok {
		return i
	}
	ri.slot[name] = len(ri.names)
	ri.names = append(ri.names, name)
	return len(ri.names) - 1
}

// prefixOf reports whether a vector in ri's slots means the same in other's: other is ri, or
// has ri's names in ri's order first (a clone that has grown since). A placement made on one
// snapshot is replayed on another whose index was built in a different order.
func (ri *resIndex) prefixOf(other *resIndex) bool {
	if ri == other {
		return true
	}
	if ri == nil || len(ri.names) > len(other.names) {
		return false
	}
	for i, n := range ri.names {
		if other.names[i] != n {
			return false
		}
	}
	return true
}

// prefixOfLen reports whether a vector of n slots in ri's order means the same in other's: their
// first n names are the same.
func (ri *resIndex) prefixOfLen(other *resIndex, n int) bool {
	if ri == nil || n > len(ri.names) || n > len(other.names) {
		return false
	}
	return slices.Equal(ri.names[:n], other.names[:n])
}

// vecOf converts a ResourceList, adding unseen names to the index.
func (ri *resIndex) vecOf(l corev1.ResourceList) vec {
	ri.addAll(l)
	v := make(vec, len(ri.names))
	ri.fill(v, l)
	return v
}

// addAll adds l's names the index has not seen.
func (ri *resIndex) addAll(l corev1.ResourceList) {
	for name := range l {
		ri.add(name)
	}
}

// fill converts l into v, which has a slot for each of l's names.
func (ri *resIndex) fill(v vec, l corev1.ResourceList) {
	for name, q := range l {
		v[ri.slot[name]] = q.MilliValue()
	}
}

// grow pads v to the index's current size (in one allocation when it must).
func (ri *resIndex) grow(v vec) vec {
	if n := len(ri.names); len(v) < n {
		v = append(v, make(vec, n-len(v))...)
	}
	return v
}

// term is one non-zero entry of a sparse request.
type term struct {
	slot int
	amt  int64
}

// podRequests is what kube-scheduler counts against a node for this pod: the larger of the
// sum of app containers (plus restartable init containers) and the largest init container,
// plus pod overhead, plus one pod.
// PodRequests are what a pod counts against its node, as placement (and kube-scheduler) counts
// them: containers, init containers and sidecars, overhead, and one pod. Callers that keep it
// per pod version pass it back in PodOnNode.Requests so a snapshot need not compute it again.
func PodRequests(p *corev1.Pod) corev1.ResourceList { return podRequests(p) }

func podRequests(p *corev1.Pod) corev1.ResourceList {
	reqs := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	out := make(corev1.ResourceList, len(reqs)+1)
	for name, q := range reqs {
		if !q.IsZero() {
			out[name] = q
		}
	}
	out[corev1.ResourcePods] = *resourceOne()
	return out
}

func resourceOne() *resource.Quantity { return resource.NewQuantity(1, resource.DecimalSI) }
