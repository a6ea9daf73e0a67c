package scaler

import (
	"errors"
	"math"
	"testing"
	"time"
)

// sloTrigger is the SLO trigger of the tests: first token within 2 s for 99 % of requests.
var sloTrigger = map[string]string{"ttftSLOSeconds": "2", "coldStartSeconds": "200", "headroomQuantile": "0"}

// headroomTrigger is sloTrigger with the default burst headroom.
var headroomTrigger = map[string]string{"ttftSLOSeconds": "2", "coldStartSeconds": "200"}

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
	draining := window(30, 30, 10, 5)
	draining.Arrived = 20 // ten fewer arrived than finished: a backlog from earlier drains
	late := window(30, 30, 10, 5)
	late.TTFT = hist([]float64{1, 2.5, 5}, 10, 12, 30, 30) // 18 of 30 over 2.5 s
	nearly := window(30, 30, 10, 0)
	nearly.TTFT = hist([]float64{1, 2.5, 5}, 10, 30, 30, 30) // 20 between 1 s and 2.5 s
	tests := []struct {
		name    string
		start   FleetModel
		windows []ReplicaWindow
		want    float64
		wantMax float64
	}{
		{name: "a fleet at its limit sets the capacity at a share of its rate", windows: []ReplicaWindow{window(30, 30, 10, 5)}, want: 0.375},
		{name: "a fleet that met the SLO only bounds it from below", windows: []ReplicaWindow{window(30, 30, 30, 0)}, wantMax: 0.5},
		{name: "one slow request of a few is no miss, nor a clear pass", start: FleetModel{Capacity: 0.6}, windows: []ReplicaWindow{window(6, 6, 5, 2)}, want: 0.6},
		{name: "a miss without a queue is no limit", start: FleetModel{Capacity: 0.6}, windows: []ReplicaWindow{window(12, 12, 2, 0)}, want: 0.6},
		{name: "a miss while a backlog drains is no limit", start: FleetModel{Capacity: 0.6}, windows: []ReplicaWindow{draining}, want: 0.6},
		{name: "a miss at its limit below the capacity lowers it", start: FleetModel{Capacity: 0.6}, windows: []ReplicaWindow{window(24, 24, 4, 3)}, want: 0.5},
		{name: "a miss above the capacity says nothing new", start: FleetModel{Capacity: 0.3}, windows: []ReplicaWindow{window(24, 24, 4, 3)}, want: 0.3},
		{name: "meeting the SLO above the capacity raises it", start: FleetModel{Capacity: 0.3}, windows: []ReplicaWindow{window(30, 30, 30, 0)}, want: 0.4, wantMax: 0.5},
		{name: "first tokens between the buckets around the SLO count as within it", start: FleetModel{Capacity: 0.3}, windows: []ReplicaWindow{nearly}, want: 0.4, wantMax: 0.5},
		{name: "first tokens past the bucket above the SLO are misses", start: FleetModel{Capacity: 0.6}, windows: []ReplicaWindow{late}, want: 0.55},
		{name: "the fleet is judged as one: its replicas' rates average", start: FleetModel{Capacity: 0.6},
			windows: []ReplicaWindow{window(36, 36, 6, 3), window(12, 12, 2, 3)}, want: 0.5},
		{name: "one replica's slow minute among fast ones is no miss of the fleet's", start: FleetModel{Capacity: 0.3},
			windows: []ReplicaWindow{window(30, 30, 30, 0), window(30, 30, 30, 0), window(30, 30, 30, 0), window(30, 30, 29, 0)}, want: 0.4, wantMax: 0.5},
		{name: "a replica that joined within the window is left out", start: FleetModel{Capacity: 0.6},
			windows: []ReplicaWindow{window(24, 24, 4, 3), {Span: 20 * time.Second, Finished: 1, Arrived: 30, TTFT: hist([]float64{1, 5}, 1, 1, 1)}}, want: 0.5},
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

// TestWithinITL: a request meets an ITL objective on its own mean time per output token. Where
// the engine reports it (vllm:request_time_per_output_token_seconds) the share within it counts;
// without it only a median token over the objective does.
func TestWithinITL(t *testing.T) {
	slo := trig(t, map[string]string{"ttftSLOSeconds": "2", "itlSLOSeconds": "0.1"}).SLO
	bounds := []float64{0.05, 0.1, 0.15}
	w := window(100, 100, 100, 0) // every first token within 2 s
	w.ITL = hist(bounds, 1000, 9000, 10000, 10000)
	for _, tc := range []struct {
		name string
		tpot Histogram
		want float64
	}{
		{name: "no requests' means: the median token met it, nothing counts", want: 1},
		{name: "the requests' means: 4 of 100 over it", tpot: hist(bounds, 50, 96, 100, 100), want: 0.96},
		{name: "the requests' means, all within", tpot: hist(bounds, 50, 100, 100, 100), want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.TPOT = tc.tpot
			if got := w.within(slo, 0); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("within = %v, want %v", got, tc.want)
			}
		})
	}
	w.TTFT = hist([]float64{1, 5}, 90, 90, 100) // 10 first tokens late too
	w.TPOT = hist(bounds, 50, 96, 100, 100)
	if got, want := w.within(slo, 0), 0.9*0.96; math.Abs(got-want) > 1e-9 {
		t.Errorf("late first tokens and slow tokens: within = %v, want %v (either misses it)", got, want)
	}
}

