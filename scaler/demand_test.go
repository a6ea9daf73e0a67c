package scaler

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestHeadroomIgnoresImmatureForecasts: the first minutes of a history forecast from a
// baseline of a few points; the demand a cold start later against those is no burst, and the
// headroom is not learned from them (it held 2.3× for half an hour on the Azure hour).
func TestHeadroomIgnoresImmatureForecasts(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	slo := SLO{TTFT: 2, ColdStart: 3 * time.Minute, HeadroomQuantile: 0.99, MaxHeadroom: 3}
	m := FleetModel{}
	for i := range 80 { // 20 minutes; the first minute ramps up from 2 to 5 requests/s
		rate := 5.0
		if i < 4 {
			rate = 2 + float64(i)
		}
		m.record(start.Add(time.Duration(i)*15*time.Second), rate)
	}
	if f := m.forecast(5, slo); f.Headroom != 1 {
		t.Errorf("a steady 5 requests/s after a ramp at the start: headroom %v, want 1", f.Headroom)
	}
}

func TestForecast(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	slo := SLO{TTFT: 2, ColdStart: 2 * time.Minute}
	ramp := FleetModel{}
	rate := 0.0
	for i := range 81 { // 20 minutes rising 1 req/s a minute
		rate = 5 + float64(i)/4
		ramp.record(start.Add(time.Duration(i)*15*time.Second), rate)
	}
	if f := ramp.forecast(rate, slo); math.Abs(f.Expected-(rate+2)) > 0.3 || math.Abs(f.Persistence-1) > 0.05 {
		t.Errorf("a ramp of 1 req/s per minute, 2 minutes ahead of %v: expected %v (persistence %v), want about %v and 1", rate, f.Expected, f.Persistence, rate+2)
	}
	bursty := FleetModel{}
	for i := range 240 { // an hour at 4 req/s with a 12 req/s minute every 10 minutes
		rate = 4.0
		if i%40 >= 36 {
			rate = 12
		}
		bursty.record(start.Add(time.Duration(i)*15*time.Second), rate)
	}
	slo.HeadroomQuantile, slo.MaxHeadroom = 0.9, 3
	f := bursty.forecast(12, slo)
	if f.Persistence > 0.1 || math.Abs(f.Expected-4) > 0.2 {
		t.Errorf("in a burst that always ends within a cold start: persistence %v, expected %v; want about 0 and the baseline 4 (no replicas chased after it)", f.Persistence, f.Expected)
	}
	if math.Abs(f.Headroom-3) > 1e-9 || math.Abs(f.Rate()-12) > 0.6 {
		t.Errorf("bursts of 3× within a cold start of 2 min every 10 min (three tenths of the points see one coming): headroom %v (rate %v), want 3 at the 0.9 quantile", f.Headroom, f.Rate())
	}
	slo.HeadroomQuantile = 0.5
	if f := bursty.forecast(4, slo); f.Headroom != 1 {
		t.Errorf("at the median no burst is coming: headroom %v, want 1", f.Headroom)
	}
	slo.HeadroomQuantile, slo.MaxHeadroom = 0.9, 1.5
	if f := bursty.forecast(4, slo); f.Headroom != 1.5 {
		t.Errorf("maxHeadroom 1.5 caps it: headroom %v", f.Headroom)
	}
}

// youngBurstyModel is a fleet of capacity 0.5 requests/s per replica with 35 minutes of
// history at 4 requests/s and a 12 requests/s minute every 10 minutes, every 15 s: enough to
// learn a burst headroom of 3, too few points to learn that the bursts end within a cold start
// (persistence 1).
func youngBurstyModel(t *testing.T) *FleetModel {
	t.Helper()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &FleetModel{Capacity: 0.5}
	for i := range 140 {
		rate := 4.0
		if i%40 >= 36 {
			rate = 12
		}
		m.record(start.Add(time.Duration(i)*15*time.Second), rate)
	}
	return m
}

