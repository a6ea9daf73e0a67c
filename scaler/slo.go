package scaler

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// SLO is a trigger's service-level objective: what SignalSLO sizes the fleet to meet. The
// fleet is sized from the demand (requests arriving per second, forecast over one cold start)
// and what one replica can carry at the SLO, which berth learns online from the replicas'
// own windows (FleetModel) instead of a per-replica number the user must guess.
type SLO struct {
	// TTFT is the time to first token a request must get within, in seconds (0: no SLO).
	TTFT float64
	// ITL is the inter-token latency a request's tokens must come within, in seconds (0:
	// none).
	ITL float64
	// Attainment is the fraction of requests that must meet the SLO (0.5–0.9999).
	Attainment float64
	// ColdStart is how far ahead the demand is forecast: a node launch plus a model load of the
	// fleet's family. 0: learned from the replicas' own start-up times (DefaultColdStart until
	// one is seen).
	ColdStart time.Duration
	// HeadroomQuantile is the share of the fleet's own requests of the last day that the burst
	// headroom would have covered: each moment's demand against the baseline forecast for it
	// one cold start earlier, weighted by the demand (0: no burst headroom).
	HeadroomQuantile float64
	// MaxHeadroom caps the burst headroom as a multiple of the baseline demand (the GPU budget
	// of the headroom: 1.5 holds at most half as many replicas again as the baseline needs).
	MaxHeadroom float64
}

// SLO defaults.
const (
	// DefaultSLOAttainment is sloAttainment's default.
	DefaultSLOAttainment = 0.99
	// DefaultColdStart is the forecast horizon before berth has seen a replica start.
	DefaultColdStart = 5 * time.Minute
	// DefaultHeadroomQuantile is headroomQuantile's default: the fleet's bursts are covered as
	// often as sloAttainment's default asks requests to meet the SLO (chosen with berth
	// simulate on the synthetic day of seed 1; docs/economics.md).
	DefaultHeadroomQuantile = 0.99
	// DefaultMaxHeadroom is maxHeadroom's default: a burst of three times the baseline demand.
	DefaultMaxHeadroom = 3.0
)

// ReplicaWindow is one ready replica's last window (the scaler's one-minute window of counter
// deltas): what FleetModel learns a replica's capacity from.
type ReplicaWindow struct {
	// Span is the window's length.
	Span time.Duration
	// Finished is the requests the replica completed in the window (aborted ones are not
	// served: they never count as capacity).
	Finished float64
	// Arrived is the requests that arrived: those completed and aborted plus the growth of
	// those running and waiting.
	Arrived float64
	// End is when the window ends (its newest page): one window is learned from once.
	End time.Time
	// TTFT and ITL are the window's latency histograms (deltas); TPOT the finished requests'
	// mean time per output token (empty when the engine does not report it).
	TTFT, ITL, TPOT Histogram
	// Waiting is the requests waiting at both the window's start and its end, the smaller of
	// the two: a replica that had a queue through its window served at its limit.
	Waiting float64
	// Joined says the window starts when the replica became ready, from counters at zero: it
	// holds every request the replica has had, and it had none before (WindowArrivals).
	Joined bool
	// Recent is the window's last RecentWindow (from its newest page at or before then, or the
	// window's start) and RecentArrived the requests that arrived in it: how a burst is seen
	// within a scrape, before the minute's window has moved (0: none).
	Recent        time.Duration
	RecentArrived float64
}

// minWindowSpan is the shortest window a capacity is learned from.
const minWindowSpan = 30 * time.Second

// minWindowFirstTokens is the fewest first tokens a window needs to say whether it met the
// SLO.
const minWindowFirstTokens = 3

