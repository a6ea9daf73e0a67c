package scheduling

// The per-class node filter: which nodes a class of members may use, judged lazily.

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// staticFilter is the filter of the snapshot's nodes for a class: which nodes it may use and
// why the others are ruled out. What a node is (labels, taints, cordon, availability) does not
// change within a snapshot, so results are cached by class key: gangs of the same shape filter
// once. Nodes are judged lazily: placement asks only about the nodes with room for one member
// (withRoom), and only an explanation or a hint asks about every node (all). A seat's class is
// its gang's alone (its affinity names the gang's reservation label); judged on every node, the
// seats of hundreds of gangs waiting on a full cluster matched node affinity a million times a
// cycle to be placed nowhere.
func (s *Snapshot) staticFilter(key string, c *class) *filtered {
	if hit, ok := s.filterCache[key]; ok {
		return hit
	}
	if s.filterCache == nil {
		s.filterCache = map[string]*filtered{}
	}
	f := &filtered{nodes: s.nodes, rep: c.rep, aff: c.aff, vols: c.vols}
	s.filterCache[key] = f
	return f
}

// filtered is a cached staticFilter result, filled as it is asked.
type filtered struct {
	// nodes are the snapshot's; rep, aff and vols the class judged (the first of its key).
	nodes []*NodeState
	rep   *corev1.Pod
	aff   nodeaffinity.RequiredNodeAffinity
	vols  []*nodeaffinity.LazyErrorNodeSelector
	// judged: cands (the nodes the class may use) and rejects (why the others may not) are
	// known.
	judged  bool
	cands   []*NodeState
	rejects rejections
	// roomy are the cands that, by what counts against them in the snapshot, still have room
	// for one such member (once roomyKnown). What counts against a node only grows within a
	// snapshot (Assume, reservations), so a node without room stays without: each gang of this
	// shape need not look at it again. On a full cluster with hundreds of waiting gangs this is
	// most of a cycle.
	roomy      []*NodeState
	roomyKnown bool
}

// all are the nodes the class may use and why the others may not, every node judged.
func (f *filtered) all() ([]*NodeState, rejections) {
	if !f.judged {
		f.judged = true
		f.rejects = rejections{}
		for _, n := range f.nodes {
			if why := staticReject(n, f.rep, f.aff, f.vols); why != "" {
				f.rejects.add(why)
				continue
			}
			f.cands = append(f.cands, n)
		}
	}
	return f.cands, f.rejects
}

// withRoom drops the nodes that no longer have room for one member of c and returns the rest.
// The first time, only nodes with room are judged (unless every node was already).
func (f *filtered) withRoom(c *class) []*NodeState {
	roomFor := func(n *NodeState) bool {
		for _, t := range c.terms {
			if at(n.alloc, t.slot)-at(n.used, t.slot) < t.amt {
				return false
			}
		}
		return true
	}
	if !f.roomyKnown {
		f.roomyKnown = true
		if f.judged {
			f.roomy = slices.Clone(f.cands)
		} else {
			for _, n := range f.nodes {
				if roomFor(n) && staticReject(n, f.rep, f.aff, f.vols) == "" {
					f.roomy = append(f.roomy, n)
				}
			}
			return f.roomy
		}
	}
	f.roomy = slices.DeleteFunc(f.roomy, func(n *NodeState) bool { return !roomFor(n) })
	return f.roomy
}
