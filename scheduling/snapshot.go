package scheduling

import (
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// PodOnNode is a pod that counts against a node: bound to it, or promised it (pinned to it by
// an admission that kube-scheduler has not bound yet).
type PodOnNode struct {
	Pod  *corev1.Pod
	Node string
}

// RequestLookup returns a pod's requests as the caller keeps them (per pod version, across
// snapshots), or nil when it has none.
type RequestLookup func(*corev1.Pod) *Requests

// Requests are one pod version's PodRequests as a caller keeps them across snapshots, with the
// vector a snapshot of the caller's Layout converted them to (kept with them: converting every
// pod's requests was a third of building a snapshot at 10,000 pods). Not safe for concurrent use.
type Requests struct {
	list   corev1.ResourceList
	layout *resIndex
	v      vec
	// keys are the pod's class keys (without, with its labels), on first use: a pod version's
	// key never changes, and building it was most of a cycle's garbage with gangs waiting.
	keys [2]string
}

// NewRequests computes p's requests (PodRequests) for a caller to keep.
func NewRequests(p *corev1.Pod) *Requests { return &Requests{list: PodRequests(p)} }

// List is the requests as a ResourceList; never modified.
func (r *Requests) List() corev1.ResourceList { return r.list }

// Layout is the order of resources in the vectors of the snapshots built with it, shared by
// them so that Requests converted once serve every later snapshot. It only grows (a new
// resource takes the next slot). Not safe for concurrent use: one caller's snapshots at a time.
type Layout struct{ ri *resIndex }

// NewLayout is an empty Layout.
func NewLayout() *Layout { return &Layout{ri: newResIndex()} }

// NodeState is one node as placement sees it.
type NodeState struct {
	// Node is the API object (labels, taints, unschedulable); never modified.
	Node *corev1.Node
	// Unavailable, when not empty, says why no new member may go here (not Ready, GPU
	// unhealthy, being deleted…); set by the caller.
	Unavailable string

	idx   int
	alloc vec
	used  vec
	pods  []*corev1.Pod
}

// Name is the node's name.
func (n *NodeState) Name() string { return n.Node.Name }

// Snapshot is the cluster state a placement decides on. It is not safe for concurrent use;
// copy it (Clone) to simulate without committing.
type Snapshot struct {
	ri          *resIndex
	nodes       []*NodeState
	byName      map[string]*NodeState
	filterCache map[string]*filtered
	domainCache map[string][]string
	// volumes are pods' volume topologies by VolumeKey (SetVolumes); read-only, shared by clones.
	volumes map[string]VolumeTopology
	// antiPods are the pods with required anti-affinity, whose rules placement must honour too.
	antiPods []antiPod
	// lookup finds pods' requests before they are computed (nil: always computed).
	lookup RequestLookup
	// shared: ri is a Layout's, and vectors converted in it may be kept in Requests.
	shared bool
	// dra are the cluster's dynamic resources and the device ledger (nil: not given;
	// members with resource claims are then unsupported).
	dra *draState
}

// NewSnapshot builds a snapshot from nodes and the pods that count against them. Pods on
// nodes that are not in the list are ignored; terminated pods (Succeeded/Failed) free their
// capacity, as in kube-scheduler. unavailable maps node names to why they may not take new
// members. Nodes are kept in name order so results are deterministic.
func NewSnapshot(nodes []*corev1.Node, pods []PodOnNode, unavailable map[string]string) *Snapshot {
	return NewSnapshotWithRequests(nodes, pods, unavailable, nil, nil)
}

// NewSnapshotWithRequests is NewSnapshot where pods' requests (of the pods given and of the
// members placed later) are looked up first and only computed when lookup has none, in
// layout's resource order (nil: the snapshot's own).
func NewSnapshotWithRequests(nodes []*corev1.Node, pods []PodOnNode, unavailable map[string]string, lookup RequestLookup, layout *Layout) *Snapshot {
	s := &Snapshot{ri: newResIndex(), byName: make(map[string]*NodeState, len(nodes)), lookup: lookup}
	if layout != nil {
		s.ri, s.shared = layout.ri, true
	}
	sorted := append([]*corev1.Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	// Node states, their vectors and their pod lists each come from one allocation (a snapshot
	// is built every admission cycle: per-node allocations were most of its garbage). Every
	// sub-slice is capped, so a node that grows reallocates its own and never a neighbour's.
	for _, n := range sorted {
		s.ri.addAll(n.Status.Allocatable)
	}
	states := make([]NodeState, len(sorted))
	width := len(s.ri.names)
	vecs := make(vec, 2*width*len(sorted))
	s.nodes = make([]*NodeState, len(sorted))
	for i, n := range sorted {
		ns := &states[i]
		off := 2 * width * i
		*ns = NodeState{Node: n, Unavailable: unavailable[n.Name], idx: i,
			alloc: vecs[off : off+width : off+width], used: vecs[off+width : off+2*width : off+2*width]}
		s.ri.fill(ns.alloc, n.Status.Allocatable)
		if n.DeletionTimestamp != nil && ns.Unavailable == "" {
			ns.Unavailable = "node is being deleted"
		}
		s.nodes[i] = ns
		s.byName[n.Name] = ns
	}
	on := make([]int32, len(pods)) // the node index of each pod that counts, -1 for the others
	counts := make([]int, len(s.nodes))
	for i, pn := range pods {
		on[i] = -1
		if pn.Pod.Status.Phase == corev1.PodSucceeded || pn.Pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if ns, ok := s.byName[pn.Node]; ok {
			on[i] = int32(ns.idx)
			counts[ns.idx]++
		}
	}
	slab := make([]*corev1.Pod, 0, len(pods))
	for i, ns := range s.nodes {
		ns.pods = slab[len(slab) : len(slab) : len(slab)+counts[i]]
		slab = slab[:len(slab)+counts[i]]
	}
	for i, pn := range pods {
		if on[i] >= 0 {
			s.add(s.nodes[on[i]], pn.Pod, s.requestVec(pn.Pod))
		}
	}
	return s
}

// requestsOf is p's PodRequests, looked up when the caller keeps them.
func (s *Snapshot) requestsOf(p *corev1.Pod) corev1.ResourceList {
	if s.lookup != nil {
		if req := s.lookup(p); req != nil {
			return req.list
		}
	}
	return podRequests(p)
}

// requestVec is p's requests as a vector in the snapshot's slots: the one kept with the
// caller's Requests when it was converted in these slots, else converted now (and kept, when
// the snapshot's slots are the shared Layout's).
func (s *Snapshot) requestVec(p *corev1.Pod) vec {
	if s.lookup == nil {
		return s.ri.vecOf(podRequests(p))
	}
	req := s.lookup(p)
	if req == nil {
		return s.ri.vecOf(podRequests(p))
	}
	if req.v != nil && (req.layout == s.ri || req.layout.prefixOfLen(s.ri, len(req.v))) {
		return req.v
	}
	v := s.ri.vecOf(req.list)
	if s.shared {
		req.layout, req.v = s.ri, v
	}
	return v
}

func (s *Snapshot) add(ns *NodeState, p *corev1.Pod, req vec) {
	ns.alloc = s.ri.grow(ns.alloc)
	ns.used = s.ri.grow(ns.used)
	for i, a := range req {
		ns.used[i] += a
	}
	ns.pods = append(ns.pods, p)
	if terms := compileAnti(p); len(terms) > 0 {
		s.antiPods = append(s.antiPods, antiPod{pod: p, node: ns.idx, terms: terms})
	}
}

// Nodes are the snapshot's nodes in name order.
func (s *Snapshot) Nodes() []*NodeState { return s.nodes }

// Node finds a node by name.
func (s *Snapshot) Node(name string) (*NodeState, bool) {
	n, ok := s.byName[name]
	return n, ok
}

// Free is what is left of a resource on a node, in the resource's usual units rounded down
// (milli-units for cpu is "m": Free(n, "cpu") returns cores).
func (s *Snapshot) Free(node string, name corev1.ResourceName) int64 {
	ns, ok := s.byName[node]
	if !ok {
		return 0
	}
	i, ok := s.ri.slot[name]
	if !ok {
		return 0
	}
	return (at(ns.alloc, i) - at(ns.used, i)) / 1000
}

func at(v vec, i int) int64 {
	if i < len(v) {
		return v[i]
	}
	return 0
}

// Assume records a placement in the snapshot: each member's requests count against its node
// from now on, as if it were bound. The PodGroup controller assumes a gang as it admits it.
func (s *Snapshot) Assume(members []*corev1.Pod, r Result) error {
	if !r.Fits() {
		return fmt.Errorf("assuming a placement that does not fit: %s", r.Reason)
	}
	byName := make(map[string]*corev1.Pod, len(members))
	for _, m := range members {
		byName[m.Name] = m
	}
	for i, a := range r.Assignments {
		ns, ok := s.byName[a.Node]
		if !ok {
			return fmt.Errorf("assumed node %s is not in the snapshot", a.Node)
		}
		p, ok := byName[a.Pod]
		if !ok {
			return fmt.Errorf("assumed member %s is not in the gang", a.Pod)
		}
		var req vec
		if len(r.reqs) == len(r.Assignments) && members[i] == p && r.layout.prefixOf(s.ri) {
			req = r.reqs[i] // counted by Place for this very pod, in this snapshot's slots
		} else {
			req = s.requestVec(p)
		}
		s.add(ns, p, req)
		if s.dra != nil && len(r.dra) == len(r.Assignments) {
			s.dra.commitFor(p, r.dra[i])
		}
	}
	return nil
}

// Clone copies the snapshot so a placement can be simulated without touching the original.
func (s *Snapshot) Clone() *Snapshot {
	c := &Snapshot{ri: &resIndex{slot: make(map[corev1.ResourceName]int, len(s.ri.slot)), names: append([]corev1.ResourceName(nil), s.ri.names...)},
		byName: make(map[string]*NodeState, len(s.nodes)), volumes: s.volumes, antiPods: slices.Clone(s.antiPods), lookup: s.lookup}
	if s.dra != nil {
		c.dra = s.dra.clone()
	}
	for k, v := range s.ri.slot {
		c.ri.slot[k] = v
	}
	for _, n := range s.nodes {
		cn := &NodeState{Node: n.Node, Unavailable: n.Unavailable, idx: n.idx, alloc: append(vec(nil), n.alloc...),
			used: append(vec(nil), n.used...), pods: append([]*corev1.Pod(nil), n.pods...)}
		c.nodes = append(c.nodes, cn)
		c.byName[cn.Node.Name] = cn
	}
	return c
}