// TestBurstNotOnTopOfABurst: a fleet whose young history holds a few bursts has learned a
// burst headroom, but not yet that bursts end within a cold start (persistence 1). In the next
// burst the forecast is the burst itself; the headroom is over the baseline, so the burst is
// sized for once — not the headroom's height again on top of it (held-out seed 6's hour ordered
// 64 replicas for a 3× burst of a fleet of 12, every one ready after the burst).
func TestBurstNotOnTopOfABurst(t *testing.T) {
	m := youngBurstyModel(t)
	slo := SLO{TTFT: 2, ColdStart: 2 * time.Minute, HeadroomQuantile: 0.9, MaxHeadroom: 3}
	for _, tc := range []struct {
		name     string
		quantile float64
		now      float64
		wantRate float64
	}{
		{"between bursts: the baseline times the headroom", 0.9, 4, 12},
		{"a burst within the headroom: the headroom, not the burst times it", 0.9, 10, 12},
		{"a step beyond the headroom: the step", 0.9, 15, 15},
		{"a dip under a learned headroom of 1: the baseline", 0.5, 3, 4},
		{"no headroom asked for: the forecast alone, through a dip", 0, 3, 3},
	} {
		slo.HeadroomQuantile = tc.quantile
		f := m.forecast(tc.now, slo)
		if f.Persistence != 1 {
			t.Fatalf("%s: persistence %v, want 1 (too few pairs)", tc.name, f.Persistence)
		}
		if math.Abs(f.Rate()-tc.wantRate) > 0.01 {
			t.Errorf("%s: demand now %v (baseline %v, expected %v, headroom %v): rate %v, want %v", tc.name, tc.now, f.Baseline, f.Expected, f.Headroom, f.Rate(), tc.wantRate)
		}
	}
}

// TestHeadroomLearnedOverTheBaseline: on a young history (persistence 1) whose demand
// wanders 3–5 around 4, the headroom is how far the demand went above the baseline forecast
// (5/4), not above the last 15-second rate (5/3): what the fleet is sized on is the baseline
// times the headroom, and a noisy last rate asked for a third more than that needs.
func TestHeadroomLearnedOverTheBaseline(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := FleetModel{}
	for i := range 140 {
		m.record(start.Add(time.Duration(i)*15*time.Second), []float64{4, 3, 4, 5}[i%4])
	}
	f := m.forecast(4, SLO{TTFT: 2, ColdStart: 2 * time.Minute, HeadroomQuantile: 0.99, MaxHeadroom: 3})
	if f.Persistence != 1 || f.Base != 4 || math.Abs(f.Headroom-1.25) > 1e-9 {
		t.Errorf("demand 3–5 around 4: persistence %v, base %v, headroom %v; want 1, 4 and 1.25", f.Persistence, f.Base, f.Headroom)
	}
}

// TestForecastTrendNoFurtherThanFitted: a fleet's first minute rises from nothing to its load;
// that slope, fitted on 45 s, is followed for 45 s of a 200-s horizon, not the whole horizon
// (which asked for twice the replicas the load needed), while a ramp with minutes of history
// is followed all the way (TestForecast).
func TestForecastTrendNoFurtherThanFitted(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	slo := SLO{TTFT: 2, ColdStart: 200 * time.Second}
	young := FleetModel{}
	for i, rate := range []float64{1, 2.5, 3.5, 4.4} { // 15 s apart: 45 s of history
		young.record(start.Add(time.Duration(i)*15*time.Second), rate)
	}
	last := young.demand[len(young.demand)-1]
	if last.fitted != 45*time.Second || last.slope <= 0 {
		t.Fatalf("slope %v fitted over %v, want a rise fitted over 45s", last.slope, last.fitted)
	}
	f := young.forecast(4.4, slo)
	want := last.base + (4.4 - last.base) + last.slope*45
	if math.Abs(f.Expected-want) > 1e-9 || f.Expected > 4.4+last.slope*46 {
		t.Errorf("expected %v, want %v: the first minute's slope %v/s followed for 45 s, not %v", f.Expected, want, last.slope, slo.ColdStart)
	}
}

