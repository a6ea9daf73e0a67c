package scaler

import (
	"errors"
	"math"
	"testing"
	"time"
)

// sloTrigger is the SLO trigger of the tests: first token within 2 s for 99 % of requests.
var sloTrigger = map[string]string{"ttftSLOSeconds": "2", "coldStartSeconds": "200", "headroomQuantile": "0"}

// hist is a TTFT window histogram with the given first tokens at or below each bound.
func hist(bounds []float64, counts ...float64) Histogram {
	return Histogram{Bounds: append(bounds, math.Inf(1)), Counts: counts}
}

// window is one replica's one-minute window: finished requests, first tokens and how many
// of them came within 1 s (the rest after 5 s), and requests waiting throughout.
func window(finished, firstTokens, within, waiting float64) ReplicaWindow {
	return ReplicaWindow{Span: time.Minute, Finished: finished, Arrived: finished,
		TTFT: hist([]float64{1, 5}, within, within, firstTokens), Waiting: waiting}
}

func TestParseTriggerSLO(t *testing.T) {
	tr := trig(t, map[string]string{"ttftSLOSeconds": "2", "itlSLOSeconds": "0.15"})
	want := SLO{TTFT: 2, ITL: 0.15, Attainment: DefaultSLOAttainment, HeadroomQuantile: DefaultHeadroomQuantile, MaxHeadroom: DefaultMaxHeadroom}
	if tr.SLO != want {
		t.Errorf("SLO = %+v, want %+v", tr.SLO, want)
	}
	if s := tr.Signals(); len(s) != 1 || s[0] != SignalSLO {
		t.Errorf("Signals() = %v, want [slo]: the SLO alone sizes the fleet", s)
	}
	for _, tc := range []struct {
		md      map[string]string
		wantKey string
	}{
		{map[string]string{"ttftSLOSeconds": "0"}, KeyTTFTSLOSeconds},
		{map[string]string{"ttftSLOSeconds": "2", "sloAttainment": "1"}, KeySLOAttainment},
		{map[string]string{"ttftSLOSeconds": "2", "sloAttainment": "0.3"}, KeySLOAttainment},
		{map[string]string{"ttftSLOSeconds": "2", "headroomQuantile": "2"}, KeyHeadroomQuantile},
		{map[string]string{"ttftSLOSeconds": "2", "maxHeadroom": "0.5"}, KeyMaxHeadroom},
		{map[string]string{"ttftSLOSeconds": "2", "coldStartSeconds": "0"}, KeyColdStartSeconds},
		{map[string]string{"targetQueueDepth": "4", "sloAttainment": "0.9"}, KeySLOAttainment},
		{map[string]string{"ttftSLOSeconds": "2", "role": "decode"}, KeyTTFTSLOSeconds},
		{map[string]string{"ttftSLOSeconds": "2", "itlSLOSeconds": "0.1", "role": "prefill"}, KeyITLSLOSeconds},
		{map[string]string{}, KeyTTFTSLOSeconds},
	} {
		_, err := ParseTrigger(tc.md)
		var ik *InvalidKeyError
		if !errors.As(err, &ik) || ik.Key != tc.wantKey {
			t.Errorf("ParseTrigger(%v) = %v, want an InvalidKeyError on %s", tc.md, err, tc.wantKey)
		}
	}
}