// FleetModel is what berth has learned of one fleet: the request rate one replica carries at
// the SLO, the demand's recent history (for the trend and the burst headroom) and how long a
// replica takes to start. The scaler keeps one per ScaledObject between evaluations and feeds
// it every observation (Learn); Decide only reads it. The zero value knows nothing.
type FleetModel struct {
	// Capacity is the requests per second one replica carries at the SLO (0: not learned yet).
	Capacity float64
	// GoodMax is the highest request rate a replica served within the SLO: a lower bound of
	// Capacity, which sizes the fleet until a replica has been seen at its limit.
	GoodMax float64
	// ColdStart is the longest start-up (created to ready) of the replicas that became ready
	// in the hour before the latest one did; 0: none seen.
	ColdStart time.Duration
	// demand is the fleet's arrival rate at each evaluation, oldest first.
	demand []demandPoint
	// stats is what the demand's history says, refreshed every statsEvery.
	stats demandStats
	// last is the previous Learn's time.
	last time.Time
	// inherited is the replicas ready when the history began (its first point, or the first
	// after a silence longer than demandHistory emptied it): the fleet the scaler found
	// (Forecast.Inherited).
	inherited int
	// floor is the share of requests the fleet misses without a queue (Unattainable).
	floor missFloor
}

// missFloor measures the share of requests whose first token misses the TTFT objective
// however many replicas serve them — prompts whose prefill alone takes longer than the
// objective on an idle replica, a share the fleet's traffic sets and no scale-up lowers: per
// block of floorBlockSpan, the first tokens of the fleet windows judged in it and those over
// the objective, kept for a block in which no window had a queue.
type missFloor struct {
	// ttft is the objective the blocks were measured against, in seconds: another one starts
	// them over.
	ttft float64
	// start is the block's start; requests and misses its first tokens and those over the
	// objective, each window's weighted by the share of its span no window before it held;
	// queued says a window of it had a queue.
	start            time.Time
	requests, misses float64
	queued           bool
	// blocks are the shares of the quiet blocks of the last demandHistory, oldest first.
	blocks []floorBlock
}

// floorBlock is one quiet block's share of first tokens over the TTFT objective, of requests
// first tokens.
type floorBlock struct {
	at              time.Time
	share, requests float64
}

// Blocks of the miss floor: long enough to hold a few hundred requests of a small fleet, short
// enough that a day holds many, and that the calmest of them saw little load; the most of the
// requests it leaves out of a window's judgement.
const (
	floorBlockSpan   = 10 * time.Minute
	floorMinRequests = 200
	floorMinBlocks   = 3
	// maxUnattainable is the largest share left out: an objective a quarter of the requests
	// miss on idle replicas is no objective a fleet's size serves, and a fleet judged on the
	// rest of it would learn a capacity out of any bound.
	maxUnattainable = 0.25
)

// age drops the blocks older than demandHistory at now, and every block measured against
// another TTFT objective than ttft (a changed trigger).
func (f *missFloor) age(now time.Time, ttft float64) {
	if f.ttft != ttft {
		*f = missFloor{ttft: ttft}
	}
	drop := 0
	for drop < len(f.blocks) && now.Sub(f.blocks[drop].at) > demandHistory {
		drop++
	}
	f.blocks = f.blocks[drop:]
}

// add folds one fleet window (n first tokens, missed of them over the objective, queued:
// requests waited through it) into the block of now.
func (f *missFloor) add(now time.Time, n, missed float64, queued bool) {
	if !f.start.IsZero() && now.Sub(f.start) >= floorBlockSpan {
		if !f.queued && f.requests >= floorMinRequests {
			f.blocks = append(f.blocks, floorBlock{at: f.start, share: f.misses / f.requests, requests: f.requests})
		}
		f.start, f.requests, f.misses, f.queued = time.Time{}, 0, 0, false
	}
	if f.start.IsZero() {
		f.start = now
	}
	f.requests += n
	f.misses += missed
	f.queued = f.queued || queued
}

// share is the share of first tokens over the objective in the calmest quarter of the quiet
// blocks kept (at least one), pooled, once there are floorMinBlocks (0 before): the calmest
// blocks' misses are those no load made. One block alone is whatever load it had: on an hour's
// trace with a 1 s objective, the first quiet block missed 8.8 % where 7.1 % of the requests
// were out of reach, and the fleet judged on the rest missed twice the attainable requests.
// The smallest block alone sinks with every block a day adds (the least of 144 noisy shares
// lies 2.6 of their deviations below their level): the floor fell over a fleet's first day,
// its target tightened, and the fleet's peak grew from 50 replicas to 60 on the days after.
func (f *missFloor) share() float64 {
	if len(f.blocks) < floorMinBlocks {
		return 0
	}
	calm := slices.Clone(f.blocks)
	slices.SortFunc(calm, func(a, b floorBlock) int { return cmp.Compare(a.share, b.share) })
	calm = calm[:max(1, len(calm)/4)]
	var requests, misses float64
	for _, b := range calm {
		requests += b.requests
		misses += b.share * b.requests
	}
	return misses / requests
}