// TestFleetModelLearnsITL: replicas whose requests' tokens come too slowly for the ITL objective
// are at their limit whether or not anything waits (vLLM admits up to 256 sequences before
// anything does, and the batch is what slows the tokens) — unless they were swamped, when a
// cold replica's batch fills.
func TestFleetModelLearnsITL(t *testing.T) {
	slo := trig(t, map[string]string{"ttftSLOSeconds": "2", "itlSLOSeconds": "0.1", "coldStartSeconds": "200", "headroomQuantile": "0"}).SLO
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bounds := []float64{0.05, 0.1, 0.15}
	slow := window(24, 24, 24, 0)            // 0.4/s, no queue, every first token within 2 s
	slow.TPOT = hist(bounds, 10, 18, 24, 24) // 6 of 24 requests over 100 ms a token
	fast := slow
	fast.TPOT = hist(bounds, 10, 24, 24, 24)
	swamped := slow
	swamped.Arrived = 60 // 2.5 times what finished
	shrinking := slow
	shrinking.Arrived = 20 // the fleet drained: more finished than came, nothing waiting
	queued := swamped
	queued.Waiting = 3 // swamped with a queue: the queue's rule, as before
	for _, tc := range []struct {
		name   string
		start  FleetModel
		w      ReplicaWindow
		want   float64
		wantGM float64
	}{
		{name: "slow tokens without a queue lower the capacity", start: FleetModel{Capacity: 0.6}, w: slow, want: 0.5},
		{name: "slow tokens without a queue set a first capacity", w: slow, want: 0.3},
		{name: "tokens within it: a good window", start: FleetModel{Capacity: 0.3}, w: fast, want: 0.35, wantGM: 0.4},
		{name: "a swamped replica's slow tokens teach nothing", start: FleetModel{Capacity: 0.6}, w: swamped, want: 0.6},
		{name: "slow tokens as the batch shrinks are the larger batch's before", start: FleetModel{Capacity: 0.6}, w: shrinking, want: 0.6},
		{name: "a swamped fleet with a queue learns as before", w: queued, want: 0.3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.start
			m.Learn(Observation{Windows: []ReplicaWindow{tc.w}, Arrivals: math.NaN()}, slo, now)
			if math.Abs(m.Capacity-tc.want) > 1e-9 || math.Abs(m.GoodMax-tc.wantGM) > 1e-9 {
				t.Errorf("Capacity, GoodMax = %v, %v; want %v, %v", m.Capacity, m.GoodMax, tc.want, tc.wantGM)
			}
		})
	}
}

