package simulate

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFrontierSizes(t *testing.T) {
	got := frontierSizes(1, 40)
	want := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 20, 22, 24, 27, 30, 33, 37, 40}
	if !slices.Equal(got, want) {
		t.Errorf("frontierSizes(1, 40) = %v, want %v (every size to 16, then about an eighth, and the largest)", got, want)
	}
}

func TestFrontierAt(t *testing.T) {
	fr := Frontier{{N: 2, GPUHours: 2, AttainableViolation: 100}, {N: 4, GPUHours: 4, AttainableViolation: 20}, {N: 8, GPUHours: 8, AttainableViolation: 0}}
	for _, tc := range []struct {
		gpuHours, want float64
		in             bool
	}{{3, 60, true}, {4, 20, true}, {6, 10, true}, {1, 100, false}, {9, 0, false}} {
		if got, in := fr.At(tc.gpuHours); math.Abs(got-tc.want) > 1e-9 || in != tc.in {
			t.Errorf("At(%v) = %v, %v; want %v, %v", tc.gpuHours, got, in, tc.want, tc.in)
		}
	}
}

// TestFrontierAndOracle: on a short day, the frontier falls as fleets grow and stops at the
// first fleet with no attainable violation; the oracle, planned from it, costs less than that
// fleet and violates no more than the frontier does at its own GPU-hours.
func TestFrontierAndOracle(t *testing.T) {
	trace := shortTrace(t, 5)
	f := l4(t)
	f.WarmUp = 5 * time.Minute
	sizes, err := SizesWithGPUs(f.Family, 1) // one replica a node: GPU-hours follow the replicas
	if err != nil {
		t.Fatal(err)
	}
	f.Sizes = sizes
	fr, err := MeasureFrontier(f, trace, 1, f.Max)
	if err != nil {
		t.Fatal(err)
	}
	if len(fr) < 2 {
		t.Fatalf("frontier %+v: want several fleets", fr)
	}
	for i := 1; i < len(fr); i++ {
		if fr[i].N <= fr[i-1].N || fr[i].GPUHours < fr[i-1].GPUHours {
			t.Errorf("frontier not ordered by size and cost: %d (%.2f GPU-hours) then %d (%.2f)", fr[i-1].N, fr[i-1].GPUHours, fr[i].N, fr[i].GPUHours)
		}
	}
	last := fr[len(fr)-1]
	for _, p := range fr[:len(fr)-1] {
		if p.AttainableViolation == 0 {
			t.Errorf("fleet %d already met the SLO for every attainable request, yet %d was measured too", p.N, last.N)
		}
	}
	if last.AttainableViolation != 0 && last.N != f.Max {
		t.Errorf("the sweep stopped at %d with %d violations", last.N, last.AttainableViolation)
	}
	o, err := NewOracle(f, fr)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Max(o.Schedule); got > last.N {
		t.Errorf("the oracle plans %d replicas somewhere, more than the fixed fleet %d that met the SLO throughout", got, last.N)
	}
	res, err := RunInference(f, trace, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.GPUHours >= last.GPUHours {
		t.Errorf("the oracle used %.2f GPU-hours, no fewer than the fixed fleet of %d (%.2f)", res.GPUHours, last.N, last.GPUHours)
	}
	if at, _ := fr.At(res.GPUHours); float64(res.AttainableViolations()) > at {
		t.Errorf("the oracle violated %d attainable requests at %.2f GPU-hours; the frontier there %.1f", res.AttainableViolations(), res.GPUHours, at)
	}
}

func TestOracleOrdersOneColdStartAhead(t *testing.T) {
	o := &Oracle{Schedule: []int{2, 2, 6, 3, 1}, Stretch: 5 * time.Minute, ColdStart: 4 * time.Minute, Sync: 15 * time.Second}
	for _, tc := range []struct {
		now  time.Duration
		want int
	}{
		{0, 2},                // the next 4 minutes are stretch 0
		{6 * time.Minute, 6},  // stretch 2 begins within a cold start: order its 6 now
		{12 * time.Minute, 6}, // in stretch 2
		{16 * time.Minute, 3}, // stretch 3; stretch 4 needs fewer
		{21 * time.Minute, 1}, // the last stretch
		{40 * time.Minute, 1}, // past the plan: its last stretch
	} {
		if got, ok := o.Step(tc.now, View{}); !ok || got != tc.want {
			t.Errorf("Step(%s) = %d, %v; want %d", tc.now, got, ok, tc.want)
		}
	}
}

func TestTraceWarmUp(t *testing.T) {
	f := l4(t) // cold start: 2 s + 110 s + 30 s + 60 s = 3m22s
	for _, tc := range []struct{ span, want time.Duration }{
		{time.Hour, 3 * (3*time.Minute + 22*time.Second)}, // three cold starts, more than a tenth
		{6 * time.Hour, 30 * time.Minute},                 // a tenth, capped at DefaultWarmUp
		{4 * time.Hour, 24 * time.Minute},                 // a tenth
		{10 * time.Minute, 5 * time.Minute},               // at most half
	} {
		if got := TraceWarmUp(f, tc.span); got != tc.want {
			t.Errorf("TraceWarmUp(%s) = %s, want %s", tc.span, got, tc.want)
		}
	}
}

func TestSLOTriggerIsTheSLO(t *testing.T) {
	md := SLOTrigger(SLO{TTFT: 2 * time.Second, ITL: 150 * time.Millisecond, Timeout: time.Minute})
	if md["ttftSLOSeconds"] != "2" || md["itlSLOSeconds"] != "0.15" || len(md) != 2 {
		t.Errorf("SLOTrigger = %v, want the SLO and nothing per replica", md)
	}
	if _, err := NewBerth(BerthName, md, BerthBehavior, 15*time.Second, 1, 8); err != nil {
		t.Errorf("the scaler refuses it: %v", err)
	}
}

func TestBurstBlindScalesThePlan(t *testing.T) {
	plan := &Oracle{Schedule: []int{2, 3, 5}, Stretch: 5 * time.Minute, Sync: 15 * time.Second}
	for _, tc := range []struct {
		headroom float64
		now      time.Duration
		want     int
	}{
		{1, 0, 2},
		{1.5, 0, 3},
		{1.5, 5 * time.Minute, 5}, // 4.5 rounds up
		{2, 10 * time.Minute, 10},
		{2.5, 10 * time.Minute, 13},
		{1.25, 10 * time.Minute, 7}, // 6.25
	} {
		b := &BurstBlind{Plan: plan, Headroom: tc.headroom}
		if got, ok := b.Step(tc.now, View{}); !ok || got != tc.want {
			t.Errorf("%s at %s = %d, %v; want %d", b.Name(), tc.now, got, ok, tc.want)
		}
	}
	if got := (&BurstBlind{Plan: plan, Headroom: 1.25}).Name(); got != "burst-blind oracle ×1.25" {
		t.Errorf("Name() = %q", got)
	}
	if _, ok := (&BurstBlind{Plan: plan, Headroom: 2}).Step(time.Second, View{}); ok {
		t.Error("acted between the plan's syncs")
	}
}

func TestGPUHoursFor(t *testing.T) {
	run := func(gpuHours float64, violations int) *InferenceResult {
		return &InferenceResult{GPUHours: gpuHours, Requests: 1000, Good: 1000 - violations}
	}
	rs := []*InferenceResult{run(30, 10), run(10, 500), run(20, 100)} // out of order on purpose
	for _, tc := range []struct {
		violations float64
		want       float64
		ok         bool
	}{
		{1000, 10, true}, // the cheapest already does
		{500, 10, true},
		{300, 15, true}, // halfway from 500 to 100
		{100, 20, true},
		{55, 25, true},
		{5, 30, false}, // none reaches it: the costliest
	} {
		got, ok := GPUHoursFor(rs, tc.violations)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("GPUHoursFor(%v) = %v, %v; want %v, %v", tc.violations, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := GPUHoursFor(nil, 1); ok {
		t.Error("no runs reached a count")
	}
}

// TestBurstBlindLimit: on a short day with bursts, the plan of the day without them misses
// the bursts' requests; headroom buys them back at a cost, and the report says what the
// oracle's violations cost a policy that does not see the bursts coming.
func TestBurstBlindLimit(t *testing.T) {
	s := DefaultSynthetic
	s.Duration, s.Period, s.PeakAt = 40*time.Minute, 40*time.Minute, 20*time.Minute
	s.MeanRate, s.Diurnal, s.Seed = 1.2, 0.3, 7
	s.BurstEvery, s.BurstLength, s.BurstFactor = 8*time.Minute, 2*time.Minute, 3
	trace, err := s.Generate()
	if err != nil {
		t.Fatal(err)
	}
	s.BurstEvery = 0
	free, err := s.Generate()
	if err != nil {
		t.Fatal(err)
	}
	f := l4(t)
	f.WarmUp = 5 * time.Minute
	if f.Sizes, err = SizesWithGPUs(f.Family, 1); err != nil {
		t.Fatal(err)
	}
	blind, err := burstBlind(f, trace, free)
	if err != nil {
		t.Fatal(err)
	}
	if len(blind) != len(BurstBlindHeadrooms) {
		t.Fatalf("%d burst-blind runs; want one per headroom (%d)", len(blind), len(BurstBlindHeadrooms))
	}
	first, last := blind[0], blind[len(blind)-1]
	if first.AttainableViolations() == 0 {
		t.Fatalf("the burst-free plan met every burst (%s): the day's bursts asked for nothing", first.Autoscaler)
	}
	if last.GPUHours <= first.GPUHours || last.AttainableViolations() >= first.AttainableViolations() {
		t.Errorf("headroom bought nothing: %s %.2f GPU-hours, %d violating; %s %.2f, %d",
			first.Autoscaler, first.GPUHours, first.AttainableViolations(), last.Autoscaler, last.GPUHours, last.AttainableViolations())
	}
	var md strings.Builder
	r := &Report{Fleet: f, Inference: []*InferenceResult{{Autoscaler: (&Oracle{}).Name(), Requests: 100, Good: 99, GPUHours: first.GPUHours}}, BurstBlind: blind}
	if err := r.Markdown(&md, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### The burst-blind limit", "| ×1 |", "| ×3 |", "twice the oracle's"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the report has no %q:\n%s", want, md.String())
		}
	}
}

// TestBurstBlindTableBounds: a count no burst-blind run reached is reported as a bound — the
// limit pays more than its costliest run, so the oracle's ratio is a floor and a policy's a
// ceiling.
func TestBurstBlindTableBounds(t *testing.T) {
	run := func(name string, gpuHours float64, violations int) *InferenceResult {
		return &InferenceResult{Autoscaler: name, GPUHours: gpuHours, Requests: 1000, Good: 1000 - violations}
	}
	blind := []*InferenceResult{run("burst-blind oracle ×1", 10, 500), run("burst-blind oracle ×3", 30, 100)}
	oracle := run((&Oracle{}).Name(), 10, 60)
	var b strings.Builder
	burstBlindTable(&b, blind, []*InferenceResult{run(BerthName, 33, 50), oracle, run("other", 20, 300)}, oracle)
	for _, want := range []string{
		"| the oracle's violations | 60 | more than 30.0 | > 3.00× the oracle's 10.0 GPU-hours |",
		"| twice the oracle's | 120 | 29.0 | 2.90× the oracle's 10.0 GPU-hours |",
		"| berth | 50 | more than 30.0 | berth pays < 1.10× (33.0 GPU-hours) |",
		"| other | 300 | 20.0 | other pays 1.00× (20.0 GPU-hours) |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table has no %q:\n%s", want, b.String())
		}
	}
}
