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
}

// Clone is a copy of m that shares nothing with it.
func (m *FleetModel) Clone() FleetModel {
	c := *m
	c.demand = slices.Clone(m.demand)
	return c
}

// demandStats is what the demand's history says of one horizon: the persistence of a
// deviation from the baseline and the burst headroom, as of at.
type demandStats struct {
	at                    time.Time
	horizon               time.Duration
	quantile, maxHeadroom float64
	persistence, headroom float64
	// learning is true while the history holds too few points to learn the burst headroom
	// from (minHeadroomSamples): the headroom is 1 then, and the fleet is shrunk no further
	// than it keeps (Forecast.Keep).
	learning bool
}

// statsEvery is how often the demand's statistics are computed again (each is a pass over a
// day of history).
const statsEvery = time.Minute

// demandPoint is the demand at one evaluation: the rate measured, its baseline (the median
// over baselineWindow, which a burst shorter than half of it does not move) and the
// baseline's slope then.
type demandPoint struct {
	at                time.Time
	rate, base, slope float64
	// fitted is the span of history the slope was fitted over: a trend is projected no
	// further ahead than that (a minute's rise is no forecast of the next three).
	fitted time.Duration
	// since is when the stretch of history without a gap that this point ends began: a point
	// with less than baselineWindow of it behind has a baseline and a slope of a few samples,
	// a forecast the burst headroom and the persistence must not be judged by.
	since time.Time
}

// mature reports whether p had a whole baseline window of history behind it.
func (p demandPoint) mature() bool { return p.at.Sub(p.since) >= baselineWindow }

// historyGap is the longest time between two points of one stretch of history (replicas
// joining leave the history without a point for a window or two).
const historyGap = baselineWindow / 2

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
		good, bad := judge(fw.TTFT.Total(), fw.within(slo), attain)
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
				m.Capacity *= 1 + exploreRate*now.Sub(m.last).Minutes()
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
	if h := m.horizon(slo); now.Sub(st.at) >= statsEvery || st.horizon != h || st.quantile != slo.HeadroomQuantile || st.maxHeadroom != slo.MaxHeadroom {
		m.stats = m.computeStats(h, slo, now)
	}
}

