package scheduling

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Gang is what to place: every member, all or nothing.
type Gang struct {
	// Members are the member pods, in a stable order (e.g. by name).
	Members []*corev1.Pod
	// TopologyKey, when set, puts every member on nodes sharing one value of this node label.
	TopologyKey string
}

// Assignment places one member on one node.
type Assignment struct {
	Pod  string
	Node string
}

// Result is a placement decision: either Assignments for every member, or a Reason.
type Result struct {
	// Assignments hold one node per member when the gang fits, in member order.
	Assignments []Assignment
	// Domain is the value of the gang's topology key that was chosen.
	Domain string
	// Reason says why the gang does not fit, for a human; empty when it fits.
	Reason string
	// Unsupported is true when a member uses something placement does not model.
	Unsupported bool
	// Blocked is true when a member's volumes keep it from being placed anywhere yet (see
	// VolumeTopology.Blocked): new capacity would not help.
	Blocked bool
	// Placeable is how many members the best attempt could place (all of them when it fits).
	Placeable int

	// reqs are the members' requests as placement counted them, for Assume, in the slots of
	// layout (the resource index of the snapshot that placed them).
	reqs   []vec
	layout *resIndex
	// partial are, when the gang does not fit, the nodes of the members the best attempt could
	// place (nil for the others), for ReservePlaced.
	partial []*NodeState
	// dra are the members' device allocations (nil for members without claims), for Assume
	// and ReservePlaced to count in the snapshot's ledger.
	dra []*draAlloc
}

// Fits reports whether every member was placed.
func (r Result) Fits() bool { return r.Reason == "" }

// Unplaced are the members of g (the gang r places) that r gives no node: none when it fits,
// those the best attempt could not place when it does not, every member when placement did
// not try (an unsupported or blocked member).
func (r Result) Unplaced(g Gang) []*corev1.Pod {
	switch {
	case r.Fits():
		return nil
	case len(r.partial) != len(g.Members):
		return g.Members
	}
	var out []*corev1.Pod
	for i, n := range r.partial {
		if n == nil {
			out = append(out, g.Members[i])
		}
	}
	return out
}

// Nodes are the distinct nodes of the assignments, sorted.
func (r Result) Nodes() []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range r.Assignments {
		if !seen[a.Node] {
			seen[a.Node] = true
			out = append(out, a.Node)
		}
	}
	sort.Strings(out)
	return out
}

// class is a set of members that placement cannot tell apart.
type class struct {
	members []int
	rep     *corev1.Pod
	req     vec
	terms   []term
	aff     nodeaffinity.RequiredNodeAffinity
	vols    []*nodeaffinity.LazyErrorNodeSelector
	slow    bool // depends on where other pods run (inter-pod rules, host ports, devices)
	dra     bool // has resource claims: placed where the structured allocator can allocate them
	rules   bool // has inter-pod rules or host ports
	shares  bool // names resource claims other pods may name too
	key     string
	// filter is the snapshot's cached filter result for members like these.
	filter *filtered
}

// cands are the nodes members of c may use, every node judged.
func (c *class) cands() []*NodeState {
	cands, _ := c.filter.all()
	return cands
}

// rejects say why the other nodes may not be used.
func (c *class) rejects() rejections {
	_, rej := c.filter.all()
	return rej
}

// Place decides where every member of the gang goes, without changing the snapshot.
func Place(s *Snapshot, g Gang) Result { return place(s, g, true) }

// PlaceUnexplained is Place for a caller that only wants where members go: a gang that does
// not fit gets a short Reason, not the explanation, which judges every node for every class
// (admission placing seats not bound yet, whose classes are each their gang's alone).
func PlaceUnexplained(s *Snapshot, g Gang) Result { return place(s, g, false) }

// unexplained is the Reason PlaceUnexplained gives a gang that does not fit.
const unexplained = "the gang does not fit"

