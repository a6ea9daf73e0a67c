package scheduling

import (
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// Shortfall is what existing nodes cannot hold of a gang that does not fit: the members new
// capacity must be found for.
type Shortfall struct {
	// Missing are the members that have no place, in member order.
	Missing []*corev1.Pod
	// Volumes are the Missing members' volume topologies, in the same order: new capacity for
	// a member must be where its volumes are.
	Volumes []VolumeTopology
	// Nodes are the nodes the members that do have a place would use, sorted. New capacity
	// must come from elsewhere: capacity on these nodes is theirs.
	Nodes []string
	// Domain is the topology domain (value of the gang's TopologyKey) that holds the members
	// that do have a place, so new capacity must be added there. Empty when the gang has no
	// topology key or no member has a place: new capacity may then go to any one domain.
	Domain string
	// Hint, when Domain is empty and the gang has a topology key, is the domain new capacity is
	// best asked for in: the one with the most nodes the members could use by what the nodes
	// are (labels, taints, volumes), else the most nodes of any kind. Nodes there show that
	// capacity can be had there. A provisioner that picks a domain for each new node on its own
	// (Karpenter bootstraps a pod-affinity domain per node until one is known) otherwise may
	// spread one gang's new nodes over several domains; a hint is a preference, not a rule.
	Hint string
}

// ComputeShortfall places as many members of g as existing nodes allow (in the best topology
// domain, with the same rules as Place) and returns the rest. A gang that fits has no
// shortfall; one whose members use features placement does not model, whose volumes block a
// member, or that name resource claims other pods may share has no meaningful shortfall
// either, and ok is false for it. Members with claims from templates have one: their seats
// carry copies of the templates.
func ComputeShortfall(s *Snapshot, g Gang) (sf Shortfall, ok bool) {
	if len(g.Members) == 0 {
		return Shortfall{}, false
	}
	for _, m := range g.Members {
		if s.unsupported(m) != "" {
			return Shortfall{}, false
		}
		if namesClaims(m) {
			// A seat carries a member's own claims (copies of its templates), not a claim
			// other pods name: where such a claim is allocated decides where the member goes,
			// and a copy would order devices the member will not use.
			return Shortfall{}, false
		}
	}
	if m, _ := s.blocked(g.Members); m != nil {
		return Shortfall{}, false // new capacity would not help
	}
	classes := s.classify(g.Members)
	domains := []string{""}
	if g.TopologyKey != "" {
		domains = s.domains(g.TopologyKey)
		if len(domains) == 0 {
			// No node carries the key: nothing is placed, everything is missing.
			return Shortfall{Missing: append([]*corev1.Pod(nil), g.Members...)}, true
		}
	}
	var best *attempt
	for _, d := range domains {
		a := s.attempt(g, classes, d, true)
		if best == nil || a.better(best) {
			best = a
		}
	}
	used := map[string]bool{}
	for i, m := range g.Members {
		if best.assigned[i] == nil {
			sf.Missing = append(sf.Missing, m)
			sf.Volumes = append(sf.Volumes, s.volumesOf(m))
		} else if n := best.assigned[i].Name(); !used[n] {
			used[n] = true
			sf.Nodes = append(sf.Nodes, n)
		}
	}
	sort.Strings(sf.Nodes)
	if best.placed > 0 {
		sf.Domain = best.domain
	} else if g.TopologyKey != "" {
		sf.Hint = s.hint(g.TopologyKey, classes)
	}
	return sf, true
}

// hint is the value of key with the most nodes some class of members could use by what the
// nodes are (staticFilter) and could hold one of when empty, or with the most nodes at all when
// none of those carries key; ties go to the first value in order, and "" when no node carries
// key.
func (s *Snapshot) hint(key string, classes []*class) string {
	count := func(nodes []*NodeState) string {
		n := map[string]int{}
		for _, ns := range nodes {
			if v, ok := ns.Node.Labels[key]; ok {
				n[v]++
			}
		}
		best, most := "", 0
		for v, c := range n {
			if v != "" && (c > most || (c == most && v < best)) {
				best, most = v, c
			}
		}
		return best
	}
	var usable []*NodeState
	seen := map[*NodeState]bool{}
	for _, c := range classes {
		for _, ns := range c.cands() {
			if !seen[ns] && holdsOne(ns, c) {
				seen[ns] = true
				usable = append(usable, ns)
			}
		}
	}
	if h := count(usable); h != "" {
		return h
	}
	return count(s.nodes)
}

// ReservePartial keeps the room a gang that does not fit can already use: it places as many
// members as existing nodes allow (as ComputeShortfall does) and counts them against their
// nodes, so gangs placed after it in the same snapshot cannot take that room. It returns how
// many members it placed.
func (s *Snapshot) ReservePartial(g Gang) int {
	if len(g.Members) == 0 {
		return 0
	}
	for _, m := range g.Members {
		if s.unsupported(m) != "" {
			return 0
		}
	}
	if m, _ := s.blocked(g.Members); m != nil {
		return 0
	}
	classes := s.classify(g.Members)
	domains := []string{""}
	if g.TopologyKey != "" {
		if domains = s.domains(g.TopologyKey); len(domains) == 0 {
			return 0
		}
	}
	var best *attempt
	for _, d := range domains {
		a := s.attempt(g, classes, d, true)
		if best == nil || a.better(best) {
			best = a
		}
	}
	for i, m := range g.Members {
		if n := best.assigned[i]; n != nil {
			s.add(s.byName[n.Name()], m, s.requestVec(m))
			if s.dra != nil {
				s.dra.commitFor(m, best.allocs[i])
			}
		}
	}
	return best.placed
}

// ReservePlaced is ReservePartial for a gang Place already found does not fit (in this snapshot,
// or in a copy of it such as Without's): it counts the members Place could place against their
// nodes, without placing again. It returns how many members it reserved.
func (s *Snapshot) ReservePlaced(g Gang, r Result) int {
	if r.Fits() || len(r.partial) != len(g.Members) {
		return 0
	}
	placed := 0
	for i, n := range r.partial {
		if n == nil {
			continue
		}
		if ns, ok := s.byName[n.Name()]; ok {
			s.add(ns, g.Members[i], s.requestVec(g.Members[i]))
			if s.dra != nil && len(r.dra) == len(g.Members) {
				s.dra.commitFor(g.Members[i], r.dra[i])
			}
			placed++
		}
	}
	return placed
}

// Without is a copy of the snapshot in which the given pods no longer count against their
// nodes, nor the devices their own resource claims hold in the device ledger: the capacity a
// gang's own seat pods hold is free for that gang.
func (s *Snapshot) Without(pods []*corev1.Pod) *Snapshot {
	if len(pods) == 0 {
		return s
	}
	drop := make(map[*corev1.Pod]bool, len(pods))
	for _, p := range pods {
		drop[p] = true
	}
	c := s.Clone()
	for _, n := range c.nodes {
		kept := n.pods[:0]
		for _, p := range n.pods {
			if !drop[p] {
				kept = append(kept, p)
				continue
			}
			req := c.requestVec(p)
			n.used = c.ri.grow(n.used)
			for i, v := range req {
				n.used[i] -= v
			}
		}
		n.pods = kept
	}
	c.antiPods = slices.DeleteFunc(c.antiPods, func(ap antiPod) bool { return drop[ap.pod] })
	if c.dra != nil {
		c.dra.release(pods)
	}
	return c
}

// Holding are those of pods that count against a node of the snapshot — bound, assumed or
// reserved there — in their order. A pod placed nowhere (a seat whose node has not registered
// yet) holds no room the snapshot knows of.
func (s *Snapshot) Holding(pods []*corev1.Pod) []*corev1.Pod {
	want := make(map[*corev1.Pod]bool, len(pods))
	for _, p := range pods {
		want[p] = true
	}
	held := map[*corev1.Pod]bool{}
	for _, n := range s.nodes {
		for _, p := range n.pods {
			if want[p] {
				held[p] = true
			}
		}
	}
	var out []*corev1.Pod
	for _, p := range pods {
		if held[p] {
			out = append(out, p)
		}
	}
	return out
}

// holdsOne reports whether node n, empty, has room for one member of class c.
func holdsOne(n *NodeState, c *class) bool {
	for _, t := range c.terms {
		if at(n.alloc, t.slot) < t.amt {
			return false
		}
	}
	return true
}
