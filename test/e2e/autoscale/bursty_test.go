package autoscale_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/test/rigtest"
)

// burstyResult is what one bursty run cost and gave.
type burstyResult struct {
	arrived, lost         uint64
	served, p50, p95      float64
	replicaMinutes, peakM float64
	low, peak             int
}

func (r burstyResult) String() string {
	return fmt.Sprintf("%d arrived, %.0f got a first token (TTFT p50 %.2f s, p95 %.2f s), %d lost on replicas scaled away; %.1f replica-minutes (%d to %d ready); static for the peak: %.1f replica-minutes",
		r.arrived, r.served, r.p50, r.p95, r.lost, r.replicaMinutes, r.low, r.peak, r.peakM)
}

// Bursty runs: the same seeded arrivals each time, the trigger of the fleet varies.
var burstyTriggers = []struct {
	name string
	md   map[string]string
}{
	{"load-and-backlog", map[string]string{"targetConcurrency": "6"}},
	{"with-ttft-slo", map[string]string{"targetConcurrency": "6", "targetTTFTSeconds": "1"}},
}

// TestBurstyLoadFollowsTheBursts runs vllm-sim's bursty arrivals (Poisson bursts of ~10 s at
// 4× the mean rate, lulls of ~30 s) for two minutes against the fleet sized by berth with a
// TTFT SLO: the fleet grows for the bursts and serves them, and the run reports the p95 time
// to first token and the replica-minutes. BenchmarkBurstyLoad compares triggers.
func TestBurstyLoadFollowsTheBursts(t *testing.T) {
	r := burstyRun(t, burstyTriggers[1].md, 2*time.Minute)
	t.Log(r)
	if r.served == 0 || math.IsNaN(r.p95) || r.arrived == 0 {
		t.Errorf("nothing served: %v", r)
	}
	if r.peak < 3 {
		t.Errorf("the fleet did not follow the bursts: %v", r)
	}
}

// BenchmarkBurstyLoad reports, per trigger, the p95 time to first token and the replica-minutes
// of 150 s of bursty load at a mean of 6 requests/s (4 requests/s per replica), against a fleet
// provisioned statically for the peak (docs/benchmarks.md).
func BenchmarkBurstyLoad(b *testing.B) {
	for _, tc := range burstyTriggers {
		b.Run(tc.name, func(b *testing.B) {
			var r burstyResult
			for b.Loop() {
				r = burstyRun(b, tc.md, 150*time.Second)
			}
			b.Log(r)
			b.ReportMetric(r.p50, "ttft-p50-s")
			b.ReportMetric(r.p95, "ttft-p95-s")
			b.ReportMetric(r.replicaMinutes, "replica-min")
			b.ReportMetric(r.peakM, "static-peak-replica-min")
			b.ReportMetric(float64(r.lost), "lost")
		})
	}
}

// burstyRun starts from one replica with the trigger metadata md, runs bursty load for run and
// measures it.
func burstyRun(tb testing.TB, md map[string]string, run time.Duration) burstyResult {
	tb.Helper()
	ctx := context.Background()
	c := rigtest.Current().Client
	startAtMinimum(tb, vllmsim.ScaledObjectOptions{ScalerAddress: scalerProc.GRPCAddress,
		Min: 1, Max: 8, PollingInterval: 5, CooldownPeriod: 10, ScaleDownWindow: 10, MetricsPort: metricsPort,
		TargetQueueDepth: "4", Metadata: md}, "berth-concurrency")
	before := snapshot(tb)
	const mean, poll = 6.0, 2 * time.Second
	if err := sim.SetLoad(ctx, mean, string(vllmsim.PatternBursty), 7); err != nil {
		tb.Fatal(err)
	}
	var replicaSeconds float64
	r := burstyResult{low: math.MaxInt}
	for end := time.Now().Add(run); time.Now().Before(end); time.Sleep(poll) {
		ready, _, err := replicas(ctx, c)
		if err != nil {
			tb.Fatal(err)
		}
		replicaSeconds += float64(ready) * poll.Seconds()
		r.peak, r.low = max(r.peak, ready), min(r.low, ready)
	}
	if err := sim.SetLoad(ctx, 0, string(vllmsim.PatternSteady), 1); err != nil {
		tb.Fatal(err)
	}
	after := snapshot(tb)
	window := ttftWindow(before.ttft, after.ttft)
	r.arrived, r.lost = after.load.Arrived-before.load.Arrived, after.load.Lost-before.load.Lost
	r.served, r.p50, r.p95 = window.Total(), window.Quantile(0.5), window.Quantile(0.95)
	r.replicaMinutes, r.peakM = replicaSeconds/60, float64(r.peak)*run.Minutes()
	return r
}

// simState is the emulator's counters at one moment.
type simState struct {
	ttft vllmsim.Histogram
	load vllmsim.LoadStatus
}

func snapshot(tb testing.TB) simState {
	tb.Helper()
	var s simState
	var err error
	if s.ttft, err = sim.TTFT(context.Background()); err != nil {
		tb.Fatal(err)
	}
	if s.load, err = sim.Status(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return s
}

// ttftWindow is the first-token latencies observed between two cumulative snapshots, as the
// scaler's histogram type (cumulative counts ending in +Inf).
func ttftWindow(before, after vllmsim.Histogram) scaler.Histogram {
	h := scaler.Histogram{Bounds: append(append([]float64(nil), after.Bounds...), math.Inf(1))}
	for i := range after.Buckets {
		b := after.Buckets[i]
		if i < len(before.Buckets) {
			b -= before.Buckets[i]
		}
		h.Counts = append(h.Counts, float64(b))
	}
	return scaler.Histogram{Bounds: h.Bounds, Counts: append(h.Counts, float64(after.Count-before.Count))}
}
