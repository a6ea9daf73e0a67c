package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/pods"
	"github.com/berth-dev/berth/scaler/promsource"
	"github.com/berth-dev/berth/test/scalertest"
)

// TestSLOSignalLearnsAcrossEvaluations: the engine keeps what the SLO signal learns between
// KEDA's calls — the first call holds (nothing learned), a minute of replicas at their limit
// (requests waiting throughout, first tokens late) teaches the capacity, and the next call sizes
// the demand on it; a ScaledObject KEDA stops asking about is forgotten with its series.
func TestSLOSignalLearnsAcrossEvaluations(t *testing.T) {
	var finished, late atomic.Int64
	port, podList := queuedFleet(t, &finished, &late)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	eng := &Engine{Resolver: &staticResolver{pods: podList}, Pods: pods.New(pods.Options{Clock: clk, TTFTWindow: time.Minute}),
		Prometheus: promsource.New(promsource.Options{}), Policy: scaler.DefaultPolicy, Clock: clk}
	md := map[string]string{"ttftSLOSeconds": "2", "coldStartSeconds": "120", "metricsPort": strconv.Itoa(port)}
	ev, err := eng.Evaluate(context.Background(), "inference", "llama", md)
	if err != nil {
		t.Fatal(err)
	}
	if sd, _ := ev.Decision.Signal(scaler.SignalSLO); sd.Desired != 2 || sd.Held != scaler.HeldLearning {
		t.Fatalf("first call: %d held %q, want 2 held learning", sd.Desired, sd.Held)
	}
	clk.Step(time.Minute)
	finished.Store(30) // 0.5 requests/s per replica, 20 of 30 first tokens after 5 s, 6 waiting throughout
	late.Store(20)
	ev, err = eng.Evaluate(context.Background(), "inference", "llama", md)
	if err != nil {
		t.Fatal(err)
	}
	// Capacity 0.375/s (three quarters of a saturated fleet's rate); 1 request/s arrived over
	// both; 12 waiting drained over 120 s: 1.1/0.375.
	if sd, _ := ev.Decision.Signal(scaler.SignalSLO); sd.Desired != 3 || sd.Held != "" || ev.Decision.Capacity != 0.375 {
		t.Fatalf("after a minute at the limit: %d held %q, capacity %v; want 3, not held, 0.375", sd.Desired, sd.Held, ev.Decision.Capacity)
	}
	var m dto.Metric
	if err := replicaCapacity.WithLabelValues("inference", "llama").Write(&m); err != nil || m.GetGauge().GetValue() != 0.375 {
		got := m.GetGauge().GetValue()
		t.Errorf("berth_scaler_replica_capacity_requests_per_second = %v, want 0.375", got)
	}
	clk.Step(time.Hour)
	eng.ExpireSeries(30 * time.Minute)
	clk.Step(time.Minute)
	ev, err = eng.Evaluate(context.Background(), "inference", "llama", md)
	if err != nil {
		t.Fatal(err)
	}
	if sd, _ := ev.Decision.Signal(scaler.SignalSLO); sd.Held != scaler.HeldLearning {
		t.Errorf("a forgotten ScaledObject: held %q, want learning again", sd.Held)
	}
}

// queuedFleet is two replicas with 6 requests waiting throughout, each reporting finished
// requests and, of their first tokens, late ones after 5 s (the rest within 1 s).
func queuedFleet(t *testing.T, finished, late *atomic.Int64) (int, []scaler.Pod) {
	t.Helper()
	reps, port, podList := scalertest.Fleet(t, 2)
	for _, r := range reps {
		r.Set(func(w http.ResponseWriter, _ *http.Request) {
			f, l := finished.Load(), late.Load()
			fmt.Fprintf(w, "vllm:num_requests_waiting 6\nvllm:num_requests_running 8\n# TYPE vllm:request_success_total counter\n"+
				"vllm:request_success_total{finished_reason=\"stop\"} %d\n# TYPE vllm:time_to_first_token_seconds histogram\n"+
				"vllm:time_to_first_token_seconds_bucket{le=\"1\"} %d\nvllm:time_to_first_token_seconds_bucket{le=\"5\"} %d\n"+
				"vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} %d\nvllm:time_to_first_token_seconds_sum 1\nvllm:time_to_first_token_seconds_count %d\n",
				f, f-l, f-l, f, f)
		})
	}
	return port, podList
}