func place(s *Snapshot, g Gang, explain bool) Result {
	if len(g.Members) == 0 {
		return Result{Reason: "the gang has no members"}
	}
	for _, m := range g.Members {
		if why := s.unsupported(m); why != "" {
			return Result{Reason: fmt.Sprintf("member %s %s, which berth's placement does not model; berth will not pin it where kube-scheduler might refuse it", m.Name, why), Unsupported: true}
		}
	}
	if m, why := s.blocked(g.Members); m != nil {
		return Result{Reason: fmt.Sprintf("member %s %s", m.Name, why), Blocked: true}
	}
	classes := s.classify(g.Members)
	domains := []string{""}
	if g.TopologyKey != "" {
		domains = s.domains(g.TopologyKey)
		if len(domains) == 0 {
			return Result{Reason: fmt.Sprintf("no node has the label %s that the gang's topology.requiredKey names", g.TopologyKey)}
		}
	}
	// Every attempt places all the members it can (not only up to the first class that does
	// not fit): a gang that does not fit then knows the room it can already use (ReservePlaced).
	var best *attempt
	for _, d := range domains {
		a := s.attempt(g, classes, d, true)
		if best == nil || a.better(best) {
			best = a
		}
	}
	if best.placed == len(g.Members) {
		r := Result{Domain: best.domain, Placeable: best.placed, Assignments: make([]Assignment, len(g.Members)), reqs: make([]vec, len(g.Members)), layout: s.ri, dra: best.allocs}
		for i, m := range g.Members {
			r.Assignments[i] = Assignment{Pod: m.Name, Node: best.assigned[i].Name()}
		}
		for _, c := range classes {
			for _, m := range c.members {
				r.reqs[m] = c.req
			}
		}
		return r
	}
	reason := unexplained
	if explain {
		reason = s.explain(g, classes, best, len(domains))
	}
	return Result{Reason: reason, Placeable: best.placed, partial: best.assigned, dra: best.allocs}
}

// classify groups members that ask for the same things. Labels matter when some member has
// inter-pod rules (members may then select each other; they are placed one by one) or some pod
// in the snapshot has anti-affinity (which may repel some members and not others); members
// with host ports are placed one by one, as they may exclude each other from a node.
func (s *Snapshot) classify(members []*corev1.Pod) []*class {
	gangRules := false
	for _, m := range members {
		if hasInterPodRules(m) {
			gangRules = true
		}
	}
	labelsMatter := gangRules || len(s.antiPods) > 0
	byKey := map[string]*class{}
	var out []*class
	for i, m := range members {
		reqs := s.requestsOf(m)
		vt := s.volumesOf(m)
		key := s.podKey(m, reqs, labelsMatter)
		if vk := volumesKey(vt); vk != "" {
			key += vk
		}
		key += draKey(m)
		c, ok := byKey[key]
		if !ok {
			c = &class{key: key, rep: m, req: s.ri.vecOf(reqs), aff: nodeaffinity.GetRequiredNodeAffinity(m), vols: volumeSelectors(vt),
				slow: gangRules || portsKey(m) != "" || len(m.Spec.ResourceClaims) > 0, dra: len(m.Spec.ResourceClaims) > 0,
				rules: gangRules || portsKey(m) != "", shares: namesClaims(m)}
			byKey[key] = c
			out = append(out, c)
			c.filter = s.staticFilter(key, c)
		}
		c.members = append(c.members, i)
	}
	for _, c := range out {
		c.req = s.ri.grow(c.req)
		for i, a := range c.req {
			if a > 0 {
				c.terms = append(c.terms, term{slot: i, amt: a})
			}
		}
	}
	// Biggest members first: they are the hardest to fit.
	sort.SliceStable(out, func(i, j int) bool { return s.weight(out[i].req) > s.weight(out[j].req) })
	return out
}

// weight orders requests: accelerators and other extended resources first, then cpu, memory.
func (s *Snapshot) weight(v vec) float64 {
	var w float64
	for i, a := range v {
		w += weightOf(s.ri.names[i], a)
	}
	return w
}