func TestFractionAtOrBelow(t *testing.T) {
	h := hist([]float64{1, 2.5}, 50, 80, 100)
	for _, tc := range []struct{ x, want float64 }{{0.5, 0.25}, {1, 0.5}, {2, 0.7}, {2.5, 0.8}, {10, 0.8}} {
		if got := h.FractionAtOrBelow(tc.x); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("FractionAtOrBelow(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	if got := (Histogram{}).FractionAtOrBelow(1); !math.IsNaN(got) {
		t.Errorf("empty histogram: %v, want NaN", got)
	}
}

func TestFleetModelLearn(t *testing.T) {
	slo := trig(t, sloTrigger).SLO
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		start   FleetModel
		windows []ReplicaWindow
		want    float64
		wantMax float64
	}{
		{name: "a window at its limit sets the capacity just under its rate", windows: []ReplicaWindow{window(30, 30, 10, 5)}, want: 0.45},
		{name: "a window that met the SLO only bounds it from below", windows: []ReplicaWindow{window(30, 30, 30, 0)}, wantMax: 0.5},
		{name: "one slow request of a few is no miss, nor a clear pass", start: FleetModel{Capacity: 0.6}, windows: []ReplicaWindow{window(6, 6, 5, 2)}, want: 0.6},
		{name: "a miss without a queue is no limit", start: FleetModel{Capacity: 0.6}, windows: []ReplicaWindow{window(12, 12, 2, 0)}, want: 0.6},
		{name: "a miss at its limit below the capacity lowers it", start: FleetModel{Capacity: 0.6}, windows: []ReplicaWindow{window(24, 24, 4, 3)}, want: 0.5},
		{name: "a miss above the capacity says nothing new", start: FleetModel{Capacity: 0.3}, windows: []ReplicaWindow{window(24, 24, 4, 3)}, want: 0.3},
		{name: "meeting the SLO above the capacity raises it", start: FleetModel{Capacity: 0.3}, windows: []ReplicaWindow{window(30, 30, 30, 0)}, want: 0.4, wantMax: 0.5},
		{name: "a short window says nothing", start: FleetModel{Capacity: 0.3},
			windows: []ReplicaWindow{{Span: 10 * time.Second, Finished: 30, TTFT: hist([]float64{1, 5}, 30, 30, 30)}}, want: 0.3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.start
			m.Learn(Observation{Windows: tc.windows, Arrivals: math.NaN()}, slo, now)
			if math.Abs(m.Capacity-tc.want) > 1e-9 || math.Abs(m.GoodMax-tc.wantMax) > 1e-9 {
				t.Errorf("Capacity, GoodMax = %v, %v; want %v, %v", m.Capacity, m.GoodMax, tc.want, tc.wantMax)
			}
		})
	}
}

