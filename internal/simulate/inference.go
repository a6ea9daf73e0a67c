package simulate

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/berth-dev/berth/internal/gpu"
	"github.com/berth-dev/berth/internal/vllmsim"
)

// epoch is the simulated clock's zero.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pod is one replica of the Deployment.
type pod struct {
	seq          int
	created      time.Duration
	pendingSince time.Duration
	node         *node
	bound, ready time.Duration
	// loaded is when its model is loaded, once it has started on its node.
	loaded  time.Duration
	replica *vllmsim.Replica
	history []reading
	// terminated is when it got SIGTERM (never: it has not); evicted says consolidation
	// evicted it.
	terminated time.Duration
	evicted    bool
}

// reading is what a replica's counters said at one moment.
type reading struct {
	at                        time.Duration
	waiting, running          int
	kvUsage                   float64
	ttft, itl, tpot           vllmsim.Histogram
	busy, tokens, preemptions float64
	// finished counts the requests the engine completed, aborted those it aborted.
	finished, aborted  float64
	promptSum, prompts float64
}

// node is one Karpenter node (NodeClaim) of the fleet's NodePool.
type node struct {
	size            gpu.Size
	slots           int
	launched, ready time.Duration
	pods            []*pod // bound or nominated, terminating ones too
	changed         time.Duration
	// imagePulled says the serving image is on the node or being pulled, done at pulledAt (a
	// node launched with the image has it with a zero pulledAt); draining that consolidation
	// is draining it: it takes no pod and goes once empty.
	imagePulled bool
	pulledAt    time.Duration
	draining    bool
	// seat says a warm seat holds the node: berth's lowest-priority seat pod, running the
	// serving image (pulled once the node is Ready), which a replica preempts when no other
	// node has room.
	seat bool
}

// InferenceResult is what one autoscaler did with one trace.
type InferenceResult struct {
	// Autoscaler names the policy.
	Autoscaler string
	// Requests is how many arrived; Good how many met the SLO (TTFT and ITL); Failed found no
	// serving replica; Lost were queued or running on a replica that was removed (scaled away
	// or evicted by consolidation); LostToConsolidation is the part of Lost consolidation caused;
	// TimedOut got no first token within the SLO's timeout (or none at all: the engine aborts
	// them when the client gives up). Unattainable had a prompt whose prefill alone, on an idle
	// replica, takes longer than the SLO's TTFT (or that max-model-len rejects): no fleet
	// could serve them well, and they are part of the violations.
	Requests, Good, Failed, Lost, LostToConsolidation, TimedOut, Unattainable int
	// Startups is every replica created after the warm-up that came to serve; SeatsTaken how
	// many of them took a warm seat.
	Startups   []Startup
	SeatsTaken int
	// TTFT and ITL are quantiles in seconds over the requests that got a first token (ITL: each
	// request's mean time per output token).
	TTFTP50, TTFTP95, TTFTP99, ITLP95, ITLP99 float64
	// GPUHours and Dollars are the nodes' GPU-hours and cost from the end of the warm-up to the
	// last arrival;
	// NodeLaunches counts the nodes launched.
	GPUHours, Dollars float64
	NodeLaunches      int
	// Series is the run over time, one point per bucket, for the report's plots.
	Series []Point
	// Duration is the trace's span.
	Duration time.Duration
}

// SeatKeeper is an Autoscaler that also holds warm seats: nodes launched ahead with the serving
// image pulled, which a scale-up's replica takes and so pays only its model load.
type SeatKeeper interface {
	// Seats is how many warm seats to hold now.
	Seats() int
}

// Startup is one replica's start: created (the scale-up) to serving.
type Startup struct{ Created, Serving time.Duration }

// Violations is the requests that did not meet the SLO.
func (r InferenceResult) Violations() int { return r.Requests - r.Good }

// AttainableViolations is the violations less the unattainable requests (every one of them is
// a violation): those an autoscaler could have avoided, for comparing policies.
func (r InferenceResult) AttainableViolations() int { return max(0, r.Violations()-r.Unattainable) }

// Attainment is the fraction of requests that met the SLO.
func (r InferenceResult) Attainment() float64 {
	if r.Requests == 0 {
		return 1
	}
	return float64(r.Good) / float64(r.Requests)
}