// MissFloor is the share of first tokens the fleet misses the TTFT objective for when nothing
// loads it: the calmest quarter of the quiet blocks of the last day, pooled (0 until there are
// floorMinBlocks).
func (m *FleetModel) MissFloor() float64 {
	if m == nil {
		return 0
	}
	return m.floor.share()
}

// Unattainable is the share of requests left out of a window's TTFT judgement for the
// attainment target attain: the miss floor, where it is more than half what the target allows
// and at most maxUnattainable — a fleet judged on the target over every request could then
// meet it on no window and learned its capacity only downwards (a 1 s TTFT objective over
// conversation prompts, 8.5 % of which prefill for longer: 1.6× the GPU-hours a day without
// bursts needed) — and 0 otherwise: under half, a calm block's misses may be load as much as
// prompts; over the bound, the objective is out of reach and every request counts, as before.
func (m *FleetModel) Unattainable(attain float64) float64 {
	if attain <= 0 {
		attain = DefaultSLOAttainment
	}
	if u := m.MissFloor(); u > (1-attain)/2 && u <= maxUnattainable {
		return u
	}
	return 0
}

// Clone is a copy of m that shares nothing with it.
func (m *FleetModel) Clone() FleetModel {
	c := *m
	c.demand = slices.Clone(m.demand)
	c.floor.blocks = slices.Clone(m.floor.blocks)
	return c
}

// saturatedShare is the share of a saturated fleet's throughput (requests waiting all window)
// that a first lesson takes for its capacity at the SLO: a replica that always has a queue
// serves as fast as it can, and its first tokens wait; the SLO holds well below that rate
// (about 0.7 of it on the Azure conversation hour, where this share was chosen; the synthetic
// days judge it). Later lessons move it from there.
const saturatedShare = 0.75

// Learning rates of FleetModel.Capacity (per informative window) and its exploration (per
// minute a loaded fleet meets its SLO).
const (
	capacityRate = 0.5
	exploreRate  = 0.001
	// exploreLoad is the share of Capacity a fleet's replicas must serve on average for their
	// meeting the SLO to say that a replica can carry more.
	exploreLoad = 0.8
	// demandHistory is how much of the demand's history is kept.
	demandHistory = 24 * time.Hour
)

