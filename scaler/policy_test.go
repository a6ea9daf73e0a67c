package scaler

import (
	"errors"
	"math"
	"testing"
)

func trig(t *testing.T, md map[string]string) *Trigger {
	t.Helper()
	tr, err := ParseTrigger(md)
	if err != nil {
		t.Fatalf("ParseTrigger(%v): %v", md, err)
	}
	return tr
}

func TestDecide(t *testing.T) {
	queue := map[string]string{"targetQueueDepth": "4"}
	kv := map[string]string{"targetKVCacheUsage": "0.8", "role": "decode"}
	both := map[string]string{"targetQueueDepth": "4", "targetKVCacheUsage": "0.8"}
	ttft := map[string]string{"targetTTFTSeconds": "0.5", "role": "prefill"}
	nan := math.NaN()
	tests := []struct {
		name       string
		md         map[string]string
		obs        Observation
		want       map[Signal]int
		wantHeld   map[Signal]string
		wantActive bool
		wantErr    error
	}{
		{name: "queue scales up to waiting/target", md: queue,
			obs: Observation{Ready: 2, Sampled: 2, Waiting: 17, Running: 32, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 5}, wantActive: true},
		{name: "queue exactly on target stays", md: queue,
			obs: Observation{Ready: 3, Sampled: 3, Waiting: 12, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 3}, wantActive: true},
		{name: "starting replicas hold a scale-up (no runaway during cold start)", md: queue,
			obs: Observation{Ready: 2, Sampled: 2, Starting: 3, Waiting: 60, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 5},
			wantHeld: map[Signal]string{SignalQueue: "starting"}, wantActive: true},
		{name: "starting replicas are capacity: no scale-up when they cover the queue", md: queue,
			obs: Observation{Ready: 2, Sampled: 2, Starting: 3, Waiting: 19, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 5}, wantActive: true},
		{name: "scale-down keeps headroom", md: queue,
			// 10 waiting at 4/replica is 3 replicas, but 3 would sit at 3.3 > 0.8*4: keep 4.
			obs: Observation{Ready: 6, Sampled: 6, Waiting: 10, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 4}, wantActive: true},
		{name: "no scale-down on partial data", md: queue,
			obs: Observation{Ready: 6, Sampled: 3, Waiting: 1, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 6},
			wantHeld: map[Signal]string{SignalQueue: "partial"}, wantActive: true},
		{name: "partial data extrapolates a scale-up", md: queue,
			obs: Observation{Ready: 4, Sampled: 2, Waiting: 20, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 10}, wantActive: true},
		{name: "idle replicas scale to zero and deactivate", md: queue,
			obs: Observation{Ready: 2, Sampled: 2, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 0}, wantActive: false},
		{name: "running requests keep the object active", md: queue,
			obs: Observation{Ready: 1, Sampled: 1, Running: 3, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 0}, wantActive: true},
		{name: "no replicas at all: zero, inactive, no error", md: queue,
			obs: Observation{TTFTP95: nan}, want: map[Signal]int{SignalQueue: 0}, wantActive: false},
		{name: "only starting replicas: hold, active", md: queue,
			obs: Observation{Starting: 2, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 2},
			wantHeld: map[Signal]string{SignalQueue: "starting"}, wantActive: true},
		{name: "ready replicas without fresh data is an error", md: queue,
			obs: Observation{Ready: 3, TTFTP95: nan}, wantErr: ErrNoFreshData},
		{name: "kv: mean usage lands on target", md: kv,
			obs: Observation{Ready: 2, Sampled: 2, KVSampled: 2, KVUsage: 1.9, TTFTP95: nan}, want: map[Signal]int{SignalKVCache: 3}, wantActive: false},
		{name: "kv without any kv series is an error", md: kv,
			obs: Observation{Ready: 2, Sampled: 2, TTFTP95: nan}, wantErr: ErrNoFreshData},
		{name: "kv reported by some replicas: scale-up extrapolates, no scale-down", md: kv,
			obs: Observation{Ready: 4, Sampled: 4, KVSampled: 2, KVUsage: 0.2, TTFTP95: nan}, want: map[Signal]int{SignalKVCache: 4},
			wantHeld: map[Signal]string{SignalKVCache: "partial"}},
		{name: "both: queue empty but KV busy keeps replicas", md: both,
			obs:  Observation{Ready: 4, Sampled: 4, KVSampled: 4, KVUsage: 3.0, Running: 40, TTFTP95: nan},
			want: map[Signal]int{SignalQueue: 0, SignalKVCache: 4}, wantActive: true},
		{name: "ttft proportional", md: ttft,
			obs: Observation{Ready: 2, Sampled: 2, TTFTP95: 1.2, Running: 1}, want: map[Signal]int{SignalTTFT: 5}, wantActive: true},
		{name: "ttft without first tokens in the window has no opinion", md: ttft,
			obs: Observation{Ready: 2, Sampled: 2, TTFTP95: nan}, want: map[Signal]int{SignalTTFT: 0}},
		{name: "activation threshold", md: map[string]string{"targetQueueDepth": "4", "activationQueueDepth": "2"},
			obs: Observation{Ready: 1, Sampled: 1, Waiting: 2, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 1}, wantActive: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := trig(t, tc.md)
			d, err := DefaultPolicy.Decide(tc.obs, tr)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Signals) != len(tc.want) {
				t.Fatalf("signals = %+v, want %v", d.Signals, tc.want)
			}
			wantMax := 0
			for s, n := range tc.want {
				sd, ok := d.Signal(s)
				if !ok || sd.Desired != n {
					t.Errorf("%s desired = %+v, want %d", s, sd, n)
				}
				if sd.Held != tc.wantHeld[s] {
					t.Errorf("%s held = %q, want %q", s, sd.Held, tc.wantHeld[s])
				}
				// KEDA's conversion and the HPA's formula (no tolerance) must land on Desired.
				if got := hpaDesired(kedaMilli(sd.Value), kedaMilli(sd.Target), int32(max(n, 1)), 0); int(got) != n {
					t.Errorf("%s: HPA would compute %d from value %v / target %v, want %d", s, got, sd.Value, sd.Target, n)
				}
				wantMax = max(wantMax, n)
			}
			if d.Desired != wantMax {
				t.Errorf("Desired = %d, want %d", d.Desired, wantMax)
			}
			if d.Active != tc.wantActive {
				t.Errorf("Active = %v, want %v", d.Active, tc.wantActive)
			}
		})
	}
}

