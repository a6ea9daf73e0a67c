// Package promsource_test checks the scaler's prometheus source against a real Prometheus
// server (Debian's prometheus package, started by the test) scraping fake vLLM replicas on
// their own loopback IPs, labelled namespace/pod the way a PodMonitor labels them.
package promsource_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/promsource"
	"github.com/berth-dev/berth/test/rigtest"
	"github.com/berth-dev/berth/test/scalertest"
)

// startPrometheus runs Prometheus scraping every replica each interval, labelled namespace
// inference and its pod's name, and returns its URL.
func startPrometheus(t testing.TB, reps []*scalertest.Replica, pods []scaler.Pod, port int, interval time.Duration) string {
	t.Helper()
	targets := make([]rigtest.PrometheusTarget, len(reps))
	for i, r := range reps {
		targets[i] = rigtest.PrometheusTarget{Address: fmt.Sprintf("%s:%d", r.IP, port), Labels: map[string]string{"namespace": "inference", "pod": pods[i].Name}}
	}
	return rigtest.StartPrometheus(t, interval, targets)
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ttftPage is a vLLM page whose TTFT histogram grows by 10 first tokens per scrape: 8 under
// 0.25 s, 2 between 1 and 2.5 s; and whose token counters grow by 1,000 prompt and 500
// generated tokens per scrape.
func ttftPage(waiting, running, kv float64) http.HandlerFunc {
	var n atomic.Int64
	return func(w http.ResponseWriter, r *http.Request) {
		k := n.Add(1)
		scalertest.Page(waiting, running, kv)(w, r)
		fmt.Fprintf(w, "# TYPE vllm:time_to_first_token_seconds histogram\n"+
			"vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"0.25\"} %d\n"+
			"vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"1\"} %d\n"+
			"vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"2.5\"} %d\n"+
			"vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"+Inf\"} %d\n"+
			"vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"m\"} %d\n"+
			"vllm:time_to_first_token_seconds_sum{engine=\"0\",model_name=\"m\"} %d\n", 8*k, 8*k, 10*k, 10*k, 10*k, 3*k)
		fmt.Fprintf(w, "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} %d\n"+
			"# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} %d\n", 1000*k, 500*k)
	}
}

func TestPrometheusSource(t *testing.T) {
	reps, port, pods := scalertest.Fleet(t, 3)
	reps[0].Set(ttftPage(6, 8, 0.9))
	reps[1].Set(ttftPage(3, 8, 0.7))
	reps[2].Set(ttftPage(0, 4, 0.2))
	url := startPrometheus(t, reps, pods, port, time.Second)
	tr, err := scaler.ParseTrigger(map[string]string{"targetQueueDepth": "2", "targetKVCacheUsage": "0.8", "targetTTFTSeconds": "1",
		"targetTokensPerSecond": "1000", "source": "prometheus", "prometheusAddress": url, "model": "m"})
	if err != nil {
		t.Fatal(err)
	}
	src := promsource.New(promsource.Options{FreshFor: time.Millisecond, MaxAge: 10 * time.Second, TTFTWindow: 5 * time.Second})
	ctx := context.Background()
	// A fourth pod that Prometheus does not know and a starting one: the first is a ready
	// replica without data (partial), the second is capacity on its way.
	all := append(append([]scaler.Pod(nil), pods...), scaler.Pod{Name: "unscraped", IP: "127.0.9.9", Ready: true}, scaler.Pod{Name: "cold"})
	var o scaler.Observation
	waitFor(t, 30*time.Second, "a TTFT rate over two scrapes", func() bool {
		o, err = src.Observe(ctx, tr, "inference", all)
		return err == nil && !math.IsNaN(o.TTFTP95)
	})
	if o.Ready != 4 || o.Sampled != 3 || o.Starting != 1 || o.Waiting != 9 || o.Running != 20 || o.KVSampled != 3 || math.Abs(o.KVUsage-1.8) > 1e-9 {
		t.Fatalf("observation = %+v", o)
	}
	// Every replica's buckets grow as 8k, 8k, 10k, 10k for le 0.25, 1, 2.5, +Inf, so every rate
	// (and their sum) is proportional to 0.8, 0.8, 1, 1: rank 0.95 falls in (1, 2.5] and
	// histogram_quantile interpolates 1 + 1.5·(0.95−0.8)/(1−0.8) = 2.125.
	if want := 2.125; math.Abs(o.TTFTP95-want) > 1e-9 {
		t.Fatalf("TTFT p95 = %v, want %v", o.TTFTP95, want)
	}
	// Each replica's counters grow 1,500 tokens per 1 s scrape: once the window has filled,
	// about 4,500 tokens/s over the three (Prometheus extrapolates rate() to the window's
	// edges, hence the tolerance).
	var last scaler.Observation
	waitFor(t, 30*time.Second, "a token rate of about 4,500/s over three replicas", func() bool {
		last, err = src.Observe(ctx, tr, "inference", pods)
		return err == nil && last.TokensSampled == 3 && math.Abs(last.TokensPerSecond-4500) < 900
	})
	if o.OldestSample > 3*time.Second {
		t.Errorf("sample age %v with a 1 s scrape interval", o.OldestSample)
	}
	d, err := scaler.DefaultPolicy.Decide(o, tr)
	if err != nil {
		t.Fatal(err)
	}
	// 9 waiting on the 3 replicas read (the fourth is unread: it counts for nothing, 9 is a
	// lower bound) asks for 5 at 2 each — the 5 that exist, one of them still starting.
	if q, _ := d.Signal(scaler.SignalQueue); q.Raw != 9 || q.Desired != 5 || q.Held != "" {
		t.Errorf("queue decision = %+v", q)
	}

	// Another namespace's series never count.
	if o, err := src.Observe(ctx, tr, "other", pods); err != nil || o.Sampled != 0 {
		t.Fatalf("namespace filter: %+v, %v", o, err)
	}
	// A replica whose scrapes fail goes stale in Prometheus and stops counting.
	reps[0].Set(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) })
	waitFor(t, 30*time.Second, "the failing replica drops out", func() bool {
		o, err = src.Observe(ctx, tr, "inference", pods)
		return err == nil && o.Sampled == 2
	})
	if o.Waiting != 3 {
		t.Fatalf("after the fault: %+v", o)
	}
	// Prometheus unreachable: an error, never an empty observation.
	bad, _ := scaler.ParseTrigger(map[string]string{"targetQueueDepth": "2", "source": "prometheus", "prometheusAddress": "http://127.0.0.1:1"})
	if _, err := src.Observe(ctx, bad, "inference", pods); err == nil {
		t.Fatal("unreachable Prometheus returned no error")
	}
}