// TestAStepIsANewLevelNotABurst: demand that steps up and stays is a new level for the baseline
// to follow, not a burst to hold cover for on top of it: judged against the forecast before it,
// a 3× step taught a headroom of 3, and the fleet was sized for three times its new level (a
// step of the Azure hour, held-out, took the fleet to its maximum for a quarter of an hour). A
// burst of the same height that ends is still cover to hold; a rise of less than stepUp is the
// trend's lag, which the headroom covers as before.
func TestAStepIsANewLevelNotABurst(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	slo := SLO{TTFT: 2, ColdStart: 2 * time.Minute, HeadroomQuantile: 0.99, MaxHeadroom: 3}
	for _, tc := range []struct {
		name          string
		rate          func(minute float64) float64
		lo, hi        float64 // the headroom learned
		wantLevelMove bool
	}{
		{"a 3× step that stays", func(m float64) float64 { return map[bool]float64{true: 3, false: 9}[m < 30] }, 1, 1.05, true},
		{"a 2× step that stays", func(m float64) float64 { return map[bool]float64{true: 3, false: 6}[m < 30] }, 1, 1.05, true},
		{"a 3× burst of two minutes", func(m float64) float64 { return map[bool]float64{true: 9, false: 3}[m >= 30 && m < 32] }, 2.9, 3, false},
		{"a 1.5× step that stays: the baseline's lag, covered", func(m float64) float64 { return map[bool]float64{true: 3, false: 4.5}[m < 30] }, 1.4, 1.5, true},
	} {
		m := FleetModel{}
		var statsBefore demandStats
		for i := range 240 { // an hour, every 15 s; the change at minute 30
			at := start.Add(time.Duration(i) * 15 * time.Second)
			m.record(at, tc.rate(float64(i)/4))
			if i == 119 {
				statsBefore = m.computeStats(m.horizon(slo), slo, at)
			}
		}
		f := m.forecast(tc.rate(59.75), slo)
		if f.Headroom < tc.lo || f.Headroom > tc.hi {
			t.Errorf("%s: headroom %v, want %v–%v (rate %v on a baseline %v)", tc.name, f.Headroom, tc.lo, tc.hi, f.Rate(), f.Baseline)
		}
		m.stats = statsBefore
		if got := m.levelMoved(); got != tc.wantLevelMove {
			t.Errorf("%s: statistics of before the change judged to need computing again: %v, want %v (the baseline moved from %v to %v)", tc.name, got, tc.wantLevelMove, statsBefore.base, m.demand[len(m.demand)-1].base)
		}
	}
}

// TestLearnJudgesAStepOnceTheBaselineHasIt: the statistics are computed once a minute, but
// again as soon as the baseline moves by a tenth. A headroom a minute old, judged before a 3×
// step reached the baseline, multiplied the new baseline by the step's own height until the
// next minute — long enough for the HPA (up at once) to take the fleet to its maximum.
func TestLearnJudgesAStepOnceTheBaselineHasIt(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	slo := SLO{TTFT: 2, ColdStart: 2 * time.Minute, HeadroomQuantile: 0.99, MaxHeadroom: 3}
	windows := make([]ReplicaWindow, 4)
	for i := range windows {
		windows[i] = window(30, 30, 30, 0)
	}
	m := &FleetModel{}
	judged := false
	for i := range 240 { // an hour at 15 s; 3 requests/s, then 9 from minute 40
		rate := 3.0
		if i >= 160 {
			rate = 9
		}
		o := Observation{Ready: 4, Sampled: 4, Arrivals: rate, ArrivalsSampled: 4, Windows: windows,
			TTFTP95: math.NaN(), ITLP95: math.NaN(), PreemptionsPerMinute: math.NaN(), FollowReplicas: math.NaN()}
		m.Learn(o, slo, start.Add(time.Duration(i)*15*time.Second))
		if base := m.demand[len(m.demand)-1].base; base >= 6 {
			judged = true
			if f := m.forecast(rate, slo); f.Headroom > 1.5 {
				t.Fatalf("minute %.2f, the baseline at the step's level (%v): headroom %v, want the step judged as the new level (statistics of %s)",
					float64(i)/4, base, f.Headroom, m.stats.at.Format(time.TimeOnly))
			}
		}
	}
	if !judged {
		t.Fatal("the baseline never reached the step's level")
	}
}