func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	h := Histogram{Bounds: []float64{0.1, 0.5, 1, inf}, Counts: []float64{10, 50, 90, 100}}
	tests := []struct {
		q, want float64
	}{{0.05, 0.05}, {0.1, 0.1}, {0.5, 0.5}, {0.7, 0.75}, {0.9, 1}, {0.95, 1}}
	for _, tc := range tests {
		if got := h.Quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("q%v = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := (Histogram{Bounds: []float64{1, inf}, Counts: []float64{0, 0}}).Quantile(0.95); !math.IsNaN(got) {
		t.Errorf("empty histogram quantile = %v, want NaN", got)
	}
	later := Histogram{Bounds: h.Bounds, Counts: []float64{10, 60, 100, 110}}
	if d := later.Sub(h); d.Total() != 10 || d.Counts[0] != 0 || d.Counts[1] != 10 {
		t.Errorf("Sub = %+v", d)
	}
	if d := h.Sub(later); d.Total() != 100 {
		t.Errorf("Sub over a counter reset = %+v, want the later snapshot itself", d)
	}
	var sum Histogram
	first, second := sum.Add(h), sum.Add(h)
	if !first || !second || sum.Total() != 200 {
		t.Errorf("Add = %+v", sum)
	}
	if sum.Add(Histogram{Bounds: []float64{2, inf}, Counts: []float64{1, 1}}) {
		t.Error("Add accepted a histogram with other bounds")
	}
}