// computeStats is the demand's statistics for horizon h as of now.
func (m *FleetModel) computeStats(h time.Duration, slo SLO, now time.Time) demandStats {
	pairs := m.pairs(h)
	st := demandStats{at: now, horizon: h, quantile: slo.HeadroomQuantile, maxHeadroom: slo.MaxHeadroom,
		persistence: persistence(pairs, h), headroom: 1}
	if slo.HeadroomQuantile > 0 {
		st.headroom, st.learning = headroom(pairs, h, slo)
	}
	return st
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
// between two bounds is judged at the upper one; docs/scaler.md). The ITL objective is on a
// request's mean time per output token: where the engine reports each request's
// (vllm:request_time_per_output_token_seconds, TPOT) the fraction within it multiplies the
// TTFT part (which requests missed both the histograms do not say; at the rates that matter
// independence and adding the misses differ by their product). Without it, a histogram of
// single tokens cannot give a request's mean: a request's mean is near the fleet's median
// token, so the objective counts as missed — at the fraction of tokens within it — only once
// the median token is over it (a fleet whose median token met a 100 ms objective missed it
// for 4.4 % of its requests on the Azure hour, and learned nothing from it).
func (w ReplicaWindow) within(slo SLO) float64 {
	f := w.TTFT.FractionAtOrBelowBound(slo.TTFT)
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

// horizon is how far ahead the demand is forecast: the trigger's coldStartSeconds, else the
// longest start-up seen, else DefaultColdStart.
func (m *FleetModel) horizon(slo SLO) time.Duration {
	switch {
	case slo.ColdStart > 0:
		return slo.ColdStart
	case m != nil && m.ColdStart > 0:
		return m.ColdStart
	}
	return DefaultColdStart
}

// baselineWindow is the span whose median demand is the baseline: bursts shorter than half of
// it leave it where it was.
const baselineWindow = 10 * time.Minute

// record appends the demand measured at now with its baseline and the baseline's slope (over
// the last baselineWindow).
func (m *FleetModel) record(now time.Time, rate float64) {
	first := len(m.demand) // the oldest point within baselineWindow
	for first > 0 && now.Sub(m.demand[first-1].at) < baselineWindow {
		first--
	}
	recent := make([]float64, 0, len(m.demand)-first+1)
	for _, q := range m.demand[first:] {
		recent = append(recent, q.rate)
	}
	recent = append(recent, rate)
	slices.Sort(recent)
	p := demandPoint{at: now, rate: rate, base: recent[len(recent)/2], since: now}
	if n := len(m.demand); n > 0 && now.Sub(m.demand[n-1].at) <= historyGap {
		p.since = m.demand[n-1].since
	}
	var n, sx, sy, sxx, sxy float64
	add := func(q demandPoint) {
		x := q.at.Sub(now).Seconds()
		n++
		sx, sy, sxx, sxy = sx+x, sy+q.base, sxx+x*x, sxy+x*q.base
	}
	for _, q := range m.demand[first:] {
		add(q)
	}
	add(p)
	if den := n*sxx - sx*sx; n >= 3 && den > 0 {
		p.slope = (n*sxy - sx*sy) / den
		p.fitted = now.Sub(m.demand[first].at)
	}
	m.demand = append(m.demand, p)
}

// Forecast is the demand the fleet is sized for, in requests per second, one cold start
// ahead — when a replica ordered now can serve: the baseline (the recent median), its trend,
// and the part of the deviation from it that the fleet's own history says outlives a cold
// start (Persistence: 0 for bursts that always end sooner, 1 for steps that stay); held at
// least at the baseline times the burst headroom its history asks for (Rate).
type Forecast struct {
	// Now is the demand measured now; Base its baseline; Persistence the share of Now − Base
	// expected to remain a horizon ahead; Expected the demand expected then; Baseline the
	// baseline expected then (its trend followed, no deviation kept); Headroom the burst
	// multiplier of Baseline (1 without history).
	Now, Base, Persistence, Expected, Baseline, Headroom float64
	// Horizon is how far ahead it looks.
	Horizon time.Duration
	// Backlog is the rate that drains the requests waiting now over one horizon.
	Backlog float64
	// Surge is the demand the replicas' last scrape interval proves (RecentArrivals): a burst
	// at nearly its height one scrape after it came, where Now, a minute's mean, shows a
	// quarter of it. It sizes the replicas serving (the warm seats they take), not the fleet.
	Surge float64
	// Learning is true while the fleet's history is too short to learn the burst headroom
	// from (Headroom is 1 then): the forecast may grow the fleet but shrinks it no further
	// than it keeps (Keep), since what the fleet holds may be the only cover it has for a
	// burst it has not measured yet.
	Learning bool
	// Peak and Inherited are, while Learning, what the fleet keeps: the largest demand its
	// history has forecast (each point's rate and trend, Expected at a persistence of 1), and
	// the replicas ready when that history began — a fleet the scaler found, sized by what it
	// knew before it restarted. Replicas ordered beyond both drained a backlog (a fleet's
	// first minutes against a queue, a burst's queue), which no demand of the history needs
	// and which is no cover for a burst either: the Azure hour held 15 replicas for the 12
	// its largest forecast needed, for a quarter of an hour. With no history at all (bare)
	// the whole fleet is kept.
	Peak      float64
	Inherited int
	bare      bool
	// covered is true when a burst headroom was asked for and has been learned: Rate holds the
	// baseline times it (even a headroom of 1 holds the baseline through a dip).
	covered bool
}

// Rate is the demand sized for: the expected demand, or the expected baseline times the burst
// headroom where that is more. The headroom is how far above the baseline the fleet's demand
// has gone within a horizon; a burst under way is already in Expected, and multiplying it by
// the headroom again sized for a burst on top of a burst (a 3× burst read as 8× the baseline,
// the fleet ordered to its maximum, every replica ready after the burst had ended). Without
// a burst headroom (none asked for, or none learned yet) it is the expected demand alone.
func (f Forecast) Rate() float64 {
	if !f.covered {
		return f.Expected
	}
	return max(f.Expected, f.Baseline*f.Headroom)
}

// predict is the demand expected h after p with persistence rho: the trend is followed for h,
// but no further than the history it was fitted on (a young history's first rise — a fleet's
// first minute, the first points after a gap — projected a whole cold start ahead ordered
// twice the fleet the demand needed).
func (p demandPoint) predict(h time.Duration, rho float64) float64 {
	return max(0, p.base+rho*(p.rate-p.base)+max(0, p.slope)*min(h, p.fitted).Seconds())
}

// minHeadroomSamples is the fewest past points whose next horizon is known that a persistence
// or a burst headroom is learned from.
const minHeadroomSamples = 10

// forecast is the demand forecast from the latest point recorded, rate being the demand
// measured now (the same as that point's, or the point's own without one).
func (m *FleetModel) forecast(rate float64, slo SLO) Forecast {
	h := m.horizon(slo)
	f := Forecast{Now: rate, Base: rate, Persistence: 1, Expected: rate, Baseline: rate, Headroom: 1, Horizon: h, Learning: slo.HeadroomQuantile > 0}
	if m == nil || len(m.demand) == 0 {
		f.bare = true
		return f
	}
	last := m.demand[len(m.demand)-1]
	last.rate = rate
	st := m.stats
	if st.at.IsZero() || st.horizon != h || st.quantile != slo.HeadroomQuantile || st.maxHeadroom != slo.MaxHeadroom {
		st = m.computeStats(h, slo, last.at)
	}
	f.Base, f.Persistence, f.Headroom, f.Learning = last.base, st.persistence, st.headroom, st.learning
	f.Expected, f.Baseline = last.predict(h, f.Persistence), last.predict(h, 0)
	f.covered = slo.HeadroomQuantile > 0 && !f.Learning
	if f.Learning {
		f.Inherited, f.Peak = m.inherited, f.Expected
		for _, p := range m.demand {
			f.Peak = max(f.Peak, p.predict(h, 1))
		}
	}
	return f
}

// Keep is the replicas a fleet of current keeps at carry requests/s a replica while its
// forecast is Learning (0 otherwise): the fleet it began with or what its history's largest
// forecast needs, whichever is more, and no more than it has; the whole fleet without a
// history.
func (f Forecast) Keep(carry float64, current int) int {
	switch {
	case !f.Learning:
		return 0
	case f.bare || carry <= 0:
		return current
	}
	return min(current, max(f.Inherited, ceilCount(f.Peak/carry)))
}

// horizonPair is a past point and the demand one horizon after it.
type horizonPair struct {
	p    demandPoint
	then float64
}

// pairTolerance is how much earlier than one horizon after a point the point compared with it
// may be: two evaluations.
const pairTolerance = 30 * time.Second

// pairs are the history's mature points (a whole baseline window behind them) whose next
// horizon h has passed, with what came in it.
func (m *FleetModel) pairs(h time.Duration) []horizonPair {
	out := make([]horizonPair, 0, len(m.demand))
	end := 0
	for i, p := range m.demand {
		if m.demand[len(m.demand)-1].at.Sub(p.at) < h {
			break
		}
		end = max(end, i)
		for end+1 < len(m.demand) && m.demand[end+1].at.Sub(p.at) <= h {
			end++
		}
		if m.demand[end].at.Sub(p.at) < h-pairTolerance || !p.mature() {
			continue // no point a horizon later (the history has a gap), or no forecast yet
		}
		hp := horizonPair{p: p, then: m.demand[end].rate}
		out = append(out, hp)
	}
	return out
}

// minPersistencePairs is the fewest past points with a horizon after them that a persistence is
// learned from: half an hour of evaluations every 15 s. Until then what is measured is trusted
// (persistence 1), which reacts to a ramp at once; a share fitted on minutes of noise would
// say nothing persists and lag it.
const minPersistencePairs = 120

// persistence is the least-squares share of a deviation from the baseline that is still there
// a horizon later, between 0 and 1; 1 (trust what is measured) without enough history or
// deviations.
func persistence(pairs []horizonPair, h time.Duration) float64 {
	var num, den float64
	for _, hp := range pairs {
		d := hp.p.rate - hp.p.base
		num += d * (hp.then - hp.p.predict(h, 0))
		den += d * d
	}
	if len(pairs) < minPersistencePairs || den <= 1e-9 {
		return 1
	}
	return min(max(num/den, 0), 1)
}

// headroom is the burst headroom the fleet's own history asks for: the smallest multiple of
// the baseline forecast that covered slo.HeadroomQuantile of the requests — each point's demand
// against the baseline forecast for it one horizon earlier (Forecast.Baseline: the trend kept,
// no deviation, so a burst under way is not the base of another), weighted by that demand (a
// burst's requests count as many times as they came) — between 1 and slo.MaxHeadroom. The
// noise of a smooth demand asks for little; bursts that no forecast sees coming ask for their
// height. learning is true (and the headroom 1) while fewer than minHeadroomSamples points can
// be judged.
func headroom(pairs []horizonPair, h time.Duration, slo SLO) (r float64, learning bool) {
	type ratio struct{ r, weight float64 }
	var ratios []ratio
	total := 0.0
	for _, hp := range pairs {
		if e := hp.p.predict(h, 0); e > 0 && hp.then > 0 {
			ratios = append(ratios, ratio{hp.then / e, hp.then})
			total += hp.then
		}
	}
	if len(ratios) < minHeadroomSamples {
		return 1, true
	}
	slices.SortFunc(ratios, func(a, b ratio) int { return cmp.Compare(a.r, b.r) })
	r, covered := ratios[len(ratios)-1].r, 0.0
	// A q-quantile needs 1/(1−q) samples to mean anything: until the history holds them the
	// headroom is the largest ratio seen — less known, more held.
	if float64(len(ratios))*(1-slo.HeadroomQuantile) >= 1 {
		for _, x := range ratios {
			if covered += x.weight; covered >= slo.HeadroomQuantile*total {
				r = x.r
				break
			}
		}
	}
	capH := slo.MaxHeadroom
	if capH < 1 {
		capH = DefaultMaxHeadroom
	}
	return min(max(r, 1), capH), false
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

// windowsWhole reports whether every ready replica has a window and the demand they measure
// (WindowArrivals) is whole enough to keep in the history: the longest spans at least
// minWindowSpan, and every window of a replica that was serving before it (not Joined) spans
// about as long. A window from a first page that came after the replica's first requests
// misses them, and minutes of such joins read as dips and bursts the history would learn from.
func (o Observation) windowsWhole() bool {
	if len(o.Windows) < o.Ready || len(o.Windows) == 0 {
		return false
	}
	longest := slices.MaxFunc(o.Windows, func(a, b ReplicaWindow) int { return cmp.Compare(a.Span, b.Span) }).Span
	if longest < minWindowSpan {
		return false
	}
	for _, w := range o.Windows {
		if !w.Joined && float64(w.Span) < windowSpanTolerance*float64(longest) {
			return false
		}
	}
	return true
}

// WindowArrivals is the fleet's arrival rate over the replicas' windows ws and how many had a
// window. A replica that was serving through its window adds its rate; one that joined inside
// the longest window (Joined: its window starts at its ready time, counters at zero) adds what
// it has had over that longest window. While replicas join, their windows are short and hold
// their share since they joined, and the older ones' windows still hold the minutes they took
// a larger share of every request: rates summed counted the demand more than once (a
// 5.1-requests/s minute read as 9 as nine replicas joined four), and the fleet was sized for
// it. Counting a joined replica from its ready time, not its first scrape, misses none of its
// requests (a window from its first page undercounted a burst and shrank the fleet in it).
func WindowArrivals(ws []ReplicaWindow) (rate float64, n int) {
	var longest time.Duration
	for _, w := range ws {
		if w.Span > 0 {
			longest = max(longest, w.Span)
			n++
		}
	}
	if n == 0 {
		return math.NaN(), 0
	}
	for _, w := range ws {
		switch {
		case w.Span <= 0:
		case w.Joined:
			rate += w.Arrived / longest.Seconds()
		default:
			rate += w.Arrived / w.Span.Seconds()
		}
	}
	return rate, n
}

// RecentArrivals is the fleet's arrival rate over the replicas' last intervals (Recent) as
// far as the requests counted prove it: the rate less surgeSigmas of its Poisson noise. A step
// in the demand shows at nearly its full height one scrape after it came, where the minute's
// window shows a quarter of it; a scrape's noise proves nothing (taken at face value it turned
// warm seats into replicas between bursts, and the bursts found none ready). 0 when a window
// has no last interval; replicas without a window add nothing (a lower bound, as Arrivals).
func RecentArrivals(ws []ReplicaWindow) float64 {
	rate, variance := 0.0, 0.0
	for _, w := range ws {
		if w.Recent <= 0 {
			return 0
		}
		s, n := w.Recent.Seconds(), w.RecentArrived
		if !(n >= 0) { // a count that went down (or none): nothing arrived
			n = 0
		}
		rate += n / s
		variance += n / (s * s)
	}
	return max(0, rate-surgeSigmas*math.Sqrt(variance))
}

// RecentWindow is the span of a window's last interval (ReplicaWindow.Recent): a scrape.
const RecentWindow = 15 * time.Second

// surgeSigmas is how many standard deviations of its Poisson noise a scrape's arrivals must
// rise by to count as demand (three: about one chance in a thousand per scrape).
const surgeSigmas = 3

// arrivalRate is the fleet's arrival rate: Arrivals scaled from the replicas with a window to
// every ready one (extrapolated true), since a replica that has just become ready takes its
// share of the arrivals at once — a lower bound still, as a router that prefers the least
// loaded sends a new replica more. ok is false when no replica has a window.
func (o Observation) arrivalRate() (rate float64, extrapolated, ok bool) {
	if math.IsNaN(o.Arrivals) || o.ArrivalsSampled == 0 {
		return 0, false, false
	}
	if o.ArrivalsSampled < o.Ready {
		return o.Arrivals * float64(o.Ready) / float64(o.ArrivalsSampled), true, true
	}
	return o.Arrivals, false, true
}