func TestFleetModelExplores(t *testing.T) {
	slo := trig(t, sloTrigger).SLO
	m := FleetModel{Capacity: 0.5}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	loaded := Observation{Windows: []ReplicaWindow{window(25, 25, 25, 0)}, Arrivals: math.NaN()} // 0.42/s: 83 % of capacity
	m.Learn(loaded, slo, now)
	m.Learn(loaded, slo, now.Add(time.Minute))
	if want := 0.5 * (1 + exploreRate); math.Abs(m.Capacity-want) > 1e-9 {
		t.Errorf("a loaded fleet that meets its SLO: capacity %v, want %v (it may carry more)", m.Capacity, want)
	}
	idle := Observation{Windows: []ReplicaWindow{window(6, 6, 6, 0)}, Arrivals: math.NaN()}
	m.Learn(idle, slo, now.Add(2*time.Minute))
	if want := 0.5 * (1 + exploreRate); math.Abs(m.Capacity-want) > 1e-9 {
		t.Errorf("an idle fleet: capacity %v, want %v (meeting the SLO far below it says nothing)", m.Capacity, want)
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

func TestDecideSLO(t *testing.T) {
	tr := trig(t, sloTrigger)
	model := &FleetModel{Capacity: 0.5}
	nan := math.NaN()
	tests := []struct {
		name     string
		obs      Observation
		want     int
		wantHeld Held
	}{
		{name: "sizes the demand at the learned capacity",
			obs: Observation{Ready: 4, Sampled: 4, Arrivals: 3.2, ArrivalsSampled: 4, Model: model}, want: 7},
		{name: "starting replicas never hold growth beyond them",
			obs: Observation{Ready: 4, Sampled: 4, Starting: 2, Arrivals: 4.9, ArrivalsSampled: 4, Model: model}, want: 10},
		{name: "starting replicas count for the demand they were added for",
			obs: Observation{Ready: 4, Sampled: 4, Starting: 3, Arrivals: 3.2, ArrivalsSampled: 4, Model: model}, want: 7},
		{name: "a backlog is drained over one cold start, not sized as demand",
			obs: Observation{Ready: 4, Sampled: 4, Arrivals: 3, Waiting: 200, ArrivalsSampled: 4, Model: model}, want: 8},
		{name: "replicas serving a burst stay while it lasts",
			obs: Observation{Ready: 10, Sampled: 10, Arrivals: 4.8, ArrivalsSampled: 10, Model: burstModel(t)}, want: 10},
		{name: "a scale-down never goes below what the demand now needs",
			// The burst is forecast to end (expected ~1.5/s: 3 replicas), but 3.2/s now need 7;
			// removing replicas keeps the policy's 0.8 on them: 8.
			obs: Observation{Ready: 10, Sampled: 10, Arrivals: 3.2, ArrivalsSampled: 10, Model: burstModel(t)}, want: 8},
		{name: "scale-down keeps the policy's headroom",
			obs: Observation{Ready: 10, Sampled: 10, Arrivals: 3.2, ArrivalsSampled: 10, Model: model}, want: 8},
		{name: "no scale-down on partial data",
			obs: Observation{Ready: 10, Sampled: 8, Arrivals: 1, ArrivalsSampled: 8, Model: model}, want: 10, wantHeld: HeldPartial},
		{name: "nothing learned: hold",
			obs: Observation{Ready: 4, Sampled: 4, Arrivals: 30, ArrivalsSampled: 4, Model: &FleetModel{}}, want: 4, wantHeld: HeldLearning},
		{name: "no arrival rate: hold",
			obs: Observation{Ready: 4, Sampled: 4, Arrivals: nan, Model: model}, want: 4, wantHeld: HeldLearning},
		{name: "before a capacity is known the best rate served within the SLO sizes it",
			obs: Observation{Ready: 2, Sampled: 2, Arrivals: 3, ArrivalsSampled: 2, Model: &FleetModel{GoodMax: 0.25}}, want: 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.obs.TTFTP95, tc.obs.ITLP95, tc.obs.PreemptionsPerMinute, tc.obs.FollowReplicas = nan, nan, nan, nan
			d, err := DefaultPolicy.Decide(tc.obs, tr)
			if err != nil {
				t.Fatal(err)
			}
			sd, _ := d.Signal(SignalSLO)
			if sd.Desired != tc.want || sd.Held != tc.wantHeld {
				t.Errorf("slo: %d held %q, want %d held %q (raw %v)", sd.Desired, sd.Held, tc.want, tc.wantHeld, sd.Raw)
			}
			if got := math.Ceil(math.Round(sd.Value*1000) / targetMilli(sd.Target)); d.Desired > 0 && int(got) != sd.Desired {
				t.Errorf("the value makes the HPA compute %v replicas, want %d", got, sd.Desired)
			}
		})
	}
}

// burstModel has learned that bursts of this fleet end within a cold start: the demand is 1.5
// requests per second with 6 for one minute in every ten.
func burstModel(t *testing.T) *FleetModel {
	t.Helper()
	m := &FleetModel{Capacity: 0.5}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 240 {
		rate := 1.5
		if i%40 >= 36 {
			rate = 6
		}
		m.record(start.Add(time.Duration(i)*15*time.Second), rate)
	}
	if f := m.forecast(4.8, trig(t, sloTrigger).SLO); f.Expected > 2 {
		t.Fatalf("the burst model expects %v a cold start ahead: it should know its bursts end", f.Expected)
	}
	return m
}

// BenchmarkSLODecision is one evaluation of the SLO signal for a fleet of 64 replicas with a
// day of demand history: the lesson (Learn, with its statistics refreshed every statsEvery)
// and the decision.
func BenchmarkSLODecision(b *testing.B) {
	tr, err := ParseTrigger(map[string]string{"ttftSLOSeconds": "2", "itlSLOSeconds": "0.15"})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &FleetModel{Capacity: 0.6}
	for i := range 5760 { // a day at 15 s
		rate := 10 + 5*math.Sin(float64(i)/900)
		if i%360 < 8 {
			rate *= 3
		}
		m.record(start.Add(time.Duration(i)*15*time.Second), rate)
	}
	windows := make([]ReplicaWindow, 64)
	for i := range windows {
		windows[i] = window(30, 30, 30, 0)
	}
	o := Observation{Ready: 64, Sampled: 64, Arrivals: 20, ArrivalsSampled: 64, Windows: windows,
		TTFTP95: math.NaN(), ITLP95: math.NaN(), PreemptionsPerMinute: math.NaN(), FollowReplicas: math.NaN()}
	now := start.Add(24 * time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(15 * time.Second)
		m.Learn(o, tr.SLO, now)
		o.Model = m
		if _, err := DefaultPolicy.Decide(o, tr); err != nil {
			b.Fatal(err)
		}
	}
}