func weightOf(name corev1.ResourceName, milli int64) float64 {
	switch name {
	case corev1.ResourcePods:
		return 0
	case corev1.ResourceCPU:
		return float64(milli) / 1e3
	case corev1.ResourceMemory:
		return float64(milli) / 1e3 / (1 << 30)
	default:
		return float64(milli) / 1e3 * 1e6
	}
}

// podKey is the part of p's class key that depends on p alone: classKey, then its host ports,
// each followed by "|" (the volumes' key, which depends on the claims, follows). It is kept
// with the Requests the caller keeps for p's version, and computed when there are none.
func (s *Snapshot) podKey(p *corev1.Pod, reqs corev1.ResourceList, withLabels bool) string {
	var req *Requests
	if s.lookup != nil {
		req = s.lookup(p)
	}
	i := 0
	if withLabels {
		i = 1
	}
	if req != nil && req.keys[i] != "" {
		return req.keys[i]
	}
	k := classKey(p, reqs, withLabels) + "|" + portsKey(p) + "|"
	if req != nil {
		req.keys[i] = k
	}
	return k
}

// classKey encodes what placement reads of a pod besides its ports and volumes: namespace,
// requests, node selector, tolerations, affinity and spread (and its labels, where inter-pod
// rules make them matter). Members with one key are placed as one class.
func classKey(p *corev1.Pod, reqs corev1.ResourceList, withLabels bool) string {
	var b strings.Builder
	b.WriteString(p.Namespace)
	b.WriteByte('|')
	writeSorted(&b, len(reqs), func(yield func(string)) {
		for name, q := range reqs {
			yield(string(name) + "=" + strconv.FormatInt(q.MilliValue(), 10))
		}
	})
	writeSorted(&b, len(p.Spec.NodeSelector), func(yield func(string)) {
		for k, v := range p.Spec.NodeSelector {
			yield(k + "=" + v)
		}
	})
	for _, t := range p.Spec.Tolerations {
		secs := "-"
		if t.TolerationSeconds != nil {
			secs = strconv.FormatInt(*t.TolerationSeconds, 10)
		}
		fmt.Fprintf(&b, "%s/%s/%s/%s/%s;", t.Key, t.Operator, t.Value, t.Effect, secs)
	}
	b.WriteByte('|')
	if group, only := onlyReleaseTerm(p); only {
		// Every member the pod gate holds carries it: the common case stays cheap.
		b.WriteString("release=" + group)
	} else if p.Spec.Affinity != nil || len(p.Spec.TopologySpreadConstraints) > 0 {
		// Rare enough that an exact encoding is worth its cost.
		data, _ := json.Marshal(struct {
			A *corev1.Affinity
			S []corev1.TopologySpreadConstraint
		}{p.Spec.Affinity, p.Spec.TopologySpreadConstraints})
		b.Write(data)
	}
	if withLabels {
		b.WriteByte('|')
		writeSorted(&b, len(p.Labels), func(yield func(string)) {
			for k, v := range p.Labels {
				yield(k + "=" + v)
			}
		})
	}
	return b.String()
}

// onlyReleaseTerm reports whether berth's release term is all the affinity and spread p has.
func onlyReleaseTerm(p *corev1.Pod) (string, bool) {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity != nil || a.PodAntiAffinity != nil || len(p.Spec.TopologySpreadConstraints) > 0 ||
		a.PodAffinity == nil || len(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 ||
		len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		return "", false
	}
	return berthv1alpha1.ReleaseGroup(p)
}

// writeSorted writes the strings produced by gen in sorted order, then a separator.
func writeSorted(b *strings.Builder, n int, gen func(yield func(string))) {
	items := make([]string, 0, n)
	gen(func(s string) { items = append(items, s) })
	sort.Strings(items)
	for _, it := range items {
		b.WriteString(it)
		b.WriteByte(';')
	}
	b.WriteByte('|')
}

