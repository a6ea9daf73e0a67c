package vllmsim

import (
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newTestReplica(t *testing.T, cfg Config) *Replica {
	t.Helper()
	r, err := NewReplica(cfg, t0)
	if err != nil {
		t.Fatalf("NewReplica: %v", err)
	}
	return r
}

// drive feeds rate requests/s into r for d, stepping every 100ms, and returns the end time.
func drive(r *Replica, g *LoadGenerator, from time.Time, d time.Duration) time.Time {
	now := from
	g.Step(now, []Receiver{r})
	r.Step(now)
	for end := from.Add(d); now.Before(end); {
		now = now.Add(100 * time.Millisecond)
		g.Step(now, []Receiver{r})
		r.Step(now)
	}
	return now
}

// TestQueueFollowsRateAgainstCapacity: the model is deterministic (arrivals from an accumulator,
// 100 ms steps), so after 20 s at rate r with capacity 4/s (4 seats, 1 s each) the counts are
// exact: below capacity the last second's r arrivals run and 20r−r succeeded; above it 4 run,
// 4·19 = 76 succeeded and the rest of the 20r arrivals wait.
func TestQueueFollowsRateAgainstCapacity(t *testing.T) {
	cfg := Config{MaxNumSeqs: 4, ServiceTime: time.Second}
	for _, tc := range []struct {
		name             string
		rate             float64
		running, waiting int
		success          uint64
	}{
		{name: "below capacity", rate: 2, running: 2, waiting: 0, success: 38},
		{name: "at capacity", rate: 4, running: 4, waiting: 0, success: 76},
		{name: "above capacity", rate: 8, running: 4, waiting: 160 - 76 - 4, success: 76},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestReplica(t, cfg)
			g, err := NewLoadGenerator(tc.rate)
			if err != nil {
				t.Fatal(err)
			}
			drive(r, g, t0, 20*time.Second)
			running, waiting := r.Queue()
			if running != tc.running || waiting != tc.waiting {
				t.Errorf("running, waiting = %d, %d; want %d, %d", running, waiting, tc.running, tc.waiting)
			}
			if s := r.Snapshot()[0].RequestSuccess; s != tc.success {
				t.Errorf("request_success = %d, want %d", s, tc.success)
			}
		})
	}
}

// TestQueueDrainsWhenRateDrops: 10 s at 8/s against capacity 4/s leaves 80 − 36 done − 4
// running = 40 waiting; 10 s at 2/s then adds 20 and completes 40: 20 wait; 15 s more drain it.
func TestQueueDrainsWhenRateDrops(t *testing.T) {
	r := newTestReplica(t, Config{MaxNumSeqs: 4, ServiceTime: time.Second})
	g, err := NewLoadGenerator(8)
	if err != nil {
		t.Fatal(err)
	}
	now := drive(r, g, t0, 10*time.Second)
	if _, peak := r.Queue(); peak != 40 {
		t.Fatalf("waiting after 10s at twice the capacity = %d, want 40", peak)
	}
	if err := g.SetRate(2); err != nil {
		t.Fatal(err)
	}
	now = drive(r, g, now, 10*time.Second)
	if _, w := r.Queue(); w != 20 {
		t.Errorf("waiting 10s after the rate dropped = %d, want 20", w)
	}
	drive(r, g, now, 15*time.Second)
	if running, w := r.Queue(); w != 0 || running != 2 {
		t.Errorf("after draining: running %d, waiting %d; want 2, 0", running, w)
	}
}

func TestKVCacheLimitsAdmission(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		cfg                      Config
		submit                   int
		wantRunning, wantWaiting int
		wantUsage                float64
	}{
		{"room for all", Config{MaxNumSeqs: 16, KVBlocksTotal: 1000, KVBlocksPerSeq: 50}, 10, 10, 0, 0.5},
		{"max-num-seqs binds", Config{MaxNumSeqs: 4, KVBlocksTotal: 1000, KVBlocksPerSeq: 50}, 10, 4, 6, 0.2},
		{"kv blocks bind", Config{MaxNumSeqs: 16, KVBlocksTotal: 220, KVBlocksPerSeq: 50}, 10, 4, 6, 200.0 / 220},
		{"full cache", Config{MaxNumSeqs: 16, KVBlocksTotal: 200, KVBlocksPerSeq: 50}, 4, 4, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestReplica(t, tc.cfg)
			r.Submit(tc.submit, t0)
			r.Step(t0)
			s := r.Snapshot()[0]
			if s.Running != tc.wantRunning || s.Waiting != tc.wantWaiting {
				t.Errorf("running %d, waiting %d; want %d, %d", s.Running, s.Waiting, tc.wantRunning, tc.wantWaiting)
			}
			cfg := r.Config()
			if want := float64(s.Running*cfg.KVBlocksPerSeq) / float64(cfg.KVBlocksTotal); s.KVCacheUsage != want {
				t.Errorf("usage %v != running*KVBlocksPerSeq/KVBlocksTotal = %v", s.KVCacheUsage, want)
			}
			if math.Abs(s.KVCacheUsage-tc.wantUsage) > 1e-12 {
				t.Errorf("usage %v, want %v", s.KVCacheUsage, tc.wantUsage)
			}
		})
	}
}

