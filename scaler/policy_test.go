package scaler

import (
	"errors"
	"maps"
	"math"
	"testing"
	"time"
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
	ttft := map[string]string{"targetQueueDepth": "4", "targetTTFTSeconds": "0.5", "role": "prefill"}
	conc := map[string]string{"targetConcurrency": "8"}
	seqBound := map[string]string{"targetConcurrency": "16", "targetKVCacheUsage": "0.8"}
	nan := math.NaN()
	tests := []struct {
		name       string
		md         map[string]string
		obs        Observation
		want       map[Signal]int
		wantHeld   map[Signal]Held
		wantActive bool
		wantErr    error
	}{
		{name: "queue scales up to waiting/target", md: queue,
			obs: Observation{Ready: 2, Sampled: 2, Waiting: 17, Running: 32, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 5}, wantActive: true},
		{name: "queue exactly on target stays", md: queue,
			obs: Observation{Ready: 3, Sampled: 3, Waiting: 12, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 3}, wantActive: true},
		{name: "starting replicas hold a scale-up (no runaway during cold start)", md: queue,
			obs: Observation{Ready: 2, Sampled: 2, Starting: 3, Waiting: 60, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 5},
			wantHeld: map[Signal]Held{SignalQueue: "starting"}, wantActive: true},
		{name: "starting replicas are capacity: no scale-up when they cover the queue", md: queue,
			obs: Observation{Ready: 2, Sampled: 2, Starting: 3, Waiting: 19, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 5}, wantActive: true},
		{name: "scale-down keeps headroom", md: queue,
			// 10 waiting at 4/replica is 3 replicas, but 3 would sit at 3.3 > 0.8*4: keep 4.
			obs: Observation{Ready: 6, Sampled: 6, Waiting: 10, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 4}, wantActive: true},
		{name: "no scale-down on partial data", md: queue,
			obs: Observation{Ready: 6, Sampled: 3, Waiting: 1, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 6},
			wantHeld: map[Signal]Held{SignalQueue: "partial"}, wantActive: true},
		// Two replicas not read yet (just ready: they hold next to nothing): the 20 waiting on the
		// two read are a lower bound, enough for 5; extrapolating to 40 would ask for 10.
		{name: "partial data scales up on what was read, a lower bound", md: queue,
			obs: Observation{Ready: 4, Sampled: 2, Waiting: 20, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 5}, wantActive: true},
		{name: "partial data under the current count holds", md: queue,
			obs:  Observation{Ready: 4, Sampled: 2, Waiting: 8, TTFTP95: nan},
			want: map[Signal]int{SignalQueue: 4}, wantHeld: map[Signal]Held{SignalQueue: HeldPartial}, wantActive: true},
		{name: "idle replicas scale to zero and deactivate", md: queue,
			obs: Observation{Ready: 2, Sampled: 2, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 0}, wantActive: false},
		{name: "running requests keep the object active", md: queue,
			obs: Observation{Ready: 1, Sampled: 1, Running: 3, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 0}, wantActive: true},
		{name: "no replicas at all: zero, inactive, no error", md: queue,
			obs: Observation{TTFTP95: nan}, want: map[Signal]int{SignalQueue: 0}, wantActive: false},
		{name: "only starting replicas: hold, active", md: queue,
			obs: Observation{Starting: 2, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 2},
			wantHeld: map[Signal]Held{SignalQueue: "starting"}, wantActive: true},
		{name: "stalled replicas never hold a scale-up", md: queue,
			obs:  Observation{Ready: 2, Sampled: 2, Stalled: map[StallReason]int{StallCrashLoop: 1, StallStartupTimeout: 1}, Waiting: 60, TTFTP95: nan},
			want: map[Signal]int{SignalQueue: 15}, wantActive: true},
		{name: "a starting replica still holds beside a stalled one", md: queue,
			obs:  Observation{Ready: 2, Sampled: 2, Starting: 1, Stalled: map[StallReason]int{StallUnschedulable: 1}, Waiting: 60, TTFTP95: nan},
			want: map[Signal]int{SignalQueue: 4}, wantHeld: map[Signal]Held{SignalQueue: HeldStarting}, wantActive: true},
		{name: "only stalled replicas: nothing measures the load, hold, stay active", md: queue,
			obs: Observation{Stalled: map[StallReason]int{StallUnschedulable: 2}, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 2},
			wantHeld: map[Signal]Held{SignalQueue: HeldNoReadyReplica}, wantActive: true},
		{name: "stalled replicas count as current: a scale-down keeps headroom over every live replica", md: queue,
			obs:  Observation{Ready: 3, Sampled: 3, Stalled: map[StallReason]int{StallCrashLoop: 1}, Waiting: 4, TTFTP95: nan},
			want: map[Signal]int{SignalQueue: 2}, wantActive: true},
		{name: "from zero: requests waiting at the router size the first step and activate", md: queue,
			obs: Observation{Upstream: 9, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 3}, wantActive: true},
		{name: "from zero: the router's queue waits for the replicas it started", md: queue,
			obs: Observation{Starting: 3, Upstream: 30, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 3},
			wantHeld: map[Signal]Held{SignalQueue: HeldStarting}, wantActive: true},
		{name: "from zero: nothing at the router, nothing running: inactive", md: map[string]string{"targetQueueDepth": "4", "activationQueueDepth": "0"},
			obs: Observation{TTFTP95: nan}, want: map[Signal]int{SignalQueue: 0}, wantActive: false},
		{name: "upstream adds to the replicas' own queues", md: conc,
			obs: Observation{Ready: 2, Sampled: 2, Running: 12, Waiting: 2, Upstream: 10, TTFTP95: nan}, want: map[Signal]int{SignalConcurrency: 3}, wantActive: true},
		{name: "ready replicas without fresh data is an error", md: queue,
			obs: Observation{Ready: 3, TTFTP95: nan}, wantErr: ErrNoFreshData},
		{name: "kv: mean usage lands on target", md: kv,
			obs: Observation{Ready: 2, Sampled: 2, KVSampled: 2, KVUsage: 1.9, TTFTP95: nan}, want: map[Signal]int{SignalKVCache: 3, SignalKVSaturation: 3}, wantActive: false},
		{name: "kv without any kv series is an error", md: kv,
			obs: Observation{Ready: 2, Sampled: 2, TTFTP95: nan}, wantErr: ErrNoFreshData},
		{name: "kv reported by some replicas: no scale-down", md: kv,
			obs: Observation{Ready: 4, Sampled: 4, KVSampled: 2, KVUsage: 0.2, TTFTP95: nan}, want: map[Signal]int{SignalKVCache: 4, SignalKVSaturation: 4},
			wantHeld: map[Signal]Held{SignalKVCache: "partial"}},
		{name: "both: queue empty but KV busy keeps replicas", md: both,
			obs:  Observation{Ready: 4, Sampled: 4, KVSampled: 4, KVUsage: 3.0, Running: 40, TTFTP95: nan},
			want: map[Signal]int{SignalQueue: 0, SignalKVCache: 4}, wantActive: true},
		{name: "ttft violated adds replicas in proportion", md: ttft,
			obs: Observation{Ready: 2, Sampled: 2, Waiting: 4, Running: 8, TTFTP95: 0.75}, want: map[Signal]int{SignalQueue: 2, SignalTTFT: 3}, wantActive: true},
		{name: "ttft violated adds at least one replica", md: ttft,
			obs: Observation{Ready: 10, Sampled: 10, Waiting: 40, Running: 80, TTFTP95: 0.51}, want: map[Signal]int{SignalQueue: 10, SignalTTFT: 11}, wantActive: true},
		{name: "ttft far above its target at most doubles the ready replicas per step", md: ttft,
			obs: Observation{Ready: 2, Sampled: 2, Waiting: 4, Running: 8, TTFTP95: 9}, want: map[Signal]int{SignalQueue: 2, SignalTTFT: 4}, wantActive: true},
		{name: "ttft met follows the sizing signals, never fewer", md: ttft,
			obs: Observation{Ready: 4, Sampled: 4, Waiting: 8, Running: 30, TTFTP95: 0.1}, want: map[Signal]int{SignalQueue: 3, SignalTTFT: 3}, wantActive: true},
		{name: "ttft unknown (no first token in the window) never votes down", md: ttft,
			obs: Observation{Ready: 3, Sampled: 3, Waiting: 12, TTFTP95: nan}, want: map[Signal]int{SignalQueue: 3, SignalTTFT: 3}, wantActive: true},
		{name: "ttft violated while replicas start: held", md: ttft,
			obs: Observation{Ready: 2, Sampled: 2, Starting: 1, Waiting: 4, Running: 8, TTFTP95: 2}, want: map[Signal]int{SignalQueue: 2, SignalTTFT: 3},
			wantHeld: map[Signal]Held{SignalTTFT: HeldStarting}, wantActive: true},
		{name: "itl violated on a decode fleet adds replicas", md: map[string]string{"targetKVCacheUsage": "0.8", "targetITLSeconds": "0.05", "role": "decode"},
			obs:  Observation{Ready: 4, Sampled: 4, KVSampled: 4, KVUsage: 2.4, Running: 40, TTFTP95: nan, ITLP95: 0.08},
			want: map[Signal]int{SignalKVCache: 4, SignalITL: 7, SignalKVSaturation: 4}, wantActive: true},
		{name: "itl unknown never votes down", md: map[string]string{"targetKVCacheUsage": "0.8", "targetITLSeconds": "0.05", "role": "decode"},
			obs:  Observation{Ready: 4, Sampled: 4, KVSampled: 4, KVUsage: 3.2, Running: 40, TTFTP95: nan, ITLP95: nan},
			want: map[Signal]int{SignalKVCache: 4, SignalITL: 4, SignalKVSaturation: 4}, wantActive: true},
		{name: "tokens per second size the fleet on its token load", md: map[string]string{"targetTokensPerSecond": "1000"},
			obs:  Observation{Ready: 3, Sampled: 3, Running: 30, TTFTP95: nan, TokensPerSecond: 4200, TokensSampled: 3},
			want: map[Signal]int{SignalTokens: 5}, wantActive: true},
		{name: "tokens: replicas without a window count for nothing, and hold", md: map[string]string{"targetTokensPerSecond": "1000"},
			obs:  Observation{Ready: 4, Sampled: 4, Running: 30, TTFTP95: nan, TokensPerSecond: 3000, TokensSampled: 2},
			want: map[Signal]int{SignalTokens: 4}, wantHeld: map[Signal]Held{SignalTokens: HeldPartial}, wantActive: true},
		{name: "tokens: what was read is enough to add replicas", md: map[string]string{"targetTokensPerSecond": "1000"},
			obs:  Observation{Ready: 4, Sampled: 4, Running: 30, TTFTP95: nan, TokensPerSecond: 5500, TokensSampled: 2},
			want: map[Signal]int{SignalTokens: 6}, wantActive: true},
		{name: "tokens unknown hold the fleet, never shrink it", md: map[string]string{"targetTokensPerSecond": "1000"},
			obs:  Observation{Ready: 4, Sampled: 4, Running: 30, TTFTP95: nan},
			want: map[Signal]int{SignalTokens: 4}, wantHeld: map[Signal]Held{SignalTokens: HeldPartial}, wantActive: true},
		{name: "preemptions above the limit add replicas", md: map[string]string{"targetKVCacheUsage": "0.8", "maxPreemptionsPerMinute": "2", "role": "decode"},
			obs:  Observation{Ready: 3, Sampled: 3, KVSampled: 3, KVUsage: 2.4, Running: 40, TTFTP95: nan, ITLP95: nan, PreemptionsPerMinute: 12},
			want: map[Signal]int{SignalKVCache: 3, SignalPreemption: 6, SignalKVSaturation: 3}, wantActive: true},
		{name: "preemptions unknown or under the limit follow the sizing", md: map[string]string{"targetKVCacheUsage": "0.8", "maxPreemptionsPerMinute": "2", "role": "decode"},
			obs:  Observation{Ready: 3, Sampled: 3, KVSampled: 3, KVUsage: 2.4, Running: 40, TTFTP95: nan, ITLP95: nan, PreemptionsPerMinute: nan},
			want: map[Signal]int{SignalKVCache: 3, SignalPreemption: 3, SignalKVSaturation: 3}, wantActive: true},
		{name: "concurrency keeps a healthy fleet with nothing waiting", md: conc,
			obs: Observation{Ready: 4, Sampled: 4, Running: 30, TTFTP95: nan}, want: map[Signal]int{SignalConcurrency: 4}, wantActive: true},
		{name: "concurrency counts the backlog too", md: conc,
			obs: Observation{Ready: 4, Sampled: 4, Running: 32, Waiting: 24, TTFTP95: nan}, want: map[Signal]int{SignalConcurrency: 7}, wantActive: true},
		// max_num_seqs binds: every replica runs its 16 sequences on a fifth of its KV cache
		// while 40 requests queue. KV alone would remove replicas; concurrency asks for 7, and
		// the HPA takes the larger count — the signals never fight over the fleet.
		{name: "max_num_seqs-bound: KV reads 20% while requests queue, concurrency sizes", md: seqBound,
			obs:  Observation{Ready: 4, Sampled: 4, KVSampled: 4, KVUsage: 0.8, Running: 64, Waiting: 40, TTFTP95: nan},
			want: map[Signal]int{SignalConcurrency: 7, SignalKVCache: 2}, wantActive: true},
		// Caches 96% full while concurrency asks for 2: no sizing signal adds capacity before
		// vLLM starts preempting; the guard does.
		{name: "max_num_seqs-bound and caches nearly full: the KV guard adds a replica", md: map[string]string{"targetConcurrency": "64", "kvSaturation": "0.9"},
			obs:  Observation{Ready: 4, Sampled: 4, KVSampled: 4, KVUsage: 3.84, Running: 64, TTFTP95: nan},
			want: map[Signal]int{SignalConcurrency: 2, SignalKVSaturation: 5}, wantActive: true},
		{name: "kv guard: under the threshold it lets the fleet shrink while the rest stay under it", md: map[string]string{"targetConcurrency": "16", "kvSaturation": "0.9"},
			obs:  Observation{Ready: 4, Sampled: 4, KVSampled: 4, KVUsage: 1.0, Running: 20, TTFTP95: nan},
			want: map[Signal]int{SignalConcurrency: 2, SignalKVSaturation: 2}, wantActive: true},
		// Caches 80% full on 4 replicas: the same KV on 2 would be 160% — the guard holds 4
		// (ceil(3.2/0.9)), or the replicas it keeps would saturate and it would add them back.
		{name: "kv guard: never shrinks the fleet into saturation", md: map[string]string{"targetConcurrency": "16", "kvSaturation": "0.9"},
			obs:  Observation{Ready: 4, Sampled: 4, KVSampled: 4, KVUsage: 3.2, Running: 20, TTFTP95: nan},
			want: map[Signal]int{SignalConcurrency: 2, SignalKVSaturation: 4}, wantActive: true},
		{name: "kv guard: no KV series is no vote, never a scale-down", md: map[string]string{"targetConcurrency": "16", "kvSaturation": "0.9"},
			obs:  Observation{Ready: 4, Sampled: 4, Running: 60, TTFTP95: nan},
			want: map[Signal]int{SignalConcurrency: 4, SignalKVSaturation: 4}, wantActive: true},
		{name: "kv guard violated while replicas start: held", md: map[string]string{"targetConcurrency": "16", "kvSaturation": "0.9"},
			obs:  Observation{Ready: 2, Sampled: 2, Starting: 1, KVSampled: 2, KVUsage: 1.96, Running: 40, TTFTP95: nan},
			want: map[Signal]int{SignalConcurrency: 3, SignalKVSaturation: 3}, wantHeld: map[Signal]Held{SignalKVSaturation: HeldStarting}, wantActive: true},
		// Queued prompt tokens: 3 replicas hold 10, 2 and 0 requests of 1,500-token prompts
		// (18,000 tokens) at 4,096 per replica: 5 replicas.
		{name: "queued prompt tokens size a prefill fleet", md: map[string]string{"targetQueuedPromptTokens": "4096", "role": "prefill"},
			obs:  Observation{Ready: 3, Sampled: 3, PromptSampled: 3, QueuedPromptTokens: 18000, Waiting: 12, TTFTP95: nan},
			want: map[Signal]int{SignalQueuedPromptTokens: 5}, wantActive: true},
		{name: "queued prompt tokens unknown on a replica: scale up on the rest, never down", md: map[string]string{"targetQueuedPromptTokens": "4096", "role": "prefill"},
			obs:  Observation{Ready: 6, Sampled: 6, PromptSampled: 5, QueuedPromptTokens: 4000, Waiting: 3, TTFTP95: nan},
			want: map[Signal]int{SignalQueuedPromptTokens: 6}, wantHeld: map[Signal]Held{SignalQueuedPromptTokens: HeldPartial}, wantActive: true},
		// SGLang exports no prompt lengths: requests waiting with none known anywhere is
		// missing data (KEDA's fallback), never a fleet that cannot grow.
		{name: "queued prompt tokens with no prompt length anywhere is an error", md: map[string]string{"role": "prefill"},
			obs: Observation{Ready: 2, Sampled: 2, Waiting: 9, TTFTP95: nan}, wantErr: ErrNoFreshData},
		{name: "kv tokens size a decode fleet", md: map[string]string{"targetKVTokens": "40000", "role": "decode", "kvSaturation": "1"},
			obs:  Observation{Ready: 2, Sampled: 2, KVSampled: 2, KVUsage: 1.1, KVTokensSampled: 2, KVTokens: 121000, Running: 50, TTFTP95: nan},
			want: map[Signal]int{SignalKVTokens: 4}, wantActive: true},
		{name: "kv tokens with no cache size anywhere is an error", md: map[string]string{"targetKVTokens": "40000", "role": "decode"},
			obs: Observation{Ready: 2, Sampled: 2, KVSampled: 2, KVUsage: 1.1, Running: 50, TTFTP95: nan}, wantErr: ErrNoFreshData},
		// A rollout with maxSurge: 4 replicas asked for, a 5th (the new revision's) starting on
		// top. A hold keeps the HPA's 4; answering the 5 live replicas made the HPA write 5, and
		// the rollout's next step surged on that.
		{name: "a rollout's surge pod is not held as a replica (partial data)", md: queue,
			obs:  Observation{Ready: 4, Sampled: 2, Starting: 1, Waiting: 4, TTFTP95: nan, Spec: 4, HasSpec: true},
			want: map[Signal]int{SignalQueue: 4}, wantHeld: map[Signal]Held{SignalQueue: HeldPartial}, wantActive: true},
		{name: "a rollout's surge pod is not held as a replica (starting)", md: queue,
			obs:  Observation{Ready: 4, Sampled: 4, Starting: 3, Waiting: 40, TTFTP95: nan, Spec: 6, HasSpec: true},
			want: map[Signal]int{SignalQueue: 6}, wantHeld: map[Signal]Held{SignalQueue: HeldStarting}, wantActive: true},
		// Nor is it capacity on its way (it replaces a replica that serves): a scale-up is not
		// held on it — held, no fleet could grow for as long as a rollout ran.
		{name: "a rollout's surge pod does not hold a scale-up", md: queue,
			obs:  Observation{Ready: 4, Sampled: 4, Starting: 1, Waiting: 24, TTFTP95: nan, Spec: 4, HasSpec: true},
			want: map[Signal]int{SignalQueue: 6}, wantActive: true},
		{name: "replicas on their way to the HPA's count hold a scale-up", md: queue,
			obs:  Observation{Ready: 4, Sampled: 4, Starting: 2, Waiting: 40, TTFTP95: nan, Spec: 6, HasSpec: true},
			want: map[Signal]int{SignalQueue: 6}, wantHeld: map[Signal]Held{SignalQueue: HeldStarting}, wantActive: true},
		// A pod lost before its replacement exists: 3 live of 4 asked for. A hold keeps 4.
		{name: "a lost pod is not a scale-down while held", md: queue,
			obs:  Observation{Ready: 3, Sampled: 1, Waiting: 2, TTFTP95: nan, Spec: 4, HasSpec: true},
			want: map[Signal]int{SignalQueue: 4}, wantHeld: map[Signal]Held{SignalQueue: HeldPartial}, wantActive: true},
		{name: "unread spec: the live replicas are held, as before", md: queue,
			obs:  Observation{Ready: 4, Sampled: 2, Starting: 1, Waiting: 4, TTFTP95: nan},
			want: map[Signal]int{SignalQueue: 5}, wantHeld: map[Signal]Held{SignalQueue: HeldPartial}, wantActive: true},
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

func TestSplitReplicas(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	pods := []Pod{
		{Name: "ready", Ready: true, Created: ago(time.Hour)},
		{Name: "young", Created: ago(time.Minute)},
		{Name: "old", Created: ago(11 * time.Minute)},
		{Name: "crash", Created: ago(time.Minute), Stuck: StallCrashLoop},
		{Name: "no-node", Created: ago(time.Minute), Stuck: StallUnschedulable},
		{Name: "unknown-age"},
	}
	tests := []struct {
		timeout      time.Duration
		wantStarting int
		wantStalled  map[StallReason]int
	}{
		{0, 2, map[StallReason]int{StallCrashLoop: 1, StallUnschedulable: 1, StallStartupTimeout: 1}}, // default 10 min
		{30 * time.Second, 1, map[StallReason]int{StallCrashLoop: 1, StallUnschedulable: 1, StallStartupTimeout: 2}},
		{time.Hour, 3, map[StallReason]int{StallCrashLoop: 1, StallUnschedulable: 1}},
	}
	for _, tc := range tests {
		r := SplitReplicas(pods, now, tc.timeout)
		if len(r.Ready) != 1 || r.Ready[0].Name != "ready" {
			t.Errorf("timeout %v: ready %+v, want [ready]", tc.timeout, r.Ready)
		}
		if r.Starting != tc.wantStarting {
			t.Errorf("timeout %v: starting %d, want %d", tc.timeout, r.Starting, tc.wantStarting)
		}
		if !maps.Equal(r.Stalled, tc.wantStalled) {
			t.Errorf("timeout %v: stalled %v, want %v", tc.timeout, r.Stalled, tc.wantStalled)
		}
	}
}

// TestSteadyDemandNeverOscillates: under a demand that does not change, the fleet the policy
// asks for — applied at once, as an HPA would after its windows — settles within two steps and
// never moves again, whatever count it starts from: every sizing signal's scale-down needs the
// demand to fit under headroom × target on the replicas left, which the demand that asked for
// the current count cannot, and the constraints (the KV guard, the SLOs) never remove what they
// added. The max_num_seqs-bound regime (KV low, requests queued) is part of the sweep.
func TestSteadyDemandNeverOscillates(t *testing.T) {
	for _, md := range []map[string]string{
		{"targetQueueDepth": "4", "targetConcurrency": "16", "targetKVCacheUsage": "0.8", "kvSaturation": "0.9"},
		{"targetConcurrency": "16", "kvSaturation": "0.9"}, // the guard against the sizing signals
	} {
		steadyDemandSettles(t, trig(t, md))
	}
}

func steadyDemandSettles(t *testing.T, tr *Trigger) {
	t.Helper()
	for start := 1; start <= 24; start++ {
		for _, load := range []struct{ waiting, running, kv float64 }{
			{0, 10, 0.5}, {7, 30, 2.1}, {40, 64, 0.8}, {3, 90, 7.4}, {100, 200, 3}, {0, 0, 0}, {12, 48, 5.3},
		} {
			n := start
			var seen []int
			for step := range 8 {
				d, err := DefaultPolicy.Decide(Observation{Ready: n, Sampled: n, KVSampled: n, Waiting: load.waiting,
					Running: load.running, KVUsage: load.kv, TTFTP95: math.NaN(), ITLP95: math.NaN(), PreemptionsPerMinute: math.NaN()}, tr)
				if err != nil {
					t.Fatal(err)
				}
				seen = append(seen, d.Desired)
				if step >= 2 && d.Desired != n {
					t.Fatalf("%v: start %d, load %+v: counts %v — still moving after two steps", tr.Signals(), start, load, seen)
				}
				n = d.Desired
			}
		}
	}
}