// TestALevelIsOfItsOwnStretchOfHistory: the level a burst is judged against is taken within its
// stretch of history, not across a gap (the scaler restarted, the replicas joined): a burst
// shortly before a gap, after which the demand came back higher, is still a burst.
func TestALevelIsOfItsOwnStretchOfHistory(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	slo := SLO{TTFT: 2, ColdStart: 2 * time.Minute, HeadroomQuantile: 0.99, MaxHeadroom: 3}
	m := FleetModel{}
	for i := range 150 { // 37.5 minutes at 3 requests/s with a 9 requests/s burst at minutes 30–32
		rate := 3.0
		if i >= 120 && i < 128 {
			rate = 9
		}
		m.record(start.Add(time.Duration(i)*15*time.Second), rate)
	}
	for i := range 80 { // a gap of 20 minutes, then 20 minutes at 9 requests/s
		m.record(start.Add(time.Hour+time.Duration(i)*15*time.Second), 9)
	}
	pairs := m.pairs(m.horizon(slo))
	if h, _ := headroom(pairs, m.horizon(slo), slo); h < 2.9 {
		t.Errorf("a burst before a gap after which the demand came back at its height: headroom %v, want 3 (the burst judged within its own stretch)", h)
	}
}

// TestAFallAsksForTheFallsHeadroom: four hours of a demand that climbs from 4 to 16 requests/s
// over 20 minutes, stays 20, falls back over 20 and stays 20. On the climbs the baseline (a
// 10-minute median) trails the demand, and the headroom judged on every point learns that lag;
// on a fall the baseline is above the demand already, and the forecast asks for the headroom
// the falls' own history asked for — less. On a climb the headroom is the whole history's, as
// before; a flat, noisy history has no falls to learn from.
func TestAFallAsksForTheFallsHeadroom(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	slo := SLO{TTFT: 2, ColdStart: 3 * time.Minute, HeadroomQuantile: 0.99, MaxHeadroom: 3}
	at := func(i int) float64 { // every 15 s: 80 points up, 80 high, 80 down, 80 low
		switch j := i % 320; {
		case j < 80:
			return 4 + 12*float64(j)/80
		case j < 160:
			return 16
		case j < 240:
			return 16 - 12*float64(j-160)/80
		}
		return 4
	}
	history := func(n int) *FleetModel {
		m := &FleetModel{}
		for i := range n {
			m.record(start.Add(time.Duration(i)*15*time.Second), at(i))
		}
		return m
	}
	const climb, fall = 960 + 40, 960 + 200 // the fourth cycle's mid-climb and mid-fall
	climbing := history(climb + 1)
	up, upStats := climbing.forecast(at(climb), slo), climbing.computeStats(slo.ColdStart, slo, start)
	falling := history(fall + 1)
	down := falling.forecast(at(fall), slo)
	all := falling.computeStats(slo.ColdStart, slo, start)
	if all.headroom <= 1.05 {
		t.Fatalf("the whole history's headroom is %v: the climbs' lag should ask for more than 1.05", all.headroom)
	}
	if all.falling == 0 || all.falling >= all.headroom {
		t.Errorf("the falls' headroom is %v against the whole history's %v: want it learned, and lower", all.falling, all.headroom)
	}
	if down.Headroom != all.falling {
		t.Errorf("on a fall the forecast's headroom is %v, want the falls' %v (the whole history's is %v)", down.Headroom, all.falling, all.headroom)
	}
	if upStats.falling == 0 || upStats.falling == upStats.headroom || up.Headroom != upStats.headroom {
		t.Errorf("on a climb the forecast's headroom is %v, want the whole history's %v, not the falls' %v", up.Headroom, upStats.headroom, upStats.falling)
	}
	// Noise whose median wanders, no trend: its slope is negative half the time, never by a
	// twentieth of the baseline over a cold start.
	rng := rand.New(rand.NewPCG(7, 7))
	flat, negative := &FleetModel{}, 0
	for i := range 720 {
		flat.record(start.Add(time.Duration(i)*15*time.Second), 8+3*rng.Float64())
		if flat.demand[i].slope < 0 {
			negative++
		}
	}
	if negative < minFallingPairs {
		t.Fatalf("the noise's median fell on %d points: too few to tell a fall from a negative slope", negative)
	}
	if st := flat.computeStats(slo.ColdStart, slo, start); st.falling != 0 {
		t.Errorf("a flat, noisy history: falls' headroom %v, want none learned (no point falls by a twentieth)", st.falling)
	}
}