// TestDemand: a demandQuery's vector is summed; a query with no series — the endpoint-picker
// preset against a Prometheus that scrapes no picker — is an error, never zero demand.
func TestDemand(t *testing.T) {
	reps, port, pods := scalertest.Fleet(t, 2)
	reps[0].Set(scalertest.Page(6, 8, 0.9))
	reps[1].Set(scalertest.Page(3, 8, 0.7))
	url := startPrometheus(t, reps, pods, port, time.Second)
	src := promsource.New(promsource.Options{FreshFor: time.Millisecond})
	ctx := context.Background()
	sum, err := scaler.ParseTrigger(map[string]string{"targetQueueDepth": "4", "prometheusAddress": url,
		"demandQuery": `sum by (pod) (vllm:num_requests_waiting{namespace="inference"})`})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := src.Demand(ctx, sum); err != nil || v != 9 {
		t.Errorf("summed demand = %v, %v; want 9", v, err)
	}
	preset, err := scaler.ParseTrigger(map[string]string{"targetQueueDepth": "4", "prometheusAddress": url,
		"demandPreset": "endpoint-picker", "inferencePool": "llama-pool"})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := src.Demand(ctx, preset); !errors.Is(err, promsource.ErrNoDemandSeries) {
		t.Errorf("no picker scraped: demand %v, err %v; want ErrNoDemandSeries", v, err)
	}
	bad, _ := scaler.ParseTrigger(map[string]string{"targetQueueDepth": "4", "prometheusAddress": url, "demandQuery": "sum(("})
	if _, err := src.Demand(ctx, bad); err == nil || !strings.Contains(err.Error(), "demandQuery") {
		t.Errorf("a query Prometheus refuses: err %v", err)
	}
}