// domainOf is the value of a node label per node index ("" where absent), cached per key.
func (s *Snapshot) domainOf(key string) []string {
	if d, ok := s.domainCache[key]; ok {
		return d
	}
	d := make([]string, len(s.nodes))
	for i, n := range s.nodes {
		d[i] = n.Node.Labels[key]
	}
	if s.domainCache == nil {
		s.domainCache = map[string][]string{}
	}
	s.domainCache[key] = d
	return d
}

// domains lists the values of key on nodes, sorted.
func (s *Snapshot) domains(key string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range s.nodes {
		if v, ok := n.Node.Labels[key]; ok && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// attempt is one try at placing the gang in one topology domain.
type attempt struct {
	domain   string
	assigned []*NodeState
	placed   int
	used     map[*NodeState]vec // extra use on top of the snapshot
	view     *podView
	failed   *class // first class that did not fit
	s        *Snapshot
	// dra is what the attempt promised of the snapshot's devices, allocs each member's share
	// (nil without claims), draErr why an allocation could not even be tried (invalid claims).
	dra    *draExtra
	allocs []*draAlloc
	draErr error
}

func (a *attempt) free(n *NodeState, slot int) int64 {
	return at(n.alloc, slot) - at(n.used, slot) - at(a.used[n], slot)
}

// capacity is how many members of c still fit on n by resources alone.
func (a *attempt) capacity(n *NodeState, c *class) int {
	k := int(^uint(0) >> 1)
	extra := a.used[n]
	for _, t := range c.terms {
		k = min(k, int((at(n.alloc, t.slot)-at(n.used, t.slot)-at(extra, t.slot))/t.amt))
		if k <= 0 {
			return 0
		}
	}
	return k
}

func (a *attempt) put(n *NodeState, c *class, member int, p *corev1.Pod) {
	u := a.used[n]
	if u == nil {
		u = make(vec, len(a.s.ri.names))
	}
	for _, t := range c.terms {
		u[t.slot] += t.amt
	}
	a.used[n] = u
	a.assigned[member] = n
	a.placed++
	a.view.extra[n] = append(a.view.extra[n], p)
}

// stranded is the accelerator and cpu capacity left free on the nodes the attempt uses: less
// is tighter packing.
func (a *attempt) stranded() float64 {
	var w float64
	for n := range a.used {
		left := make(vec, len(a.s.ri.names))
		for i := range left {
			left[i] = max(0, a.free(n, i))
		}
		w += a.s.weight(left)
	}
	return w
}

// better orders attempts: more members placed, then fewer nodes, then less stranded capacity,
// then the domain name (determinism).
func (a *attempt) better(b *attempt) bool {
	if a.placed != b.placed {
		return a.placed > b.placed
	}
	if len(a.used) != len(b.used) {
		return len(a.used) < len(b.used)
	}
	sa, sb := a.stranded(), b.stranded()
	if sa != sb {
		return sa < sb
	}
	return a.domain < b.domain
}

// attempt places the gang inside one domain; with keepGoing it places every member it can
// instead of stopping at the first class that does not fit.
func (s *Snapshot) attempt(g Gang, classes []*class, domain string, keepGoing bool) *attempt {
	a := &attempt{domain: domain, s: s, assigned: make([]*NodeState, len(g.Members)), used: map[*NodeState]vec{},
		view: &podView{extra: map[*NodeState][]*corev1.Pod{}}, dra: &draExtra{}, allocs: make([]*draAlloc, len(g.Members))}
	// The attempt's devices leave the ledger when it ends: Place does not change the
	// snapshot, Assume and the reservations commit the allocations they keep.
	defer a.dra.undo(s.dra, 0)
	for _, c := range classes {
		cands := c.filter.withRoom(c)
		if domain != "" {
			dom := s.domainOf(g.TopologyKey)
			all := cands
			cands = make([]*NodeState, 0, len(all))
			for _, n := range all {
				if dom[n.idx] == domain {
					cands = append(cands, n)
				}
			}
		}
		// Who may go where by the rules of pods (the class's own, and the anti-affinity of
		// pods already running), counted once for the class.
		var ip *interPod
		if c.slow || len(s.antiPods) > 0 {
			ip = a.interPodFor(c)
		}
		var ok bool
		if c.dra && !c.rules && ip == nil {
			ok = a.placeDevices(g, c, cands)
		} else if c.slow {
			ok = a.placeOneByOne(g, c, cands, ip)
		} else {
			if ip != nil {
				cands = slices.DeleteFunc(slices.Clone(cands), func(n *NodeState) bool { return !ip.allows(n) })
			}
			ok = a.placeInBulk(g, c, cands)
		}
		if !ok {
			if a.failed == nil {
				a.failed = c
			}
			if !keepGoing {
				return a
			}
		}
	}
	return a
}

// placeInBulk places members that do not depend on each other: fill the node that takes the
// most of them, and finish on the node that takes the rest most tightly ("largest first,
// best fit last"), so a gang lands on as few nodes as possible with little left stranded.
func (a *attempt) placeInBulk(g Gang, c *class, cands []*NodeState) bool {
	next := 0
	for next < len(c.members) {
		remaining := len(c.members) - next
		var pick bulkCand
		for _, n := range cands {
			k := a.capacity(n, c)
			if k == 0 {
				continue
			}
			cand := bulkCand{n: n, k: k, fw: -1}
			if pick.n == nil || a.preferBulk(&cand, &pick, remaining) {
				pick = cand
			}
		}
		if pick.n == nil {
			return false
		}
		for i := 0; i < min(pick.k, remaining); i++ {
			m := c.members[next]
			a.put(pick.n, c, m, g.Members[m])
			next++
		}
	}
	return true
}

// bulkCand is a candidate node with how many members it takes; fw caches its free weight
// (-1 until computed).
type bulkCand struct {
	n  *NodeState
	k  int
	fw float64
}

// preferBulk: a node that takes all remaining members beats one that does not; among those, the
// tightest fit; otherwise the node that takes the most. Ties go to nodes the gang already
// uses, then to fuller nodes, then to the name.
func (a *attempt) preferBulk(n, p *bulkCand, remaining int) bool {
	nAll, pAll := n.k >= remaining, p.k >= remaining
	if nAll != pAll {
		return nAll
	}
	if nAll && n.k != p.k {
		return n.k < p.k
	}
	if !nAll && n.k != p.k {
		return n.k > p.k
	}
	_, nUsed := a.used[n.n]
	_, pUsed := a.used[p.n]
	if nUsed != pUsed {
		return nUsed
	}
	if n.fw < 0 {
		n.fw = a.freeWeight(n.n)
	}
	if p.fw < 0 {
		p.fw = a.freeWeight(p.n)
	}
	if n.fw != p.fw {
		return n.fw < p.fw
	}
	return n.n.Name() < p.n.Name()
}

// placeOneByOne places members whose feasibility depends on where other pods run (pod
// affinity, anti-affinity, topology spread, host ports), re-checking those rules for every
// member against counts kept per topology domain (ip). Greedy choices can strand later members
// (the first member of a self-affine group picks the domain for all), so when the greedy pass
// of such a group fails it retries with the first member in each other domain its affinity
// terms tell apart, up to maxSeeds, and keeps the first success. Other rules gain nothing from
// another first node: members that repel each other or spread need as many domains as they
// need, whichever they start in.
func (a *attempt) placeOneByOne(g Gang, c *class, cands []*NodeState, ip *interPod) bool {
	saved := a.save()
	if a.greedy(g, c, cands, nil, ip.clone()) {
		return true
	}
	if ip == nil || len(ip.affinity) == 0 {
		return false
	}
	best := a.save()
	tried := map[string]bool{}
	for _, seed := range cands {
		if len(tried) == maxSeeds {
			break
		}
		k := ip.seedKey(seed)
		if tried[k] || !ip.allows(seed) {
			continue
		}
		a.restore(saved)
		if a.capacity(seed, c) == 0 {
			continue
		}
		tried[k] = true
		if a.greedy(g, c, cands, seed, ip.clone()) {
			return true
		}
		if a.placed > best.placed {
			best = a.save()
		}
	}
	a.restore(best)
	return false
}

// maxSeeds bounds the retries of placeOneByOne.
const maxSeeds = 64

func (a *attempt) greedy(g Gang, c *class, cands []*NodeState, seed *NodeState, ip *interPod) bool {
	var fits []*NodeState
	for i, m := range c.members {
		p := g.Members[m]
		var pick *NodeState
		fits = fits[:0]
		for _, n := range cands {
			if i == 0 && seed != nil && n != seed {
				continue
			}
			if a.capacity(n, c) == 0 || !ip.allows(n) || !portsOK(p, n, a.view) {
				continue
			}
			if c.dra {
				fits = append(fits, n)
				continue
			}
			if pick == nil || a.tieBreak(n, pick) {
				pick = n
			}
		}
		var alloc *draAlloc
		if c.dra {
			pick, alloc = a.allocate(c, p, fits)
		}
		if pick == nil {
			return false
		}
		a.put(pick, c, m, p)
		if alloc != nil {
			a.allocs[m] = alloc
			a.dra.add(a.s.dra, pick, alloc)
		}
		ip.placed(pick)
	}
	return true
}

// attemptState is a copy of an attempt's mutable state.
type attemptState struct {
	assigned []*NodeState
	placed   int
	used     map[*NodeState]vec
	extra    map[*NodeState][]*corev1.Pod
	dra      draSaved
	allocs   []*draAlloc
}

func (a *attempt) save() attemptState {
	st := attemptState{assigned: append([]*NodeState(nil), a.assigned...), placed: a.placed, dra: a.dra.save(), allocs: slices.Clone(a.allocs),
		used: make(map[*NodeState]vec, len(a.used)), extra: make(map[*NodeState][]*corev1.Pod, len(a.view.extra))}
	for n, v := range a.used {
		st.used[n] = append(vec(nil), v...)
	}
	for n, ps := range a.view.extra {
		st.extra[n] = append([]*corev1.Pod(nil), ps...)
	}
	return st
}

func (a *attempt) restore(st attemptState) {
	c := st
	a.assigned = append([]*NodeState(nil), c.assigned...)
	a.placed = c.placed
	a.dra.restore(a.s.dra, c.dra)
	a.allocs = slices.Clone(c.allocs)
	a.used = make(map[*NodeState]vec, len(c.used))
	for n, v := range c.used {
		a.used[n] = append(vec(nil), v...)
	}
	a.view.extra = make(map[*NodeState][]*corev1.Pod, len(c.extra))
	for n, ps := range c.extra {
		a.view.extra[n] = append([]*corev1.Pod(nil), ps...)
	}
}

// tieBreak orders two nodes for one-by-one placement: nodes the gang already uses, then fuller
// nodes, then the name.
func (a *attempt) tieBreak(n, p *NodeState) bool {
	_, nUsed := a.used[n]
	_, pUsed := a.used[p]
	if nUsed != pUsed {
		return nUsed
	}
	fn, fp := a.freeWeight(n), a.freeWeight(p)
	if fn != fp {
		return fn < fp
	}
	return n.Name() < p.Name()
}

// freeWeight is the weighted free capacity of n during this attempt (less is fuller).
func (a *attempt) freeWeight(n *NodeState) float64 {
	extra := a.used[n]
	var w float64
	for i, name := range a.s.ri.names {
		w += weightOf(name, max(0, at(n.alloc, i)-at(n.used, i)-at(extra, i)))
	}
	return w
}