// Point is one bucket of a run's time series.
type Point struct {
	// At is the bucket's start.
	At time.Duration
	// Replicas is the mean serving replicas; Desired the Deployment's replicas at the end;
	// Nodes the mean nodes.
	Replicas, Nodes float64
	Desired         int
	// Waiting is the mean requests waiting in the engines' queues.
	Waiting float64
	// TTFTP95 is the p95 time to first token of the requests that got it in the bucket (NaN:
	// none).
	TTFTP95 float64
	// Arrived is the measured requests that arrived in the bucket, Attainable those of them
	// that could meet the SLO, Good those that did.
	Arrived, Attainable, Good int
}

// RunInference replays trace through fleet f sized by a, and measures it. It is
// deterministic: the same inputs give the same result.
func RunInference(f Fleet, trace []vllmsim.TraceRequest, a Autoscaler) (*InferenceResult, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if len(trace) == 0 {
		return nil, fmt.Errorf("%s: the trace has no request", a.Name())
	}
	if last := trace[len(trace)-1].At; f.WarmUp >= last {
		return nil, fmt.Errorf("the warm-up (%s) covers the whole trace (%s): nothing would be measured", f.WarmUp, last)
	}
	longest, err := longestAttainable(f)
	if err != nil {
		return nil, err
	}
	s := newFleetSim(f, trace, a, longest)
	s.run()
	return s.result(), nil
}