// kvPage is a vLLM V1 page of two engines: waiting requests, KV usage, each engine's
// cache_config_info (no model_name label, as vLLM writes it) and the prompt-length histogram.
func kvPage(waiting [2]int, kv [2]float64, blocks [2]string, promptSum, prompts int) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# TYPE vllm:num_requests_waiting gauge\n# TYPE vllm:kv_cache_usage_perc gauge\n# TYPE vllm:cache_config_info gauge\n# TYPE vllm:request_prompt_tokens histogram\n")
		for e := range 2 {
			fmt.Fprintf(w, "vllm:num_requests_waiting{engine=\"%d\",model_name=\"m\"} %d\n", e, waiting[e])
			fmt.Fprintf(w, "vllm:kv_cache_usage_perc{engine=\"%d\",model_name=\"m\"} %g\n", e, kv[e])
			if blocks[e] != "" { // "": this engine has no cache_config_info series at all
				fmt.Fprintf(w, "vllm:cache_config_info{block_size=\"16\",engine=\"%d\",num_gpu_blocks=%q} 1\n", e, blocks[e])
			}
			fmt.Fprintf(w, "vllm:request_prompt_tokens_bucket{engine=\"%[1]d\",model_name=\"m\",le=\"+Inf\"} %[2]d\n"+
				"vllm:request_prompt_tokens_sum{engine=\"%[1]d\",model_name=\"m\"} %[3]d\nvllm:request_prompt_tokens_count{engine=\"%[1]d\",model_name=\"m\"} %[2]d\n",
				e, prompts, promptSum)
		}
	}
}

// TestKVTokensAndQueuedPromptTokens: through a real Prometheus, KV tokens are each engine's
// usage times its own cache size (cache_config_info joined on the engine, even with a model
// filter the info series does not carry), a replica with an engine not profiled yet is unknown,
// and queued prompt tokens are waiting requests times the mean prompt length.
func TestKVTokensAndQueuedPromptTokens(t *testing.T) {
	reps, port, pods := scalertest.Fleet(t, 4)
	reps[3].Set(kvPage([2]int{0, 0}, [2]float64{0.5, 0.5}, [2]string{"1000", ""}, 0, 0))         // engine 1 unsized: unknown, never counted short
	reps[0].Set(kvPage([2]int{3, 1}, [2]float64{0.5, 0.25}, [2]string{"1000", "2000"}, 3000, 2)) // 4 × 1,500 queued
	reps[1].Set(kvPage([2]int{0, 0}, [2]float64{0.1, 0.1}, [2]string{"1000", "1000"}, 0, 0))     // nothing waiting: a known 0
	reps[2].Set(kvPage([2]int{2, 0}, [2]float64{0.3, 0.3}, [2]string{"1000", "None"}, 0, 0))     // sizes and prompt length unknown
	url := startPrometheus(t, reps, pods, port, time.Second)
	tr, err := scaler.ParseTrigger(map[string]string{"targetKVTokens": "10000", "targetQueuedPromptTokens": "2048",
		"source": "prometheus", "prometheusAddress": url, "model": "m"})
	if err != nil {
		t.Fatal(err)
	}
	src := promsource.New(promsource.Options{FreshFor: time.Millisecond, MaxAge: 10 * time.Second})
	var o scaler.Observation
	waitFor(t, 30*time.Second, "all three replicas scraped", func() bool {
		o, err = src.Observe(context.Background(), tr, "inference", pods)
		return err == nil && o.Sampled == 4
	})
	// 0.5·16,000 + 0.25·32,000 and 0.1·16,000 + 0.1·16,000; the third is unknown.
	if o.KVTokensSampled != 2 || math.Abs(o.KVTokens-19200) > 1e-6 {
		t.Errorf("KV tokens %v over %d replicas, want 19200 over 2", o.KVTokens, o.KVTokensSampled)
	}
	if o.PromptSampled != 3 || math.Abs(o.QueuedPromptTokens-6000) > 1e-6 {
		t.Errorf("queued prompt tokens %v over %d replicas, want 6000 over 3", o.QueuedPromptTokens, o.PromptSampled)
	}
	d, err := scaler.DefaultPolicy.Decide(o, tr)
	if err != nil {
		t.Fatal(err)
	}
	// Partial on KV tokens (two replicas unknown): hold at the 4 ready, never down; the fourth
	// replica has nothing waiting (a known 0), so queued prompt tokens are known on three.
	for s, want := range map[scaler.Signal]int{scaler.SignalKVTokens: 4, scaler.SignalQueuedPromptTokens: 4} {
		if sd, _ := d.Signal(s); sd.Desired != want {
			t.Errorf("%s desired %d, want %d", s, sd.Desired, want)
		}
	}
}
