package scheduling

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Placement of members with resource claims (DRA): the node order and the allocation loop
// that find, node by node, where the structured allocator can allocate their claims.

// placeDevices places members with resource claims and no rules between pods: each on the
// node greedy's tieBreak would pick (nodes the gang uses, then the fullest, then the name)
// where the structured allocator can allocate its claims. The nodes are ordered once per
// class: placing a member only makes its own node more preferred, so the node that took the
// last member is tried first for the next and a cursor walks the order as nodes fill —
// about one allocation per member, where greedy would scan every node for each.
func (a *attempt) placeDevices(g Gang, c *class, cands []*NodeState) bool {
	full := a.s.dra.fullFor(c.key, len(a.s.nodes))
	order := a.deviceOrder(cands, full)
	need := a.s.dra.devicesNeeded(c.rep)
	next := 0
	for i := 0; i < len(c.members); {
		placed := false
		// Nodes at the cursor that are full for the class are passed for good; a node that
		// only this member cannot use (its allocated claim is elsewhere) stays for the next.
		for j := next; j < order.len() && !placed; j++ {
			n := order.at(j)
			k := min(len(c.members)-i, a.capacity(n, c))
			if k == 0 {
				if j == next {
					next++
				}
				continue
			}
			if c.shares || need == 0 {
				k = 1 // shared claims or requests beyond plain counts: one at a time, as kube-scheduler
			}
			if est := a.s.dra.freeFor(n, need); est >= 0 {
				k = min(k, est)
				if est == 0 && a.dra.untouched(a.s.dra, n) {
					full[n.idx] = true // by plain counts, nothing like the class fits here
				}
			}
			if k == 0 {
				if j == next {
					next++
				}
				continue
			}
			batch := make([]*corev1.Pod, k)
			for b := range batch {
				batch[b] = g.Members[c.members[i+b]]
			}
			allocs, isFull, err := a.s.allocateMany(n, batch, a.dra)
			if err == nil && allocs == nil && k > 1 {
				// Not all of them: one at a time, as kube-scheduler would.
				batch = batch[:1]
				allocs, isFull, err = a.s.allocateMany(n, batch, a.dra)
			}
			if err != nil {
				a.draErr = err
				return false
			}
			if allocs == nil {
				if isFull && a.dra.untouched(a.s.dra, n) {
					full[n.idx] = true
				}
				if isFull && j == next {
					next++
				}
				continue
			}
			for b, p := range batch {
				m := c.members[i+b]
				a.put(n, c, m, p)
				a.allocs[m] = allocs[b]
				a.dra.add(a.s.dra, n, allocs[b])
			}
			i += len(batch)
			placed = true
		}
		if !placed {
			return false
		}
	}
	return true
}

// deviceOrder is cands without those known full for the class, in tieBreak's order: nodes the
// gang uses, then the fullest, then the name. The order is selected lazily (a gang looks at
// the first few nodes of a thousand; sorting them all for every gang was a third of placing
// it), each node's free weight computed once.
// The keys live in the snapshot's scratch buffer (one order is in use at a time: a class is
// placed to the end before the next is ordered), which was a tenth of what placing a DRA gang
// allocated.
func (a *attempt) deviceOrder(cands []*NodeState, full []bool) *lazyOrder {
	d := a.s.dra
	o := &lazyOrder{keys: d.orderBuf[:0]}
	for _, n := range cands {
		if !full[n.idx] {
			_, used := a.used[n]
			o.keys = append(o.keys, orderKey{n: n, used: used, fw: a.freeWeight(n)})
		}
	}
	d.orderBuf = o.keys[:0]
	return o
}

// orderKey is a node with what tieBreak orders it by.
type orderKey struct {
	n    *NodeState
	used bool
	fw   float64
}

func (x orderKey) before(y orderKey) bool {
	if x.used != y.used {
		return x.used
	}
	if x.fw != y.fw {
		return x.fw < y.fw
	}
	return x.n.Name() < y.n.Name()
}

// lazyOrder is a list whose first sorted entries are selected on demand.
type lazyOrder struct {
	keys   []orderKey
	sorted int // keys[:sorted] are the smallest, in order
}

func (o *lazyOrder) len() int { return len(o.keys) }

// at is the j-th node in order (j ≤ how many were asked for before, plus one).
func (o *lazyOrder) at(j int) *NodeState {
	for o.sorted <= j {
		best := o.sorted
		for i := o.sorted + 1; i < len(o.keys); i++ {
			if o.keys[i].before(o.keys[best]) {
				best = i
			}
		}
		o.keys[o.sorted], o.keys[best] = o.keys[best], o.keys[o.sorted]
		o.sorted++
	}
	return o.keys[j].n
}

// allocate picks, of the nodes that fit p otherwise, the first in placement's order (tieBreak)
// where the structured allocator can allocate p's claims against the snapshot's ledger and
// the attempt's own promises. Nodes are tried best first until one succeeds; a node that
// fails on the ledger alone is remembered full for the class, so a member costs about one
// allocation even on a filling cluster.
func (a *attempt) allocate(c *class, p *corev1.Pod, fits []*NodeState) (*NodeState, *draAlloc) {
	full := a.s.dra.fullFor(c.key, len(a.s.nodes))
	fits = slices.DeleteFunc(fits, func(n *NodeState) bool { return full[n.idx] })
	for len(fits) > 0 {
		bi := 0
		for i := 1; i < len(fits); i++ {
			if a.tieBreak(fits[i], fits[bi]) {
				bi = i
			}
		}
		n := fits[bi]
		alloc, isFull, err := a.s.allocateOn(n, p, a.dra)
		if err != nil {
			a.draErr = err
			return nil, nil
		}
		if alloc != nil {
			return n, alloc
		}
		if isFull && a.dra.untouched(a.s.dra, n) {
			full[n.idx] = true
		}
		fits = slices.Delete(fits, bi, bi+1)
	}
	return nil, nil
}