// Learn folds one observation into m. The fleet's windows are judged together — the SLO is
// the fleet's: its attainment over every request, not each replica's — at the rate each
// replica served on average: a fleet that met the SLO at a rate above Capacity raises it
// towards that rate; one that missed it with requests waiting, or with its requests' own
// times per token clearly over the ITL objective (tpotBound), at a rate below Capacity lowers
// it (its replicas were at their limit); a fleet that meets the SLO at exploreLoad of Capacity
// or more raises it slowly, so a capacity learned low does not hold the fleet large for good.
// The first fleet window that missed the SLO so sets it. Windows too short,
// or much shorter than the fleet's longest (replicas that joined within it), and fleets with
// too few first tokens say nothing. One replica's minute is a few dozen requests, and a long
// prompt or two decides it: judging replicas one by one taught capacities a quarter apart from
// one minute to the next.
func (m *FleetModel) Learn(o Observation, slo SLO, now time.Time) {
	if slo.TTFT <= 0 {
		return
	}
	attain := slo.Attainment
	if attain <= 0 {
		attain = DefaultSLOAttainment
	}
	if fw, n, ok := fleetWindow(o.Windows); ok {
		rate := fw.Finished / fw.Span.Seconds() / float64(n)
		// The target is over the requests a replica can serve within the TTFT objective: the
		// share that none could is the window's whatever its load (judged before this window
		// adds to it). Windows overlap: each adds the share of its span no window before it
		// held, so a block counts each request about once.
		m.floor.age(now, slo.TTFT)
		u := m.Unattainable(attain)
		firsts, weight := fw.TTFT.Total(), 1.0
		if !m.last.IsZero() && now.Sub(m.last) < fw.Span {
			weight = now.Sub(m.last).Seconds() / fw.Span.Seconds()
		}
		m.floor.add(now, weight*firsts, weight*firsts*(1-fw.TTFT.FractionAtOrBelowBound(slo.TTFT)), fw.Waiting > 0)
		good, bad := judge(firsts, fw.within(slo, u), attain)
		switch {
		case !good && !bad: // neither clearly within the SLO nor clearly over it: no lesson
		case good:
			m.GoodMax = max(m.GoodMax, rate)
			if m.Capacity > 0 && rate > m.Capacity {
				m.Capacity += capacityRate * (rate - m.Capacity)
			}
			// Only a fleet near its capacity says it may carry more: one held below it by a
			// burst headroom meets the SLO whatever a replica carries (crediting it with the
			// headroom's load raised the capacity without end, until a burst found it wrong).
			if !m.last.IsZero() && m.Capacity > 0 && rate >= exploreLoad*m.Capacity {
				// Over the window's span at most: Learn runs when a replica has a new window,
				// and an hour without one (a fleet at zero, a scrape outage) is no hour of
				// evidence.
				m.Capacity *= 1 + exploreRate*min(now.Sub(m.last), fw.Span).Minutes()
			}
		case fw.Waiting == 0 && !fw.tpotBound(slo, attain), fw.Arrived < fw.Finished:
			// No queue throughout (and the requests' own times per token within the ITL
			// objective), or a fleet draining (more finished than arrived: the backlog of a
			// moment when the fleet was smaller, held by the replicas it was routed to, or a
			// batch larger before than the rate it finished at carries): the misses say
			// nothing of what the replicas carry now. Taking slow tokens from shrinking
			// batches too lowered the capacity on every noisy window — half of a steady
			// fleet's — and nothing raised it back: the day without bursts paid 17 % more.
		case m.Capacity == 0:
			m.Capacity = saturatedShare * rate
		case rate < m.Capacity:
			m.Capacity += capacityRate * (rate - m.Capacity)
		}
	}
	if o.Startup > 0 { // the longest start-up of the last hour: one slow pod ages out
		m.ColdStart = o.Startup
	}
	m.last = now
	// Points older than demandHistory go first: a history emptied by a long silence begins
	// again with the fleet that is ready now (inherited).
	drop := 0
	for drop < len(m.demand) && now.Sub(m.demand[drop].at) > demandHistory {
		drop++
	}
	m.demand = m.demand[drop:]
	// The history keeps only demand every ready replica measured over a whole window: a rate
	// scaled up from some replicas is a bound, and the short first windows of replicas that
	// have just joined are noise that the history would take for bursts.
	if rate, extrapolated, ok := o.arrivalRate(); ok && !extrapolated && o.windowsWhole() {
		if len(m.demand) == 0 {
			m.inherited = o.Ready
		}
		m.record(now, rate)
	}
	st := m.stats
	if h := m.horizon(slo); now.Sub(st.at) >= statsEvery || st.horizon != h || st.quantile != slo.HeadroomQuantile || st.maxHeadroom != slo.MaxHeadroom || m.levelMoved() {
		m.stats = m.computeStats(h, slo, now)
	}
}

// judge says whether a window of n requests of which the fraction within met the SLO clearly
// met an attainment target (good: no more misses than the target allows, rounded to the
// nearest request) or clearly missed it (bad: more than it allows plus two standard deviations
// of the binomial count plus one — a window of a few requests does not miss on one slow
// request, and a replica within its capacity is not taken for one at its limit by chance).
// Between the two a window teaches nothing: a capacity learned from windows that barely met
// the SLO would sit on its edge.
func judge(n, within, attain float64) (good, bad bool) {
	misses := (1 - within) * n
	allowed := (1 - attain) * n
	return misses <= allowed+0.5, misses > allowed+2*math.Sqrt(n*attain*(1-attain))+1
}