// longestAttainable is the longest prompt whose prefill on an idle replica meets the SLO's
// TTFT (0: none does), by bisection: the idle TTFT grows with the prompt.
func longestAttainable(f Fleet) (int, error) {
	lo, hi := 0, f.Engine.Tokens.MaxModelLen-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		d, err := vllmsim.IdleTTFT(f.Engine, mid)
		if err != nil {
			return 0, fmt.Errorf("the longest prompt that can meet the TTFT SLO: %w", err)
		}
		if d <= f.SLO.TTFT {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, nil
}

// fleetSim is one run's state.
type fleetSim struct {
	f     Fleet
	trace []vllmsim.TraceRequest
	a     Autoscaler
	now   time.Duration
	end   time.Duration // last arrival

	pods   []*pod // live, by creation
	nodes  []*node
	seq    int
	spec   int
	robin  int
	next   int // next arrival
	rec    recorder
	res    InferenceResult
	series seriesBuilder

	lastDisrupt time.Duration
	// lostBeforeFirst counts the lost requests that never had a first token.
	lostBeforeFirst int
	// terminating are the pods draining after SIGTERM: no requests, not in the scaler's view.
	terminating []*pod
}

// newFleetSim starts a run; prompts longer than longest cannot meet the TTFT SLO.
func newFleetSim(f Fleet, trace []vllmsim.TraceRequest, a Autoscaler, longest int) *fleetSim {
	end := trace[len(trace)-1].At
	s := &fleetSim{f: f, trace: trace, a: a, end: end, lastDisrupt: -time.Hour}
	s.rec = recorder{slo: f.SLO, from: epoch.Add(f.WarmUp)}
	s.res = InferenceResult{Autoscaler: a.Name(), Duration: end}
	s.series = newSeriesBuilder(end)
	for _, r := range trace {
		if r.At >= f.WarmUp {
			s.res.Requests++
			if r.Prompt > longest {
				s.res.Unattainable++
			}
			s.series.arrival(r.At, r.Prompt <= longest)
		}
	}
	s.rec.series = &s.series
	// The run starts warm at the minimum: Min replicas serving on the nodes Karpenter would
	// have launched for them.
	for placed := 0; placed < f.Min; {
		k := min(f.Min-placed, f.maxSlots())
		size, _ := f.cheapestFor(k)
		n := s.launch(size)
		n.ready, n.imagePulled = 0, true
		s.res.NodeLaunches-- // there before the trace
		for range k {
			p := s.addPod()
			s.bind(p, n)
			s.serve(p)
		}
		placed += k
	}
	s.spec = f.Min
	return s
}

// run steps until every request has finished or timed out.
func (s *fleetSim) run() {
	drain := s.end + s.f.SLO.Timeout + 10*time.Minute
	for s.now = s.f.Tick; ; s.now += s.f.Tick {
		s.lifecycle()
		s.arrivals()
		s.stepReplicas()
		s.reap()
		s.read()
		if want, ok := s.a.Step(s.now, s.view()); ok {
			s.scale(min(max(want, s.f.Min), s.f.Max))
		}
		if k, ok := s.a.(SeatKeeper); ok {
			s.keepSeats(k.Seats())
		}
		s.consolidate()
		s.account()

		if s.next >= len(s.trace) && (s.rec.outstanding(s.res.Requests, s.res.Failed+s.res.Lost) == 0 || s.now >= drain) {
			break
		}
	}
}

// lifecycle moves nodes and pods along: nodes become ready, pods bind and load their model,
// Karpenter launches nodes for pods that have waited out its batching window.
func (s *fleetSim) lifecycle() {
	for _, p := range s.pods {
		if p.node != nil && p.bound == never && s.now >= p.node.ready {
			s.start(p)
		}
		if p.bound != never && p.replica == nil && s.now >= p.loaded {
			s.serve(p)
		}
	}
	var unplaced []*pod
	for _, p := range s.pods {
		if p.node != nil {
			continue
		}
		if n := s.leastAllocated(); n != nil { // kube-scheduler: the Ready node with most room
			s.bind(p, n)
			s.start(p)
			continue
		}
		if n := s.readySeat(); n != nil { // no room without preemption: the replica preempts a seat
			n.seat = false
			if p.created >= s.f.WarmUp {
				s.res.SeatsTaken++
			}
			s.bind(p, n)
			s.start(p)
			continue
		}
		if s.now-p.pendingSince >= s.f.ProvisionDelay {
			unplaced = append(unplaced, p)
		}
	}
	// Karpenter: in-flight nodes with room first, then new nodes, each packed with as many of
	// the rest as one size holds, launched as the cheapest size that holds them.
	var rest []*pod
	for _, p := range unplaced {
		if n := s.inFlight(); n != nil {
			s.bind(p, n)
			continue
		}
		rest = append(rest, p)
	}
	for len(rest) > 0 {
		k := min(len(rest), s.f.maxSlots())
		size, _ := s.f.cheapestFor(k)
		n := s.launch(size)
		for _, p := range rest[:k] {
			s.bind(p, n)
		}
		rest = rest[k:]
	}
}

// start starts p's container on its Ready node: the image is pulled first if the node has not
// got it (a pull under way is waited for), then the model loads.
func (s *fleetSim) start(p *pod) {
	n := p.node
	if !n.imagePulled {
		n.imagePulled, n.pulledAt = true, s.now+s.f.ImagePull
	}
	p.bound, p.loaded = s.now, max(s.now, n.pulledAt)+s.f.ModelLoad
}

// inFlight is the first node still launching with a free slot (Karpenter nominates pods to
// the capacity it is already launching).
func (s *fleetSim) inFlight() *node {
	for _, n := range s.nodes {
		if len(n.pods) < n.slots && s.now < n.ready && !n.seat {
			return n
		}
	}
	return nil
}

// leastAllocated is the Ready node with the most free slots (kube-scheduler's default
// scoring, LeastAllocated), the first of them on a tie; nil when none has room. A draining
// node is cordoned.
func (s *fleetSim) leastAllocated() *node {
	var best *node
	for _, n := range s.nodes {
		if s.now >= n.ready && !n.draining && !n.seat && len(n.pods) < n.slots && (best == nil || n.slots-len(n.pods) > best.slots-len(best.pods)) {
			best = n
		}
	}
	return best
}

// readySeat is the first Ready node a warm seat holds; nil when none.
func (s *fleetSim) readySeat() *node {
	for _, n := range s.nodes {
		if n.seat && s.now >= n.ready {
			return n
		}
	}
	return nil
}

// keepSeats holds want warm seats, each on a node of its own as Karpenter launches one for a
// pending seat pod: seats taken by replicas are replaced by new nodes, extra ones go (the
// newest first). A seat's pod pulls the serving image as soon as its node is Ready.
func (s *fleetSim) keepSeats(want int) {
	have := 0
	for _, n := range s.nodes {
		if n.seat {
			have++
		}
	}
	for ; have < want; have++ {
		size, _ := s.f.cheapestFor(1)
		n := s.launch(size)
		n.seat, n.imagePulled, n.pulledAt = true, true, n.ready+s.f.ImagePull
	}
	for i := len(s.nodes) - 1; i >= 0 && have > want; i-- {
		if n := s.nodes[i]; n.seat {
			s.nodes = slices.Delete(s.nodes, i, i+1)
			have--
		}
	}
}

func (s *fleetSim) launch(size gpu.Size) *node {
	n := &node{size: size, slots: s.f.slots(size), launched: s.now, ready: s.now + s.f.NodeLaunch, changed: s.now}
	s.nodes = append(s.nodes, n)
	s.res.NodeLaunches++
	return n
}

func (s *fleetSim) bind(p *pod, n *node) {
	p.node = n
	n.pods = append(n.pods, p)
	n.changed = s.now
}

func (s *fleetSim) addPod() *pod {
	s.seq++
	p := &pod{seq: s.seq, created: s.now, pendingSince: s.now, bound: never, ready: never, loaded: never, terminated: never}
	s.pods = append(s.pods, p)
	return p
}

// serve starts p's engine: its model is loaded.
func (s *fleetSim) serve(p *pod) {
	cfg := s.f.Engine
	cfg.Seed += uint64(p.seq)
	r, err := vllmsim.NewReplica(cfg, epoch.Add(s.now))
	if err != nil {
		panic(fmt.Sprintf("simulate: the validated engine config failed: %v", err))
	}
	r.SetObserver(&s.rec)
	p.replica, p.ready = r, s.now
	if p.created >= s.f.WarmUp {
		s.res.Startups = append(s.res.Startups, Startup{Created: p.created, Serving: s.now})
	}
	if p.bound == never {
		p.bound = s.now
	}
}

// arrivals routes the requests of the last tick over the serving replicas (terminating ones
// take none), each at its own time; with none serving they fail, like a Service without
// endpoints.
func (s *fleetSim) arrivals() {
	var serving []*pod
	for _, p := range s.pods {
		if p.replica != nil {
			serving = append(serving, p)
		}
	}
	for ; s.next < len(s.trace) && s.trace[s.next].At <= s.now; s.next++ {
		r := s.trace[s.next]
		if len(serving) == 0 {
			if r.At >= s.f.WarmUp {
				s.res.Failed++
			}
			continue
		}
		if !s.route(serving).replica.SubmitRequest(epoch.Add(r.At), r.Prompt, r.Output) && r.At >= s.f.WarmUp {
			s.res.Failed++ // a prompt longer than the engine serves: vLLM answers 400
		}
	}
}

// route picks the serving replica a request goes to.
func (s *fleetSim) route(serving []*pod) *pod {
	if s.f.Routing == LeastOutstanding {
		return leastOutstanding(serving)
	}
	s.robin %= len(serving)
	p := serving[s.robin]
	s.robin++
	return p
}

// leastOutstanding is the replica with the fewest requests running and waiting, the first of
// them on a tie. The counts are the engines' as of the last step plus what was routed since,
// as a gateway counts the requests it has in flight.
func leastOutstanding(serving []*pod) *pod {
	best, fewest := serving[0], math.MaxInt
	for _, p := range serving {
		if running, waiting := p.replica.Queue(); running+waiting < fewest {
			best, fewest = p, running+waiting
		}
	}
	return best
}

// stepReplicas advances every replica, terminating ones too, to now, and aborts the requests
// whose clients gave up: no first token within the SLO's timeout.
func (s *fleetSim) stepReplicas() {
	giveUp := epoch.Add(s.now - s.f.SLO.Timeout)
	for _, ps := range [][]*pod{s.pods, s.terminating} {
		for _, p := range ps {
			if p.replica != nil {
				p.replica.Step(epoch.Add(s.now))
				p.replica.Abort(giveUp)
			}
		}
	}
}

// historyKeep is how much of each replica's readings is kept: the scaler's longest window
// (one minute) and a scrape.
const historyKeep = 75 * time.Second

// read records every serving replica's counters, as a scrape would.
func (s *fleetSim) read() {
	for _, p := range s.pods {
		if p.replica == nil {
			continue
		}
		rd := reading{at: s.now}
		for i, e := range p.replica.Snapshot() {
			rd.waiting += e.Waiting
			rd.running += e.Running
			rd.kvUsage += e.KVCacheUsage
			rd.busy += e.BusySeconds
			rd.finished += float64(e.RequestSuccess)
			rd.aborted += float64(e.Aborted)
			rd.tokens += float64(e.PromptTokens + e.GenerationTokens)
			rd.preemptions += float64(e.Preemptions)
			rd.promptSum += e.PromptLength.Sum
			rd.prompts += float64(e.PromptLength.Count)
			if i == 0 {
				rd.ttft, rd.itl, rd.tpot = e.TTFT, e.ITL, e.RequestTPOT
			} else {
				rd.ttft, rd.itl, rd.tpot = addHist(rd.ttft, e.TTFT), addHist(rd.itl, e.ITL), addHist(rd.tpot, e.RequestTPOT)
			}
		}
		rd.kvUsage /= float64(p.replica.Config().Engines)
		p.history = append(p.history, rd)
		drop := 0
		for drop < len(p.history)-1 && s.now-p.history[drop+1].at >= historyKeep {
			drop++
		}
		p.history = p.history[drop:]
	}
}

func addHist(a, b vllmsim.Histogram) vllmsim.Histogram {
	out := vllmsim.Histogram{Bounds: a.Bounds, Buckets: slices.Clone(a.Buckets), Count: a.Count + b.Count, Sum: a.Sum + b.Sum}
	for i := range out.Buckets {
		out.Buckets[i] += b.Buckets[i]
	}
	return out
}

// scale sets the Deployment's replicas: new pods are pending; removed ones go in the
// ReplicaSet's order — unbound first, then still loading, then the most recently ready.
func (s *fleetSim) scale(want int) {
	for s.spec < want {
		s.addPod()
		s.spec++
	}
	for s.spec > want {
		victim := 0
		for i, p := range s.pods {
			if deleteBefore(p, s.pods[victim]) {
				victim = i
			}
		}
		s.terminate(s.pods[victim], false)
		s.spec--
	}
}

// deleteBefore orders pods for deletion as the ReplicaSet controller does: unassigned before
// assigned, not serving before serving, then pods sharing their node with more replicas, then
// the most recently ready.
func deleteBefore(p, q *pod) bool {
	if rank(p) != rank(q) {
		return rank(p) < rank(q)
	}
	if p.node != nil && q.node != nil && p.node.replicas() != q.node.replicas() {
		return p.node.replicas() > q.node.replicas()
	}
	return p.ready >= q.ready
}

// rank is a pod's readiness class for deletion: lower goes first.
func rank(p *pod) int {
	switch {
	case p.node == nil || p.bound == never: // unscheduled (nominated to a node still launching)
		return 0
	case p.replica == nil:
		return 1
	}
	return 2
}

// replicas is the pods on n that are not terminating (the ReplicaSet's active pods).
func (n *node) replicas() int {
	k := 0
	for _, p := range n.pods {
		if p.terminated == never {
			k++
		}
	}
	return k
}

// terminate deletes p as the API server does (evicted: consolidation evicts it). A serving pod
// with requests gets SIGTERM and drains: it leaves the scaler's view and the routing but
// stays on its node, stepping, until reap removes it. Any other pod goes at once.
func (s *fleetSim) terminate(p *pod, evicted bool) {
	p.evicted = evicted
	if p.replica == nil || s.f.DrainTimeout == 0 || idle(p) {
		s.remove(p)
		return
	}
	p.terminated = s.now
	s.pods = slices.DeleteFunc(s.pods, func(q *pod) bool { return q == p })
	s.terminating = append(s.terminating, p)
}

// idle reports whether p's replica holds no request.
func idle(p *pod) bool {
	running, waiting := p.replica.Queue()
	return running+waiting == 0
}

// reap removes the terminating pods that have drained or whose drain timeout has passed (what
// they still hold is lost).
func (s *fleetSim) reap() {
	for _, p := range slices.Clone(s.terminating) {
		if idle(p) || s.now-p.terminated >= s.f.DrainTimeout {
			s.remove(p)
		}
	}
}

// remove deletes a pod at once: its queued and running requests are lost (to consolidation
// when it was evicted).
func (s *fleetSim) remove(p *pod) {
	if p.replica != nil {
		from := epoch.Add(s.f.WarmUp)
		p.replica.Unfinished(func(arrived time.Time, first bool) {
			if arrived.Before(from) {
				return // not measured
			}
			s.res.Lost++
			if p.evicted {
				s.res.LostToConsolidation++
			}
			if !first {
				s.lostBeforeFirst++
			}
		})
	}
	if n := p.node; n != nil {
		n.pods = slices.DeleteFunc(n.pods, func(q *pod) bool { return q == p })
		n.changed = s.now
	}
	s.pods = slices.DeleteFunc(s.pods, func(q *pod) bool { return q == p })
	s.terminating = slices.DeleteFunc(s.terminating, func(q *pod) bool { return q == p })
}

// consolidationValidation is how long Karpenter waits between two disruption decisions.
const consolidationValidation = 15 * time.Second

// consolidate is Karpenter's disruption of the fleet's nodes: empty nodes after
// ConsolidateAfter; under WhenEmptyOrUnderutilized without the guard, a partly used node
// whose replicas fit the other ready nodes' free slots: it is cordoned, its replicas are
// evicted (the ReplicaSet recreates them at once, they load their model again) and drain, and
// the node goes once they have.
func (s *fleetSim) consolidate() {
	s.nodes = slices.DeleteFunc(s.nodes, func(n *node) bool {
		return len(n.pods) == 0 && !n.seat && (n.draining || s.now >= n.ready && s.now-n.changed >= s.f.ConsolidateAfter)
	})
	if s.f.Consolidation != WhenEmptyOrUnderutilized || s.f.Guard || s.now-s.lastDisrupt < consolidationValidation {
		return
	}
	for _, n := range s.nodes {
		if len(n.pods) == 0 || len(n.pods) == n.slots || n.draining || n.replicas() < len(n.pods) ||
			s.now < n.ready || s.now-n.changed < s.f.ConsolidateAfter {
			continue
		}
		free := 0
		for _, o := range s.nodes {
			if o != n && !o.draining && s.now >= o.ready {
				free += o.slots - len(o.pods)
			}
		}
		if free < len(n.pods) {
			continue
		}
		n.draining = true
		for _, p := range slices.Clone(n.pods) {
			s.terminate(p, true)
			s.addPod() // the ReplicaSet's replacement
		}
		s.nodes = slices.DeleteFunc(s.nodes, func(o *node) bool { return o == n && len(o.pods) == 0 })
		s.lastDisrupt = s.now
		return
	}
}

// account adds the tick's node time (up to the last arrival) and the series' samples.
func (s *fleetSim) account() {
	if s.now > s.f.WarmUp && s.now <= s.end+s.f.Tick {
		h := s.f.Tick.Hours()
		for _, n := range s.nodes {
			s.res.GPUHours += float64(n.size.GPUs) * h
			s.res.Dollars += s.f.pricePerHour(n.size) * h
		}
	}
	serving, waiting := 0, 0
	for _, p := range s.pods {
		if p.replica != nil {
			serving++
			_, w := p.replica.Queue()
			waiting += w
		}
	}
	for _, p := range s.terminating {
		_, w := p.replica.Queue()
		waiting += w
	}
	s.series.sample(s.now, serving, len(s.nodes), s.spec, waiting)
}

func (s *fleetSim) result() *InferenceResult {
	r := s.res
	r.Good = s.rec.good
	// Timed out: a first token after the client gave up, or none at all (neither failed nor
	// lost before it came).
	r.TimedOut = s.rec.timedOut + max(0, r.Requests-r.Failed-s.rec.firstTokens-s.lostBeforeFirst)
	r.TTFTP50, r.TTFTP95, r.TTFTP99 = s.rec.ttft.quantile(0.5), s.rec.ttft.quantile(0.95), s.rec.ttft.quantile(0.99)
	r.ITLP95, r.ITLP99 = s.rec.itl.quantile(0.95), s.rec.itl.quantile(0.99)
	r.Series = s.series.points()
	return &r
}