// TestFleetWindowMixedTPOT: a fleet some of whose replicas do not report their requests' own
// times per token (a rolling upgrade from an older vLLM) is judged on its tokens alone, not on
// the share of the replicas that do.
func TestFleetWindowMixedTPOT(t *testing.T) {
	slo := trig(t, map[string]string{"ttftSLOSeconds": "2", "itlSLOSeconds": "0.1"}).SLO
	bounds := []float64{0.05, 0.1, 0.15}
	newer := window(24, 24, 24, 0)
	newer.TPOT = hist(bounds, 10, 18, 24, 24) // 6 of 24 over
	older := window(24, 24, 24, 0)
	for _, tc := range []struct {
		name string
		ws   []ReplicaWindow
		want float64
	}{
		{name: "every replica reports it", ws: []ReplicaWindow{newer, newer}, want: 0.75},
		{name: "one does not", ws: []ReplicaWindow{newer, older}, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fw, _, ok := fleetWindow(tc.ws)
			if got := fw.within(slo, 0); !ok || math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("within = %v (ok %v), want %v", got, ok, tc.want)
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
	// An hour without a window (a fleet at zero, a scrape outage) is no hour of evidence: the
	// next loaded window explores over its own span only.
	gap := FleetModel{Capacity: 0.5}
	gap.Learn(loaded, slo, now)
	gap.Learn(loaded, slo, now.Add(time.Hour))
	if want := 0.5 * (1 + exploreRate); math.Abs(gap.Capacity-want) > 1e-9 {
		t.Errorf("a loaded window an hour after the last: capacity %v, want %v (one minute's exploration)", gap.Capacity, want)
	}
	// A fleet held at a third of its capacity by a burst headroom of 3 meets its SLO whatever
	// a replica carries: it must not raise the capacity (it did, 0.5 % a minute without end,
	// until a burst found the fleet a third too small).
	held := FleetModel{Capacity: 0.6}
	third := Observation{Windows: []ReplicaWindow{window(12, 12, 12, 0)}, Arrivals: math.NaN()} // 0.2/s
	for i := range 60 {
		held.Learn(third, slo, now.Add(time.Duration(i)*time.Minute))
	}
	if held.Capacity != 0.6 {
		t.Errorf("a fleet at a third of its capacity for an hour: capacity %v, want 0.6", held.Capacity)
	}
}

// TestLearnKeepsTheFleetItBeganWith: the replicas ready at the history's first point are the
// fleet the scaler found; replicas that join later (ordered for a queue) are not. While it
// learns, the fleet keeps that or what the history's largest demand needs, whichever is more.
func TestLearnKeepsTheFleetItBeganWith(t *testing.T) {
	tr := trig(t, headroomTrigger)
	obs := func(ready int, whole bool) Observation {
		ws := make([]ReplicaWindow, ready)
		for i := range ws {
			ws[i] = window(30, 30, 30, 0)
		}
		if !whole {
			ws[0].Span = 20 * time.Second // a window too short for the history
		}
		return Observation{Ready: ready, Sampled: ready, Arrivals: 0.5 * float64(ready), ArrivalsSampled: ready, Windows: ws}
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &FleetModel{}
	m.Learn(obs(2, false), tr.SLO, now) // no point recorded: nothing inherited yet
	for i, ready := range []int{3, 12, 14} {
		m.Learn(obs(ready, true), tr.SLO, now.Add(time.Duration(i+1)*15*time.Second))
	}
	if m.inherited != 3 || len(m.demand) != 3 {
		t.Fatalf("inherited %d over %d points, want 3 over 3", m.inherited, len(m.demand))
	}
	largest := 0.0
	for _, p := range m.demand {
		largest = max(largest, p.rate)
	}
	// The demand now is far below the history's largest: the peak is the history's.
	f := m.forecast(0.1, tr.SLO)
	if !f.Learning || f.Inherited != 3 || f.Peak < largest || largest <= 1 {
		t.Fatalf("forecast %+v over a history whose largest rate is %v: want learning, 3 inherited and a peak of at least that", f, largest)
	}
	for _, tc := range []struct {
		name     string
		carry    float64
		current  int
		wantKeep int
	}{
		{"the peak needs 5 of 14", f.Peak / 5, 14, 5},
		{"the peak needs 2: the 3 it began with", f.Peak / 2, 14, 3},
		{"never more than it has", f.Peak / 20, 14, 14},
		{"no capacity known: all of it", 0, 14, 14},
	} {
		if got := f.Keep(tc.carry, tc.current); got != tc.wantKeep {
			t.Errorf("%s: Keep = %d, want %d", tc.name, got, tc.wantKeep)
		}
	}
	if got := (Forecast{Learning: true, bare: true}).Keep(0.5, 14); got != 14 {
		t.Errorf("a forecast with no history keeps %d of 14, want all", got)
	}
	if got := (Forecast{}).Keep(0.5, 14); got != 0 {
		t.Errorf("a learned forecast keeps %d, want none (the headroom sizes it)", got)
	}
	// A silence longer than the history empties it: the history begins again with the fleet
	// ready then, not the one of a day before.
	m.Learn(obs(5, true), tr.SLO, now.Add(demandHistory+time.Hour))
	if m.inherited != 5 || len(m.demand) != 1 {
		t.Errorf("after a day's silence: inherited %d over %d points, want 5 over 1", m.inherited, len(m.demand))
	}
}

// TestBurstDecision: the decision in a burst of a young bursty history (headroom 3 over a
// baseline of 4 requests/s, capacity 0.5): the fleet is sized for the baseline times the
// headroom, and the headroom replicas (what warm seats hold) are what that is beyond the burst
// — none once the burst is above it (the seats are what the burst uses).
func TestBurstDecision(t *testing.T) {
	tr := trig(t, map[string]string{"ttftSLOSeconds": "2", "coldStartSeconds": "120", "headroomQuantile": "0.9"})
	nan := math.NaN()
	for _, tc := range []struct {
		arrivals                float64
		wantDesired, wantExtras int
	}{
		{4, 24, 14}, // between bursts: 12 / 0.5, beyond the 10 serving (the 8 the demand needs, within the policy's 0.8)
		{10, 24, 4}, // a burst within the headroom: still 24 (the old product ordered 60), 20 of them serving it
		{15, 30, 0}, // a burst above it: what it needs, no headroom on top
	} {
		o := Observation{Ready: 10, Sampled: 10, Arrivals: tc.arrivals, ArrivalsSampled: 10, Model: youngBurstyModel(t),
			TTFTP95: nan, ITLP95: nan, PreemptionsPerMinute: nan, FollowReplicas: nan}
		d, err := DefaultPolicy.Decide(o, tr)
		if err != nil {
			t.Fatal(err)
		}
		if sd, _ := d.Signal(SignalSLO); sd.Desired != tc.wantDesired || d.Headroom != tc.wantExtras {
			t.Errorf("%v requests/s: %d replicas (held %q), %d of them headroom; want %d and %d", tc.arrivals, sd.Desired, sd.Held, d.Headroom, tc.wantDesired, tc.wantExtras)
		}
	}
}

// TestSeatsServeABurst: a fleet whose history says its bursts end within a cold start
// (persistence 0) holds its burst headroom as warm seats. In a burst the forecast stays at the
// baseline — replicas on fresh nodes would come after the burst — but the demand now needs
// serving replicas, and the seats are what give them: the seats stand in for less of the
// headroom, and the fleet asks for the replicas that take them (a seat's replica serves after
// its model load, within the burst). Sized on the forecast alone, the seats stayed seats
// through the burst.
func TestSeatsServeABurst(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &FleetModel{Capacity: 0.5}
	for i := range 240 { // an hour at 4 req/s with a 12 req/s minute every 10 minutes
		rate := 4.0
		if i%40 >= 36 {
			rate = 12
		}
		m.record(start.Add(time.Duration(i)*15*time.Second), rate)
	}
	tr := trig(t, map[string]string{"ttftSLOSeconds": "2", "coldStartSeconds": "120", "headroomQuantile": "0.9", "warmSeats": "16"})
	nan := math.NaN()
	for _, tc := range []struct {
		arrivals              float64
		recent                float64 // each of the 8 replicas' requests in its last 15 s (0: no interval)
		wantServing, wantSeat int
	}{
		{4, 0, 8, 16},  // 24 replicas' worth for the baseline times 3: 8 serving, 16 as seats
		{12, 0, 24, 0}, // the burst: every seat taken by a serving replica
		// The burst's first scrape: 12 req/s in the last 15 s (the minute's mean still 4) proves
		// 12 − 3·√180/15 ≈ 9.3 req/s, 19 replicas' worth: 11 seats taken at once.
		{4, 22.5, 19, 5},
		// A scrape's noise (5 req/s in the last 15 s) proves no more than the minute's 4.
		{4, 9.375, 8, 16},
	} {
		o := Observation{Ready: 8, Sampled: 8, Arrivals: tc.arrivals, ArrivalsSampled: 8, Model: m,
			TTFTP95: nan, ITLP95: nan, PreemptionsPerMinute: nan, FollowReplicas: nan}
		for range 8 {
			if tc.recent > 0 {
				o.Windows = append(o.Windows, ReplicaWindow{Span: time.Minute, Arrived: tc.arrivals * 60 / 8, Recent: 15 * time.Second, RecentArrived: tc.recent})
			}
		}
		d, err := DefaultPolicy.Decide(o, tr)
		if err != nil {
			t.Fatal(err)
		}
		if d.Forecast.Persistence > 0.1 {
			t.Fatalf("persistence %v, want about 0", d.Forecast.Persistence)
		}
		if sd, _ := d.Signal(SignalSLO); sd.Desired != tc.wantServing || d.WarmSeats != tc.wantSeat {
			t.Errorf("%v requests/s (%v per replica in the last 15 s): %d serving replicas and %d seats (expected demand %v, surge %v, headroom %v), want %d and %d",
				tc.arrivals, tc.recent, sd.Desired, d.WarmSeats, d.Forecast.Expected, d.Forecast.Surge, d.Forecast.Headroom, tc.wantServing, tc.wantSeat)
		}
	}
}

func TestDecideSLO(t *testing.T) {
	tr, hr := trig(t, sloTrigger), trig(t, headroomTrigger)
	model := &FleetModel{Capacity: 0.5}
	steady, young := demandModel(t, 40*time.Minute, 3.2), demandModel(t, 12*time.Minute, 3.2)
	// young's history began with the fleet of ten it has (a scaler restarted under it);
	// started began with one replica, the rest ordered to drain the queue of its first
	// minutes; peaked forecast 4.2 requests/s once, which nine replicas carry.
	young.inherited = 10
	started := demandModel(t, 12*time.Minute, 3.2)
	started.inherited = 1
	peaked := demandModel(t, 12*time.Minute, 3.2)
	peaked.inherited = 1
	peaked.demand[len(peaked.demand)/2].rate = 4.2
	nan := math.NaN()
	tests := []struct {
		name     string
		obs      Observation
		trigger  *Trigger // tr when nil
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
		{name: "a burst headroom learned from the history lets the fleet shrink",
			obs: Observation{Ready: 10, Sampled: 10, Arrivals: 3.2, ArrivalsSampled: 10, Model: steady}, trigger: hr, want: 8},
		{name: "no scale-down before the burst headroom is learned",
			obs: Observation{Ready: 10, Sampled: 10, Arrivals: 3.2, ArrivalsSampled: 10, Model: model}, trigger: hr, want: 10, wantHeld: HeldLearning},
		{name: "a history too short to judge a burst by keeps the fleet it began with",
			obs: Observation{Ready: 10, Sampled: 10, Arrivals: 3.2, ArrivalsSampled: 10, Model: young}, trigger: hr, want: 10, wantHeld: HeldLearning},
		{name: "a history too short to judge a burst by keeps what its largest forecast needs",
			obs: Observation{Ready: 10, Sampled: 10, Arrivals: 3.2, ArrivalsSampled: 10, Model: peaked}, trigger: hr, want: 9, wantHeld: HeldLearning},
		{name: "a history too short to judge a burst by keeps no replicas a backlog ordered",
			// 3.2/s need 7; removing replicas keeps the policy's 0.8 on them: 8.
			obs: Observation{Ready: 10, Sampled: 10, Arrivals: 3.2, ArrivalsSampled: 10, Model: started}, trigger: hr, want: 8},
		{name: "a history too short to judge a burst by still grows the fleet",
			obs: Observation{Ready: 4, Sampled: 4, Arrivals: 3.2, ArrivalsSampled: 4, Model: young}, trigger: hr, want: 7},
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
			tt := tc.trigger
			if tt == nil {
				tt = tr
			}
			d, err := DefaultPolicy.Decide(tc.obs, tt)
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

// demandModel has a capacity of 0.5 requests/s per replica and a history of span of a steady
// demand of rate requests/s, evaluated every 15 s: 40 minutes are enough to learn the burst
// headroom from (1 on a steady demand), 12 are not (a baseline window and a cold start leave
// no point to judge).
func demandModel(t *testing.T, span time.Duration, rate float64) *FleetModel {
	t.Helper()
	m := &FleetModel{Capacity: 0.5}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for at := time.Duration(0); at <= span; at += 15 * time.Second {
		m.record(start.Add(at), rate)
	}
	f := m.forecast(rate, trig(t, headroomTrigger).SLO)
	if learned := span >= 30*time.Minute; f.Learning == learned || f.Headroom != 1 {
		t.Fatalf("%s of a steady %v requests/s: headroom %v (learning %v)", span, rate, f.Headroom, f.Learning)
	}
	return m
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

// TestMissFloor: the share of first tokens a fleet misses the TTFT objective for without a
// queue is measured per block of floorBlockSpan and is the calmest quarter's of the last day
// (at least the calmest block), once floorMinBlocks are there; a block with a queue, or with
// fewer than floorMinRequests first tokens, is none.
func TestMissFloor(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type win struct {
		n, missed float64
		queued    bool
	}
	calm := []win{{300, 30, false}} // 10 % missed
	tests := []struct {
		name   string
		blocks [][]win // each block's windows, a minute apart; a block starts every floorBlockSpan
		want   float64
	}{
		{name: "no block ended yet", blocks: [][]win{calm}, want: 0},
		{name: "too few blocks yet", blocks: [][]win{calm, calm, {}}, want: 0},
		{name: "the calmest block's share", blocks: [][]win{calm, {{300, 24, false}, {300, 24, false}}, {{300, 60, false}}, {}}, want: 0.08},
		{name: "the calmest quarter's, pooled", blocks: [][]win{calm, {{300, 15, false}}, calm, calm, {{200, 14, false}}, calm, calm, calm, {}}, want: 29.0 / 500},
		{name: "a block with a queue is no floor", blocks: [][]win{calm, calm, calm, {{300, 3, false}, {300, 3, true}}, {}}, want: 0.1},
		{name: "a block of fewer first tokens than the least is no floor", blocks: [][]win{calm, calm, calm, {{floorMinRequests - 0.1, 0, false}}, {}}, want: 0.1},
		{name: "a block of the least first tokens is one", blocks: [][]win{calm, calm, calm, {{floorMinRequests, 0, false}}, {}}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f missFloor
			for i, b := range tc.blocks {
				start := at.Add(time.Duration(i) * floorBlockSpan)
				for j, w := range b {
					f.add(start.Add(time.Duration(j)*time.Minute), w.n, w.missed, w.queued)
				}
				if len(b) == 0 { // the last block: a window that ends the one before
					f.add(start, 0, 0, false)
				}
			}
			if got := f.share(); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("share = %v, want %v", got, tc.want)
			}
		})
	}

	// A window after a gap ends the block it finds and starts its own; blocks age out after a
	// day, the calmest first, and all go when the objective changes.
	f := missFloor{ttft: 1}
	for i, share := range []float64{0.06, 0.08, 0.1} {
		f.add(at.Add(time.Duration(i)*floorBlockSpan), 300, 300*share, false)
	}
	f.add(at.Add(5*time.Hour), 300, 27, false) // ends the third block, starts a fourth
	f.add(at.Add(5*time.Hour+floorBlockSpan), 0, 0, false)
	if got := f.share(); math.Abs(got-0.06) > 1e-9 || len(f.blocks) != 4 {
		t.Fatalf("share = %v over %d blocks, want 0.06 over 4", got, len(f.blocks))
	}
	f.age(at.Add(demandHistory+time.Minute), 1)
	if got := f.share(); math.Abs(got-0.08) > 1e-9 {
		t.Errorf("a day after the calmest block: share = %v, want the next calmest, 0.08", got)
	}
	f.age(at.Add(demandHistory+time.Minute), 2)
	if len(f.blocks) != 0 || f.share() != 0 {
		t.Errorf("another objective: %d blocks, share %v; want none", len(f.blocks), f.share())
	}
}

// TestUnattainable: the miss floor is left out of a window's judgement where it is more than
// half what the attainment target allows and at most maxUnattainable.
func TestUnattainable(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		floor, attain, want float64
	}{
		{floor: 0.004, attain: 0.99, want: 0},
		{floor: 0.006, attain: 0.99, want: 0.006},
		{floor: 0.04, attain: 0.9, want: 0},
		{floor: 0.06, attain: 0.9, want: 0.06},
		{floor: 0.004, attain: 0, want: 0}, // the default target, 0.99
		{floor: 0.006, attain: 0, want: 0.006},
		{floor: 0.25, attain: 0.99, want: 0.25},
		{floor: 0.3, attain: 0.99, want: 0}, // out of reach: every request counts
	} {
		var m FleetModel
		for i := range floorMinBlocks {
			m.floor.blocks = append(m.floor.blocks, floorBlock{at: at.Add(time.Duration(i) * floorBlockSpan), share: tc.floor, requests: 300})
		}
		if got := m.Unattainable(tc.attain); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("floor %v, target %v: Unattainable = %v, want %v", tc.floor, tc.attain, got, tc.want)
		}
	}
	var none *FleetModel
	if none.Unattainable(0.99) != 0 || none.MissFloor() != 0 {
		t.Errorf("a nil model has a floor")
	}
}

// TestLearnJudgesTheRequestsAReplicaCanServe: with a 1 s first-token objective 8.5 % of
// conversation prompts prefill for longer on an idle replica. Judged on every request, no
// window met a 99 % target and the capacity was only ever lowered; judged on the requests a
// replica can serve, the fleet's calm windows meet it and its loaded ones still miss it (here
// a 2 s objective, judged at the histogram's 5 s bound, and 8 % of first tokens past it).
func TestLearnJudgesTheRequestsAReplicaCanServe(t *testing.T) {
	slo := trig(t, sloTrigger).SLO
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	calm := Observation{Windows: []ReplicaWindow{window(30, 300, 276, 0)}, Arrivals: math.NaN()} // 8 % missed, nothing waits
	var m FleetModel
	for i := range 31 { // three whole blocks: the third ends at minute 30
		m.Learn(calm, slo, at.Add(time.Duration(i)*time.Minute))
	}
	if m.GoodMax != 0 {
		t.Fatalf("GoodMax = %v, want 0: minute 30 is judged before the block it ends counts", m.GoodMax)
	}
	if u := m.Unattainable(slo.Attainment); math.Abs(u-0.08) > 1e-9 {
		t.Fatalf("Unattainable = %v, want 0.08", u)
	}
	m.Learn(calm, slo, at.Add(31*time.Minute))
	if m.GoodMax != 0.5 {
		t.Errorf("GoodMax = %v, want 0.5: the calm window meets the SLO once the floor is known", m.GoodMax)
	}
	if c := m.Clone(); len(c.floor.blocks) > 0 {
		for i := range c.floor.blocks {
			c.floor.blocks[i].share = 0
		}
		if u := m.Unattainable(slo.Attainment); math.Abs(u-0.08) > 1e-9 {
			t.Errorf("a clone's floor changed the model's: Unattainable = %v", u)
		}
	}
	m.Capacity = 0.6
	loaded := Observation{Windows: []ReplicaWindow{window(30, 300, 240, 5)}, Arrivals: math.NaN()} // 20 % missed with a queue
	m.Learn(loaded, slo, at.Add(32*time.Minute))
	if m.Capacity != 0.55 {
		t.Errorf("a loaded window beyond the floor: Capacity = %v, want 0.55 (halfway to its 0.5)", m.Capacity)
	}
}

// TestMissFloorIsTheFirstTokens: requests whose tokens came too slowly are the batch's doing,
// which the ITL rule lowers the capacity for: they are not in the miss floor, and a fleet whose
// calm windows miss the ITL objective alone keeps learning from them.
func TestMissFloorIsTheFirstTokens(t *testing.T) {
	slo := trig(t, map[string]string{"ttftSLOSeconds": "2", "itlSLOSeconds": "0.1", "coldStartSeconds": "200", "headroomQuantile": "0"}).SLO
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	slow := window(240, 240, 240, 0)                                 // 4/s, every first token within 2 s
	slow.TPOT = hist([]float64{0.05, 0.1, 0.15}, 100, 180, 240, 240) // a quarter of the requests over 100 ms a token
	m := FleetModel{Capacity: 6}
	for i := range 40 {
		m.Learn(Observation{Windows: []ReplicaWindow{slow}, Arrivals: math.NaN()}, slo, at.Add(time.Duration(i)*time.Minute))
	}
	if m.MissFloor() != 0 {
		t.Errorf("MissFloor = %v, want 0: slow tokens are no first tokens missed", m.MissFloor())
	}
	if m.Capacity >= 4.1 {
		t.Errorf("Capacity = %v, want it lowered towards the 4/s the slow tokens came at", m.Capacity)
	}
}