// fleetWindow is the fleet's window: the windows of at least minWindowSpan that span about as
// long as the longest (windowSpanTolerance), their finished requests as a rate over the
// longest span (and so the arrivals), their histograms and queues added up; n is how many it
// holds. ok is false when none qualifies or their first tokens are too few to judge.
func fleetWindow(ws []ReplicaWindow) (fw ReplicaWindow, n int, ok bool) {
	for _, w := range ws {
		fw.Span = max(fw.Span, w.Span)
	}
	rate, arrived, partialTPOT := 0.0, 0.0, false
	for _, w := range ws {
		if w.Span < minWindowSpan || float64(w.Span) < windowSpanTolerance*float64(fw.Span) {
			continue
		}
		if !fw.TTFT.Add(w.TTFT) {
			continue // a replica of another histogram layout (another engine version): left out
		}
		fw.ITL.Add(w.ITL) // an ITL of another layout only leaves that replica's tokens out
		if len(w.TPOT.Bounds) == 0 || !fw.TPOT.Add(w.TPOT) {
			partialTPOT = true
		}
		n++
		rate += w.Finished / w.Span.Seconds()
		arrived += w.Arrived / w.Span.Seconds()
		fw.Waiting += w.Waiting
	}
	if partialTPOT {
		// Some replicas do not report their requests' own times per token (an older engine
		// in a rolling upgrade): the rest's share would stand for every first token; the
		// fleet is judged on its tokens alone.
		fw.TPOT = Histogram{}
	}
	fw.Finished, fw.Arrived = rate*fw.Span.Seconds(), arrived*fw.Span.Seconds()
	return fw, n, n > 0 && fw.TTFT.Total() >= minWindowFirstTokens
}

// within is the fraction of the window's requests that met the SLO, as far as vLLM's
// histograms tell. The TTFT part is the fraction of first tokens at or below the histogram's
// first bucket bound at or above the objective (Histogram.FractionAtOrBelowBound: an objective
// between two bounds is judged at the upper one; docs/scaler.md), of the requests a replica
// can serve within it: the unattainable share (FleetModel.Unattainable) is left out. The ITL objective is on a
// request's mean time per output token: where the engine reports each request's
// (vllm:request_time_per_output_token_seconds, TPOT) the fraction within it multiplies the
// TTFT part (which requests missed both the histograms do not say; at the rates that matter
// independence and adding the misses differ by their product). Without it, a histogram of
// single tokens cannot give a request's mean: a request's mean is near the fleet's median
// token, so the objective counts as missed — at the fraction of tokens within it — only once
// the median token is over it (a fleet whose median token met a 100 ms objective missed it
// for 4.4 % of its requests on the Azure hour, and learned nothing from it).
func (w ReplicaWindow) within(slo SLO, unattainable float64) float64 {
	f := w.TTFT.FractionAtOrBelowBound(slo.TTFT)
	if unattainable > 0 { // of the requests a replica can serve within the TTFT objective
		f = min(1, f/(1-unattainable))
	}
	switch {
	case slo.ITL <= 0:
	case w.TPOT.Total() > 0:
		f *= w.TPOT.FractionAtOrBelowBound(slo.ITL)
	case w.ITL.Total() > 0:
		if itl := w.ITL.FractionAtOrBelowBound(slo.ITL); itl < 0.5 {
			f = min(f, itl)
		}
	}
	return f
}

// tpotBound reports whether the window's requests clearly missed the ITL objective on their
// own while the replicas kept up with what arrived: their batches were too large for it at
// that rate, a limit reached with or without a queue. A swamped window (more than swampRatio
// times what finished arrived) is no such rate: a cold replica's batch fills in its first
// seconds, and its few finished requests (11 of 133 in 30 s) were taken for its limit.
func (w ReplicaWindow) tpotBound(slo SLO, attain float64) bool {
	// As many requests as first tokens are needed to judge a window by (minWindowFirstTokens).
	if slo.ITL <= 0 || w.TPOT.Total() < minWindowFirstTokens || w.Arrived > swampRatio*w.Finished {
		return false
	}
	_, bad := judge(w.TPOT.Total(), w.TPOT.FractionAtOrBelowBound(slo.ITL), attain)
	return bad
}

