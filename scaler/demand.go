package scaler

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// demandStats is what the demand's history says of one horizon: the persistence of a
// deviation from the baseline and the burst headroom, as of at.
type demandStats struct {
	at                    time.Time
	horizon               time.Duration
	quantile, maxHeadroom float64
	persistence, headroom float64
	// falling is the burst headroom judged on the points whose baseline was falling alone
	// (demandPoint.falling): the headroom a forecast on a fall asks for; 0 (none of its own)
	// while they are fewer than minFallingPairs, while the whole history's is still learning,
	// and without a burst headroom. headroom judges every point, climbs included, where the
	// baseline trails the demand — a trend's lag the headroom learns to cover, which a fall,
	// whose lagging baseline is above the demand, does not need.
	falling float64
	// learning is true while the history holds too few points to learn the burst headroom
	// from (minHeadroomSamples): the headroom is 1 then, and the fleet is shrunk no further
	// than it keeps (Forecast.Keep).
	learning bool
	// base is the newest baseline they were computed with: the level the latest deviations
	// were judged against (horizonPair.level).
	base float64
}

// levelShift is how far the baseline may move before the statistics are computed again
// (before statsEvery): a headroom judged before a step up was absorbed into the baseline
// multiplies the new baseline with the step itself, for up to a minute — enough for the HPA to
// take the fleet to its maximum and hold it there for its scale-down window.
const levelShift = 0.1

// stepUp is how far above its forecast the level the demand stayed at must be for a rise to be
// judged a step to that level rather than a burst over the forecast: at twice it the demand
// doubled within a horizon and stayed for a baseline window, which no trend's lag explains (a
// median over baselineWindow trails a trend by half of it; a day that climbs twentyfold in 90
// minutes lags 1.3×). Rises below it stay in the burst headroom, as the forecast's lag on a
// climb that the headroom covers — a step of less than twice that stays is still learned as
// headroom over its new level. The level of the newest baseline window's points is the newest
// baseline: a burst still under way after half a window counts against itself until it ends.
const stepUp = 2.0

// minLevelMove is the least move of the baseline, in requests per second, that levelMoved
// counts: a request a minute. A sparse fleet's median flips between nothing and a request in a
// while, which asks for no new statistics.
const minLevelMove = 1.0 / 60

// levelMoved reports whether the newest baseline is more than levelShift (and minLevelMove)
// away from the one the statistics were computed with.
func (m *FleetModel) levelMoved() bool {
	if len(m.demand) == 0 || m.stats.at.IsZero() {
		return false
	}
	d := math.Abs(m.demand[len(m.demand)-1].base - m.stats.base)
	return d > levelShift*m.stats.base && d > minLevelMove
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

// computeStats is the demand's statistics for horizon h as of now.
func (m *FleetModel) computeStats(h time.Duration, slo SLO, now time.Time) demandStats {
	pairs := m.pairs(h)
	st := demandStats{at: now, horizon: h, quantile: slo.HeadroomQuantile, maxHeadroom: slo.MaxHeadroom,
		persistence: persistence(pairs, h), headroom: 1}
	if len(m.demand) > 0 {
		st.base = m.demand[len(m.demand)-1].base
	}
	if slo.HeadroomQuantile > 0 {
		st.headroom, st.learning = headroom(pairs, h, slo)
		if !st.learning {
			st.falling = fallsHeadroom(pairs, h, slo)
		}
	}
	return st
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

// fallShare is how much of itself the baseline must lose over one horizon for a point to be
// judged falling: a twentieth. A noisy flat stretch's median slope flips sign from one
// evaluation to the next, and a fall judged on any negative slope took the falls' headroom
// where a burst met a flat minute (the mirrored Azure hour: 44 misses where it had 23, and as
// many at a hundredth); at a fiftieth nothing on the panel lost, and a twentieth keeps a
// margin from that edge (docs/economics.md).
const fallShare = 0.05

// minFallingPairs is the fewest falling points a headroom of their own is learned from: 15
// minutes of evaluations every 15 s.
const minFallingPairs = 60

// fallsHeadroom is the burst headroom of the falling points of pairs alone, 0 while they are
// fewer than minFallingPairs.
func fallsHeadroom(pairs []horizonPair, h time.Duration, slo SLO) float64 {
	var falls []horizonPair
	for _, hp := range pairs {
		if hp.p.falling(h) {
			falls = append(falls, hp)
		}
	}
	if len(falls) < minFallingPairs {
		return 0
	}
	if r, learning := headroom(falls, h, slo); !learning {
		return r
	}
	return 0
}

// falling reports whether p's baseline falls by more than fallShare of itself over h.
func (p demandPoint) falling(h time.Duration) bool {
	return p.slope*h.Seconds() < -fallShare*p.base
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
	if st.falling > 0 && last.mature() && last.falling(h) { // a slope across a gap is no fall
		f.Headroom = st.falling
	}
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
	// level is the baseline that came after then: the median of the baselineWindow that begins
	// there (the newest baseline where that window has not passed yet). A burst ends within it
	// and leaves it where the demand was before; a step up stays and raises it.
	level float64
}

// pairTolerance is how much earlier than one horizon after a point the point compared with it
// may be: two evaluations.
const pairTolerance = 30 * time.Second

// pairs are the history's mature points (a whole baseline window behind them) whose next
// horizon h has passed, with what came in it.
func (m *FleetModel) pairs(h time.Duration) []horizonPair {
	out := make([]horizonPair, 0, len(m.demand))
	end, later := 0, 0
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
		later = max(later, end)
		for later+1 < len(m.demand) && m.demand[later].at.Sub(m.demand[end].at) < baselineWindow &&
			m.demand[later+1].since.Equal(m.demand[end].since) { // not across a gap in the history
			later++
		}
		hp := horizonPair{p: p, then: m.demand[end].rate, level: m.demand[later].base}
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
// no deviation, so a burst under way is not the base of another), or against the level the
// demand then stayed at where that is stepUp times the forecast or more (a step up is a new
// level, not a burst to cover again above it), weighted by that demand (a burst's requests
// count as many times as they came) — between 1 and slo.MaxHeadroom. The
// noise of a smooth demand asks for little; bursts that no forecast sees coming ask for their
// height. learning is true (and the headroom 1) while fewer than minHeadroomSamples points can
// be judged.
func headroom(pairs []horizonPair, h time.Duration, slo SLO) (r float64, learning bool) {
	type ratio struct{ r, weight float64 }
	var ratios []ratio
	total := 0.0
	for _, hp := range pairs {
		// A step up the forecast did not see is a new level to follow (the demand now and its
		// trend size the fleet for it), not a burst to hold cover for on top of it.
		e := hp.p.predict(h, 0)
		if hp.level >= stepUp*e {
			e = hp.level
		}
		if e > 0 && hp.then > 0 {
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