func TestLatencyHistograms(t *testing.T) {
	cfg := Config{MaxNumSeqs: 1, ServiceTime: time.Second, PrefillTime: 100 * time.Millisecond}
	// Stepping once or every 10ms gives the same result: admission happens when a slot frees.
	for _, step := range []time.Duration{3 * time.Second, time.Second, 10 * time.Millisecond} {
		t.Run(step.String(), func(t *testing.T) {
			r := newTestReplica(t, cfg)
			r.Submit(3, t0)
			for now := t0; !now.After(t0.Add(3 * time.Second)); now = now.Add(step) {
				r.Step(now)
			}
			s := r.Snapshot()[0]
			// Waits 0s, 1s, 2s: TTFT 0.1, 1.1, 2.1; queue 0, 1, 2; e2e 1, 2, 3.
			checkHist(t, "ttft", s.TTFT, 3, 3.3, map[float64]uint64{0.08: 0, 0.1: 1, 1.0: 1, 2.5: 3})
			checkHist(t, "queue", s.QueueTime, 3, 3, map[float64]uint64{0.3: 1, 1.0: 2, 2.0: 3})
			checkHist(t, "e2e", s.E2ELatency, 3, 6, map[float64]uint64{0.8: 0, 1.0: 1, 2.0: 2, 2.5: 2, 5.0: 3})
			if s.RequestSuccess != 3 || s.PromptTokens != 3*DefaultPromptTokens || s.GenerationTokens != 3*DefaultGenerationTokens {
				t.Errorf("counters: success %d, prompt %d, generation %d", s.RequestSuccess, s.PromptTokens, s.GenerationTokens)
			}
		})
	}
}

func checkHist(t *testing.T, name string, h Histogram, count uint64, sum float64, cumulative map[float64]uint64) {
	t.Helper()
	if h.Count != count || math.Abs(h.Sum-sum) > 1e-9 {
		t.Errorf("%s: count %d sum %v, want %d, %v", name, h.Count, h.Sum, count, sum)
	}
	for i, b := range h.Bounds {
		if want, ok := cumulative[b]; ok && h.Buckets[i] != want {
			t.Errorf("%s: bucket le=%v holds %d, want %d", name, b, h.Buckets[i], want)
		}
	}
}

func TestEnginesSplitRequests(t *testing.T) {
	r := newTestReplica(t, Config{Engines: 2, MaxNumSeqs: 2})
	r.Submit(5, t0)
	r.Step(t0)
	s := r.Snapshot()
	if len(s) != 2 {
		t.Fatalf("%d engines, want 2", len(s))
	}
	if s[0].Running != 2 || s[0].Waiting != 1 || s[1].Running != 2 || s[1].Waiting != 0 {
		t.Errorf("engines: %+v / %+v", s[0], s[1])
	}
	if running, waiting := r.Queue(); running != 4 || waiting != 1 {
		t.Errorf("Queue() = %d, %d; want 4, 1", running, waiting)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg     Config
		wantErr string
	}{
		{Config{}, ""},
		{Config{MaxNumSeqs: -1}, "max-num-seqs must be positive"},
		{Config{KVBlocksTotal: 10, KVBlocksPerSeq: 50}, "no request could ever run"},
		{Config{ServiceTime: time.Second, PrefillTime: 2 * time.Second}, "exceeds service time"},
		{Config{Engines: -2, PrefillTime: -time.Second}, "prefill time must be positive"},
	} {
		err := tc.cfg.Validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.wantErr)
		}
	}
	if _, err := NewReplica(Config{MaxNumSeqs: -1}, t0); err == nil {
		t.Error("NewReplica accepted an invalid config")
	}
}

// TestKVGrowthPreempts: with KV that grows as sequences decode, an engine that admitted more
// than its cache can finish preempts the newest sequences, counts it, never holds more KV than
// it has, loses no request and observes each first token once.
func TestKVGrowthPreempts(t *testing.T) {
	cfg := Config{MaxNumSeqs: 16, KVBlocksTotal: 1000, KVBlocksPerSeq: 100, PromptTokens: 256, GenerationTokens: 256,
		ServiceTime: 2 * time.Second, PrefillTime: 100 * time.Millisecond, KVGrowth: true}
	r, err := NewReplica(cfg, t0)
	if err != nil {
		t.Fatal(err)
	}
	r.Submit(16, t0) // 16 × 50 prompt blocks fit; 16 × 100 finished sequences do not
	now := t0
	for range 200 { // 20 s
		now = now.Add(100 * time.Millisecond)
		r.Step(now)
		if s := r.Snapshot()[0]; s.KVBlocksUsed > cfg.KVBlocksTotal {
			t.Fatalf("at %v: %d KV blocks used of %d", now.Sub(t0), s.KVBlocksUsed, cfg.KVBlocksTotal)
		}
	}
	s := r.Snapshot()[0]
	if s.Preemptions == 0 {
		t.Error("no preemption although the grown sequences need 1600 of 1000 blocks")
	}
	if s.RequestSuccess != 16 || s.Running != 0 || s.Waiting != 0 {
		t.Errorf("after 20 s: %d done, %d running, %d waiting; want all 16 done", s.RequestSuccess, s.Running, s.Waiting)
	}
	if s.TTFT.Count != 16 {
		t.Errorf("%d first tokens observed for 16 requests (a preempted request must not get a second)", s.TTFT.Count)
	}
	// Without growth the same load reserves 100 blocks each: 10 run, none is ever preempted.
	cfg.KVGrowth = false
	r, _ = NewReplica(cfg, t0)
	r.Submit(16, t0)
	r.Step(t0.Add(100 * time.Millisecond))
	if s := r.Snapshot()[0]; s.Running != 10 || s.Preemptions != 0 {
		t.Errorf("without growth: %d running, %d preemptions; want 10 and 0", s.Running, s.Preemptions)
	}
}