// carry is the request rate one replica is sized for: Capacity once learned, else GoodMax (a
// lower bound, never an overestimate); 0 when nothing is known.
func (m *FleetModel) carry() float64 {
	if m == nil {
		return 0
	}
	if m.Capacity > 0 {
		return m.Capacity
	}
	return m.GoodMax
}

// decideSLO is SignalSLO's decision: the replicas that carry the forecast demand plus the
// backlog drained over one cold start at the learned capacity. Replicas still starting count
// as the capacity they will be, never as a hold: demand beyond them scales up at once. With
// nothing learned yet, or no arrival rate, it holds the fleet (never scales on missing data);
// the TTFT and ITL constraints still add replicas.
func decideSLO(o Observation, t *Trigger, headroom float64, current int, partial bool) (sd SignalDecision, fc Forecast, carry float64, serving int) {
	sd = SignalDecision{Signal: SignalSLO, Target: 1}
	carry = o.Model.carry()
	if _, _, ok := o.arrivalRate(); carry <= 0 || !ok {
		sd.Desired, sd.Held = current, HeldLearning
		if o.Ready == 0 {
			sd.Held = HeldNoReadyReplica
		}
		return sd, Forecast{}, carry, current
	}
	arrivals, extrapolated, _ := o.arrivalRate()
	partial = partial || extrapolated
	fc = o.Model.forecast(arrivals, t.SLO)
	fc.Backlog = (o.Waiting + o.Upstream) / fc.Horizon.Seconds()
	fc.Surge = RecentArrivals(o.Windows)
	sd.Raw = (fc.Rate() + fc.Backlog) / carry
	hold, keep := Held(""), 0
	switch {
	case partial:
		hold = HeldPartial
	case fc.Learning:
		hold, keep = HeldLearning, fc.Keep(carry, current)
	}
	sd.Desired, sd.Held = sizeSLO(sd.Raw, fc.Now/carry, headroom, current, keep, hold)
	// The replicas serving are sized for the demand expected, the demand now or the surge the
	// last scrape proves, whichever is most: a burst the forecast expects to end within a cold
	// start still needs serving replicas now, and the headroom (warm seats) is what gives them
	// — a seat's replica serves after its model load, within the burst. Waiting for the
	// minute's mean to show a burst took the seats 30–54 s into it.
	serving, _ = sizeSLO((max(fc.Expected, fc.Now, fc.Surge)+fc.Backlog)/carry, fc.Now/carry, headroom, current, keep, hold)
	sd.Value = metricValue(sd.Desired, 1)
	return sd, fc, carry, serving
}

// sizeSLO is the replicas for a forecast of raw replicas when the demand now needs nowNeed:
// replicas serving the demand now stay while it lasts, even where the forecast says a burst
// will be over before any new replica could serve; a scale-down keeps the policy's headroom on
// both and never happens while hold says why not (partial data), except that a headroom not
// learned yet (HeldLearning) keeps only keep replicas (Forecast.Keep).
func sizeSLO(raw, nowNeed, headroom float64, current, keep int, hold Held) (int, Held) {
	need := max(ceilCount(raw), min(current, ceilCount(nowNeed)))
	switch {
	case need >= current:
		return need, ""
	case hold != "" && hold != HeldLearning:
		return current, hold
	}
	down := min(current, max(ceilCount(raw/headroom), ceilCount(nowNeed/headroom)))
	if hold == HeldLearning && keep > down {
		return keep, hold
	}
	return down, ""
}

// swampRatio is how many times the requests its replicas finished may arrive in a window for
// their rate to be one they kept up with.
const swampRatio = 1.5

// windowSpanTolerance is how much shorter than the fleet's longest window a replica's may be
// for their rates to add up to the fleet's: a scrape's jitter, not a replica that joined
// within the window.
const windowSpanTolerance = 0.9
