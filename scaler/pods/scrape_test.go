package pods

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/test/scalertest"
)

// fleet starts n fake replicas and a queue+KV trigger on their port.
func fleet(t *testing.T, n int) ([]*scalertest.Replica, *scaler.Trigger, []scaler.Pod) {
	t.Helper()
	reps, port, pods := scalertest.Fleet(t, n)
	tr, err := scaler.ParseTrigger(map[string]string{"targetQueueDepth": "4", "targetKVCacheUsage": "0.8", "metricsPort": strconv.Itoa(port)})
	if err != nil {
		t.Fatal(err)
	}
	return reps, tr, pods
}

var page = scalertest.Page

func TestObserveSumsReplicasAndCountsStarting(t *testing.T) {
	reps, tr, pods := fleet(t, 3)
	for i, r := range reps {
		r.Set(page(float64(i+1), 2, 0.5))
	}
	pods = append(pods, scaler.Pod{Name: "cold", Ready: false, IP: "127.0.0.99"}, scaler.Pod{Name: "pending"})
	s := New(Options{})
	o, _ := s.Observe(context.Background(), tr, pods, 0)
	if o.Ready != 3 || o.Sampled != 3 || o.Starting != 2 || o.Waiting != 6 || o.Running != 6 || o.KVSampled != 3 || o.KVUsage != 1.5 {
		t.Fatalf("observation = %+v", o)
	}
}

func TestOnePollCostsOneScrape(t *testing.T) {
	reps, tr, pods := fleet(t, 2)
	clk := clocktesting.NewFakeClock(time.Now())
	s := New(Options{Clock: clk, FreshFor: 2 * time.Second})
	var wg sync.WaitGroup
	for range 5 { // GetMetrics for two metrics, IsActive, and a second ScaledObject, at once
		wg.Add(1)
		go func() { defer wg.Done(); s.Observe(context.Background(), tr, pods, 0) }()
	}
	wg.Wait()
	for _, r := range reps {
		if got := r.Hits(); got != 1 {
			t.Fatalf("%s scraped %d times in one poll, want 1", r.IP, got)
		}
	}
	clk.Step(3 * time.Second)
	s.Observe(context.Background(), tr, pods, 0)
	if got := reps[0].Hits(); got != 2 {
		t.Fatalf("after FreshFor: %d scrapes, want 2", got)
	}
}

// TestFaults: a replica that is down, slow, or answers garbage keeps its last sample until the
// staleness bound, and then drops out; the observation never silently reads zero.
func TestFaults(t *testing.T) {
	faults := map[string]struct {
		h      http.HandlerFunc
		reason string
	}{
		"down":    {nil, ReasonConnection},
		"slow":    {func(w http.ResponseWriter, r *http.Request) { time.Sleep(time.Second); page(0, 0, 0)(w, r) }, ReasonTimeout},
		"garbage": {func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "}}}{{{ \x00") }, ReasonParse},
		"html": {func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<!DOCTYPE html><html><body>Service Unavailable</body></html>")
		}, ReasonParse},
		"500": {func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "engine dead", http.StatusInternalServerError)
		}, ReasonHTTPStatus},
		"other metrics": {func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "go_goroutines 3\n") }, ReasonNoSeries},
	}
	for name, tc := range faults {
		t.Run(name, func(t *testing.T) {
			fault := tc.h
			reps, tr, pods := fleet(t, 2)
			reps[0].Set(page(8, 4, 0.9))
			reps[1].Set(page(2, 4, 0.5))
			clk := clocktesting.NewFakeClock(time.Now())
			var reasons []string
			var mu sync.Mutex
			s := New(Options{Clock: clk, Timeout: 200 * time.Millisecond, MaxAge: 30 * time.Second,
				Observe: func(_ time.Duration, reason string) { mu.Lock(); reasons = append(reasons, reason); mu.Unlock() }})
			if o, _ := s.Observe(context.Background(), tr, pods, 0); o.Sampled != 2 || o.Waiting != 10 {
				t.Fatalf("healthy: %+v", o)
			}
			if fault == nil {
				reps[0].Set(func(w http.ResponseWriter, _ *http.Request) {
					hj, _ := w.(http.Hijacker)
					c, _, _ := hj.Hijack()
					_ = c.Close()
				})
			} else {
				reps[0].Set(fault)
			}
			clk.Step(10 * time.Second)
			mu.Lock()
			reasons = nil
			mu.Unlock()
			o, res := s.Observe(context.Background(), tr, pods, 0)
			mu.Lock()
			slices.Sort(reasons)
			if d := cmp.Diff([]string{"", tc.reason}, reasons); d != "" {
				t.Errorf("reasons reported to Observe (-want +got):\n%s", d)
			}
			mu.Unlock()
			if o.Sampled != 2 || o.Waiting != 10 || o.KVUsage != 1.4 {
				t.Fatalf("within the staleness bound the failing replica keeps its last sample: %+v", o)
			}
			if res[0].Err == nil || !res[0].Fresh {
				t.Fatalf("result = %+v, want the error reported and the sample still fresh", res[0])
			}
			clk.Step(25 * time.Second) // the last good sample is now 35s old
			o, _ = s.Observe(context.Background(), tr, pods, 0)
			if o.Ready != 2 || o.Sampled != 1 || o.Waiting != 2 {
				t.Fatalf("past the staleness bound the replica drops out (partial data): %+v", o)
			}
			// Ready 2, sampled 1 with 2 waiting: the queue alone asks for 1 (2 scaled to two
			// replicas, target 4), which partial data must not shrink to; KV (0.5 scaled to 1.0,
			// target 0.8) asks for exactly 2.
			d, err := scaler.DefaultPolicy.Decide(o, tr)
			if err != nil || !d.Partial || d.Desired != 2 || !d.Active {
				t.Fatalf("partial data must not scale down or deactivate: %+v, %v", d, err)
			}
			// Both replicas failing: no fresh data → an error, never zero.
			reps[1].Set(fault)
			if fault == nil {
				reps[1].Set(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "", http.StatusBadGateway) })
			}
			clk.Step(40 * time.Second)
			o, _ = s.Observe(context.Background(), tr, pods, 0)
			if _, err := scaler.DefaultPolicy.Decide(o, tr); !errors.Is(err, scaler.ErrNoFreshData) {
				t.Fatalf("no fresh data: Decide err = %v (observation %+v)", err, o)
			}
		})
	}
}

// TestAReusedIPStartsAfresh: a pod that gets the IP of a pod deleted moments before (kwok at
// once, the VPC CNI after its cool-down) and exports nothing counts as not sampled — partial
// data, no scale-down — not as sampled on the deleted pod's last page for MaxAge; the IP's own
// pod keeps its last page through a failed scrape as before.
func TestAReusedIPStartsAfresh(t *testing.T) {
	for _, background := range []bool{false, true} {
		t.Run(fmt.Sprintf("background=%v", background), func(t *testing.T) {
			reps, tr, pods := fleet(t, 1)
			reps[0].Set(page(8, 4, 0.5))
			clk := clocktesting.NewFakeClock(time.Now())
			s := New(Options{Clock: clk, MaxAge: 45 * time.Second})
			if background {
				s.background = true // answered from memory, as with Run's loop going
			}
			old := pods[0]
			old.UID = "old"
			if o, _ := s.Observe(context.Background(), tr, []scaler.Pod{old}, 0); o.Sampled != 1 || o.Waiting != 8 {
				t.Fatalf("the IP's first pod: %+v", o)
			}
			// The pod is deleted; another takes its IP and serves no metrics.
			reps[0].Set(func(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) })
			clk.Step(3 * time.Second)
			reused := old
			reused.Name, reused.UID = "new", "new"
			o, res := s.Observe(context.Background(), tr, []scaler.Pod{reused}, 0)
			if o.Ready != 1 || o.Sampled != 0 || res[0].Fresh || res[0].Err == nil {
				t.Fatalf("the new pod on a reused IP: observation %+v, result %+v; want it unsampled with the scrape's error", o, res[0])
			}
			if _, err := scaler.DefaultPolicy.Decide(o, tr); !errors.Is(err, scaler.ErrNoFreshData) {
				t.Fatalf("Decide err = %v, want ErrNoFreshData (never the deleted pod's queue)", err)
			}
			// The new pod starts exporting: its own page counts.
			reps[0].Set(page(1, 1, 0.1))
			clk.Step(3 * time.Second)
			if o, _ := s.Observe(context.Background(), tr, []scaler.Pod{reused}, 0); !background && (o.Sampled != 1 || o.Waiting != 1) {
				t.Fatalf("the new pod's own page: %+v", o)
			}
		})
	}
}

func TestTTFTWindow(t *testing.T) {
	reps, qtr, pods := fleet(t, 1)
	tr, err := scaler.ParseTrigger(map[string]string{"targetQueueDepth": "4", "targetTTFTSeconds": "0.5", "role": "prefill", "metricsPort": strconv.Itoa(qtr.MetricsPort)})
	if err != nil {
		t.Fatal(err)
	}
	var fast, slow atomic.Int64
	reps[0].Set(func(w http.ResponseWriter, _ *http.Request) {
		f, s := fast.Load(), slow.Load()
		fmt.Fprintf(w, "vllm:num_requests_waiting 0\n# TYPE vllm:time_to_first_token_seconds histogram\n"+
			"vllm:time_to_first_token_seconds_bucket{le=\"0.1\"} %d\nvllm:time_to_first_token_seconds_bucket{le=\"2.5\"} %d\n"+
			"vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} %d\nvllm:time_to_first_token_seconds_count %d\nvllm:time_to_first_token_seconds_sum 1\n", f, f+s, f+s, f+s)
	})
	clk := clocktesting.NewFakeClock(time.Now())
	s := New(Options{Clock: clk, TTFTWindow: time.Minute})
	fast.Store(1000) // history before the window: all fast
	if o, _ := s.Observe(context.Background(), tr, pods, 0); !isNaN(o.TTFTP95) {
		t.Fatalf("one page has no window yet: p95 %v", o.TTFTP95)
	}
	clk.Step(30 * time.Second)
	slow.Store(100) // the window sees only slow first tokens
	o, _ := s.Observe(context.Background(), tr, pods, 0)
	// The window holds 100 first tokens, all in (0.1, 2.5]: p95 interpolates to 0.1 + 2.4·95/100.
	// History diluting the window would give 1.18.
	if want := 2.38; math.Abs(o.TTFTP95-want) > 1e-9 {
		t.Fatalf("p95 over the window = %v, want %v (the slow bucket alone; history must not dilute it)", o.TTFTP95, want)
	}
}

func isNaN(f float64) bool { return f != f }

// TestBackgroundAnswersFromMemory: with Run's loop going, a replica is read at its cadence in
// the background; after its first read, answers never wait for the network — not even for a
// replica that hangs — and a replica nobody asks about any more stops being read.
func TestBackgroundAnswersFromMemory(t *testing.T) {
	reps, tr, pods := fleet(t, 2)
	reps[0].Set(page(3, 2, 0.5))
	reps[1].Set(page(1, 2, 0.5))
	s := New(Options{Timeout: 3 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx, 20*time.Millisecond)
	every := 200 * time.Millisecond
	if o, _ := s.Observe(ctx, tr, pods, every); o.Sampled != 2 || o.Waiting != 4 { // first sight: waits for the first read
		t.Fatalf("first observation %+v", o)
	}
	// Replica 1 hangs from now on (past the scrape timeout): answers still come at once, with
	// its last sample, which is fresh within MaxAge.
	hang := make(chan struct{})
	defer close(hang)
	reps[1].Set(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	})
	reps[0].Set(page(5, 2, 0.5))
	time.Sleep(3 * every)
	start := time.Now()
	o, _ := s.Observe(ctx, tr, pods, every)
	if took := time.Since(start); took > 50*time.Millisecond {
		t.Errorf("an answer with a hung replica took %v", took)
	}
	if o.Sampled != 2 || o.Waiting != 6 {
		t.Errorf("observation %+v: want the new page of replica 0 and the last of replica 1", o)
	}
	// Cadence: about one read per interval, not one per question.
	before := reps[0].Hits()
	for range 50 {
		s.Observe(ctx, tr, pods, every)
		time.Sleep(10 * time.Millisecond)
	}
	if got := reps[0].Hits() - before; got < 1 || got > 5 {
		t.Errorf("%d reads in ~500 ms at a 200 ms cadence with 50 questions", got)
	}
}

func TestCadence(t *testing.T) {
	for _, tc := range []struct{ poll, want time.Duration }{
		{0, MaxInterval}, {time.Second, MinInterval}, {15 * time.Second, 5 * time.Second}, {30 * time.Second, MaxInterval}, {5 * time.Minute, MaxInterval},
	} {
		if got := Cadence(tc.poll); got != tc.want {
			t.Errorf("Cadence(%v) = %v, want %v", tc.poll, got, tc.want)
		}
	}
}

// TestPreemptionRate: preemptions per minute come from the counter's growth over the window,
// not its total; one page has no window yet (unknown, never zero); a counter reset counts from 0.
func TestPreemptionRate(t *testing.T) {
	reps, qtr, pods := fleet(t, 1)
	tr, err := scaler.ParseTrigger(map[string]string{"targetKVCacheUsage": "0.8", "maxPreemptionsPerMinute": "2", "role": "decode",
		"metricsPort": strconv.Itoa(qtr.MetricsPort)})
	if err != nil {
		t.Fatal(err)
	}
	var total atomic.Int64
	reps[0].Set(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.9\n# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{engine=\"0\"} %d\n", total.Load())
	})
	clk := clocktesting.NewFakeClock(time.Now())
	s := New(Options{Clock: clk, TTFTWindow: time.Minute})
	total.Store(500) // history
	if o, _ := s.Observe(context.Background(), tr, pods, 0); !isNaN(o.PreemptionsPerMinute) {
		t.Fatalf("one page: %v preemptions/min, want unknown", o.PreemptionsPerMinute)
	}
	clk.Step(30 * time.Second)
	total.Store(503) // 3 in 30 s
	if o, _ := s.Observe(context.Background(), tr, pods, 0); math.Abs(o.PreemptionsPerMinute-6) > 1e-9 {
		t.Fatalf("3 preemptions in 30 s = %v/min, want 6", o.PreemptionsPerMinute)
	}
	clk.Step(30 * time.Second)
	total.Store(2) // the server restarted
	// The window's baseline is the first page (500); the counter went down, so it counts from
	// zero: 2 over the 60 s since that page.
	if o, _ := s.Observe(context.Background(), tr, pods, 0); o.PreemptionsPerMinute != 2 {
		t.Fatalf("after a counter reset: %v/min, want 2", o.PreemptionsPerMinute)
	}
}

// emulatorOnLoopback runs a vllm-sim fleet of one replica serving on a free loopback port, and
// returns it and the port.
func emulatorOnLoopback(t *testing.T, opts vllmsim.FleetOptions) (*vllmsim.Fleet, string) {
	t.Helper()
	fleet, err := vllmsim.NewFleet(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close(context.Background()) })
	if err := fleet.SetAddresses(context.Background(), []string{"127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	bound, _ := fleet.BoundAddr("127.0.0.1:0")
	_, port, _ := net.SplitHostPort(bound)
	return fleet, port
}

// TestPreemptionsFromTheEmulator: the scraper reads the preemptions vllm-sim's KV-growth model
// makes (its real vllm:num_preemptions_total counter) as a rate over the window.
func TestPreemptionsFromTheEmulator(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	fleet, port := emulatorOnLoopback(t, vllmsim.FleetOptions{Rate: 8, Clock: clk, Config: vllmsim.Config{MaxNumSeqs: 16, KVBlocksTotal: 1000,
		KVBlocksPerSeq: 100, PromptTokens: 256, GenerationTokens: 256, KVGrowth: true}})
	tr, err := scaler.ParseTrigger(map[string]string{"targetKVCacheUsage": "0.8", "maxPreemptionsPerMinute": "1", "role": "decode", "metricsPort": port})
	if err != nil {
		t.Fatal(err)
	}
	pods := []scaler.Pod{{Name: "sim", IP: "127.0.0.1", Ready: true}}
	s := New(Options{Clock: clk, TTFTWindow: time.Minute})
	step := func(d time.Duration) {
		for range int(d / (100 * time.Millisecond)) {
			clk.Step(100 * time.Millisecond)
			fleet.Step(clk.Now())
		}
	}
	rep, ok := fleet.Replica("127.0.0.1:0")
	if !ok {
		t.Fatal("no replica")
	}
	preempted := func() float64 {
		n := 0.0
		for _, e := range rep.Snapshot() {
			n += float64(e.Preemptions)
		}
		return n
	}
	step(10 * time.Second)
	s.Observe(context.Background(), tr, pods, 0)
	before := preempted()
	step(30 * time.Second) // 8/s against a cache that fits 10 grown sequences: preemptions
	o, res := s.Observe(context.Background(), tr, pods, 0)
	want := (preempted() - before) * 2 // over 30 s, per minute
	if res[0].Err != nil || want == 0 || o.PreemptionsPerMinute != want {
		t.Fatalf("preemptions per minute %v (err %v); want %v, the emulator's own count over the 30 s", o.PreemptionsPerMinute, res[0].Err, want)
	}
}

// TestKVTokensAndQueuedPromptsFromTheEmulator: KV tokens in use are vllm-sim's own blocks in use
// times its block size (read through its vllm:cache_config_info), and the queued prompt tokens
// its waiting requests times their prompt length (read through vllm:request_prompt_tokens).
func TestKVTokensAndQueuedPromptsFromTheEmulator(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	fleet, port := emulatorOnLoopback(t, vllmsim.FleetOptions{Rate: 12, Clock: clk, Config: vllmsim.Config{MaxNumSeqs: 16, KVBlocksTotal: 1000,
		KVBlocksPerSeq: 50, PromptTokens: 384, GenerationTokens: 256, ServiceTime: 2 * time.Second}})
	tr, err := scaler.ParseTrigger(map[string]string{"targetKVTokens": "8000", "targetQueuedPromptTokens": "4096", "metricsPort": port})
	if err != nil {
		t.Fatal(err)
	}
	for range 200 { // 20 s at 12/s against 16 slots of 2 s: a queue forms
		clk.Step(100 * time.Millisecond)
		fleet.Step(clk.Now())
	}
	rep, _ := fleet.Replica("127.0.0.1:0")
	var used, waiting float64
	for _, e := range rep.Snapshot() {
		used += float64(e.KVBlocksUsed)
		waiting += float64(e.Waiting)
	}
	o, res := New(Options{Clock: clk}).Observe(context.Background(), tr, []scaler.Pod{{Name: "sim", IP: "127.0.0.1", Ready: true}}, 0)
	if res[0].Err != nil || o.KVTokensSampled != 1 || o.KVTokens != used*16 || used == 0 {
		t.Errorf("KV tokens %v from %d replicas (err %v); want %v blocks × 16", o.KVTokens, o.KVTokensSampled, res[0].Err, used)
	}
	if o.PromptSampled != 1 || o.QueuedPromptTokens != waiting*384 || waiting == 0 {
		t.Errorf("queued prompt tokens %v from %d replicas; want %v waiting × 384", o.QueuedPromptTokens, o.PromptSampled, waiting)
	}
}

// TestTokenRate: tokens per second are the growth of prompt plus generated tokens over the
// window, over every engine and both of vLLM's counters; one page has no window (the replica is
// not counted in TokensSampled).
func TestTokenRate(t *testing.T) {
	reps, qtr, pods := fleet(t, 1)
	tr, err := scaler.ParseTrigger(map[string]string{"targetTokensPerSecond": "1000", "metricsPort": strconv.Itoa(qtr.MetricsPort)})
	if err != nil {
		t.Fatal(err)
	}
	var prompt, gen atomic.Int64
	reps[0].Set(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "vllm:num_requests_waiting 0\n# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{engine=\"0\"} %d\nvllm:prompt_tokens_total{engine=\"1\"} %d\n"+
			"# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine=\"0\"} %d\n", prompt.Load(), prompt.Load(), gen.Load())
	})
	clk := clocktesting.NewFakeClock(time.Now())
	s := New(Options{Clock: clk, TTFTWindow: time.Minute})
	prompt.Store(10000)
	gen.Store(5000)
	if o, _ := s.Observe(context.Background(), tr, pods, 0); o.TokensSampled != 0 {
		t.Fatalf("one page: %d replicas with a token rate, want none", o.TokensSampled)
	}
	clk.Step(10 * time.Second)
	prompt.Store(12000) // +2,000 on each of two engines
	gen.Store(6000)     // +1,000
	o, _ := s.Observe(context.Background(), tr, pods, 0)
	if o.TokensSampled != 1 || math.Abs(o.TokensPerSecond-500) > 1e-9 {
		t.Fatalf("5,000 tokens in 10 s: %v tokens/s over %d replicas, want 500 over 1", o.TokensPerSecond, o.TokensSampled)
	}
}

// TestParallelIsOneLimit: Parallel bounds the scrapes of the whole scraper, not of each call —
// three calls at once over 12 never-read replicas never have more than Parallel scrapes in
// flight, and every replica is still read.
func TestParallelIsOneLimit(t *testing.T) {
	reps, tr, pods := fleet(t, 12)
	var inflight, peak atomic.Int32
	release := make(chan struct{})
	for _, r := range reps {
		r.Set(func(w http.ResponseWriter, _ *http.Request) {
			n := inflight.Add(1)
			defer inflight.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			<-release
			fmt.Fprint(w, "vllm:num_requests_waiting 1\nvllm:num_requests_running 1\n")
		})
	}
	s := New(Options{Parallel: 3})
	var wg sync.WaitGroup
	sampled := make([]int, 3)
	for c := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, _ := s.Observe(context.Background(), tr, pods[c*4:(c+1)*4], 0)
			sampled[c] = o.Sampled
		}()
	}
	// Let the scrapes pile up against the limit, then let them through.
	deadline := time.Now().Add(5 * time.Second)
	for inflight.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if got := peak.Load(); got != 3 {
		t.Errorf("at most %d scrapes were in flight at once, want exactly Parallel = 3", got)
	}
	if fmt.Sprint(sampled) != "[4 4 4]" {
		t.Errorf("replicas sampled per call = %v, want every one read", sampled)
	}
}

// TestSLOWindow: with an SLO trigger each replica's window carries its completed requests
// (vllm:request_success_total, aborts apart), the requests that arrived (completed and
// aborted plus the growth of the queue), the window's first tokens and the queue held
// through it; the fleet's arrival rate is their sum.
func TestSLOWindow(t *testing.T) {
	reps, qtr, pods := fleet(t, 1)
	tr, err := scaler.ParseTrigger(map[string]string{"ttftSLOSeconds": "2", "metricsPort": strconv.Itoa(qtr.MetricsPort)})
	if err != nil {
		t.Fatal(err)
	}
	var stop, abort, waiting, firstTokens atomic.Int64
	reps[0].Set(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "vllm:num_requests_waiting %d\nvllm:num_requests_running 4\n# TYPE vllm:request_success_total counter\n"+
			"vllm:request_success_total{finished_reason=\"stop\"} %d\nvllm:request_success_total{finished_reason=\"abort\"} %d\n"+
			"# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_bucket{le=\"1\"} %d\n"+
			"vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} %d\nvllm:time_to_first_token_seconds_sum 1\nvllm:time_to_first_token_seconds_count %d\n"+
			"# TYPE vllm:request_time_per_output_token_seconds histogram\nvllm:request_time_per_output_token_seconds_bucket{le=\"0.1\"} %d\n"+
			"vllm:request_time_per_output_token_seconds_bucket{le=\"+Inf\"} %d\nvllm:request_time_per_output_token_seconds_sum 1\nvllm:request_time_per_output_token_seconds_count %d\n",
			waiting.Load(), stop.Load(), abort.Load(), firstTokens.Load(), firstTokens.Load(), firstTokens.Load(), stop.Load()-10, stop.Load(), stop.Load())
	})
	clk := clocktesting.NewFakeClock(time.Now())
	s := New(Options{Clock: clk, TTFTWindow: time.Minute})
	stop.Store(100)
	waiting.Store(3)
	if o, _ := s.Observe(context.Background(), tr, pods, 0); len(o.Windows) != 0 || !math.IsNaN(o.Arrivals) {
		t.Fatalf("one page: windows %v, arrivals %v; want none and NaN (unknown, not zero)", o.Windows, o.Arrivals)
	}
	clk.Step(time.Minute)
	stop.Store(124)
	abort.Store(6)
	waiting.Store(9)
	firstTokens.Store(30)
	o, _ := s.Observe(context.Background(), tr, pods, 0)
	if len(o.Windows) != 1 || o.ArrivalsSampled != 1 {
		t.Fatalf("two pages a minute apart: %d windows, %d replicas with arrivals; want 1 and 1", len(o.Windows), o.ArrivalsSampled)
	}
	w := o.Windows[0]
	if w.Span != time.Minute || w.Finished != 24 || w.Arrived != 36 || w.Waiting != 3 || w.TTFT.Total() != 30 || !w.End.Equal(clk.Now()) {
		t.Errorf("window = span %s, finished %v, arrived %v, waiting %v, first tokens %v, end %s; want 1m, 24 (the 6 aborted are not served), 36 (those 30 and 6 more waiting), 3 (held through), 30, now",
			w.Span, w.Finished, w.Arrived, w.Waiting, w.TTFT.Total(), w.End)
	}
	if math.Abs(o.Arrivals-0.6) > 1e-9 {
		t.Errorf("arrivals = %v req/s, want 0.6", o.Arrivals)
	}
	// The requests' own times per output token, the window's share: 24 finished, all within
	// 100 ms (the 10 over it came before the window).
	if got, within := w.TPOT.Total(), w.TPOT.FractionAtOrBelowBound(0.1); got != 24 || within != 1 {
		t.Errorf("window TPOT: %v requests, %v within 100 ms; want 24 and 1", got, within)
	}
}

// sloReplica starts one fake replica whose page says running requests run, none wait and
// stop's count finished, and an SLO trigger on its port.
func sloReplica(t *testing.T, running int) (*scaler.Trigger, []scaler.Pod, *atomic.Int64) {
	t.Helper()
	reps, qtr, pods := fleet(t, 1)
	tr, err := scaler.ParseTrigger(map[string]string{"ttftSLOSeconds": "2", "metricsPort": strconv.Itoa(qtr.MetricsPort)})
	if err != nil {
		t.Fatal(err)
	}
	stop := new(atomic.Int64)
	reps[0].Set(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "vllm:num_requests_waiting 0\nvllm:num_requests_running %d\n# TYPE vllm:request_success_total counter\n"+
			"vllm:request_success_total{finished_reason=\"stop\"} %d\n", running, stop.Load())
	})
	return tr, pods, stop
}

// TestRecentInterval: each replica's window carries its last scaler.RecentWindow — from the
// newest page at or before its start, the window's own start where no page inside the window
// is — and the requests that arrived in it, whatever the scrape cadence.
func TestRecentInterval(t *testing.T) {
	for _, tc := range []struct {
		name        string
		every       time.Duration // between pages
		pages       int           // after the first
		wantRecent  time.Duration
		wantArrived float64
	}{
		{"pages every 15 s", 15 * time.Second, 4, 15 * time.Second, 40},
		{"pages every 5 s", 5 * time.Second, 12, 15 * time.Second, 40 + 2*5},
		{"two pages a minute apart", time.Minute, 1, time.Minute, 40},
		{"pages every 20 s: the newest page before its start", 20 * time.Second, 3, 20 * time.Second, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, pods, stop := sloReplica(t, 4)
			clk := clocktesting.NewFakeClock(time.Now())
			s := New(Options{Clock: clk, TTFTWindow: time.Minute})
			s.Observe(context.Background(), tr, pods, 0)
			for i := range tc.pages {
				clk.Step(tc.every)
				if i == tc.pages-1 {
					stop.Add(40) // a surge in the last interval
				} else {
					stop.Add(int64(tc.every / time.Second)) // 1 req/s before it
				}
				s.Observe(context.Background(), tr, pods, 0)
			}
			o, _ := s.Observe(context.Background(), tr, pods, 0)
			if len(o.Windows) != 1 {
				t.Fatalf("%d windows, want 1", len(o.Windows))
			}
			if w := o.Windows[0]; w.Recent != tc.wantRecent || w.RecentArrived != tc.wantArrived {
				t.Errorf("last interval %s with %v arrived, want %s with %v", w.Recent, w.RecentArrived, tc.wantRecent, tc.wantArrived)
			}
		})
	}
	// A replica that became ready 8 s before its first page, read again 5 s later: no page is
	// 15 s old, so its last interval is its whole window from its Ready time, every request
	// it has had — not the 5 s since its first page.
	t.Run("joined, two pages 5 s apart", func(t *testing.T) {
		tr, pods, stop := sloReplica(t, 0)
		clk := clocktesting.NewFakeClock(time.Now())
		s := New(Options{Clock: clk, TTFTWindow: time.Minute})
		p := pods[0]
		p.ReadyAt = clk.Now().Add(-8 * time.Second)
		p.StartedAt = p.ReadyAt.Add(-2 * time.Minute)
		stop.Store(16)
		s.Observe(context.Background(), tr, []scaler.Pod{p}, 0)
		clk.Step(5 * time.Second)
		stop.Store(26)
		o, _ := s.Observe(context.Background(), tr, []scaler.Pod{p}, 0)
		if len(o.Windows) != 1 || !o.Windows[0].Joined {
			t.Fatalf("windows %+v, want one joined", o.Windows)
		}
		if w := o.Windows[0]; w.Recent != 13*time.Second || w.RecentArrived != 26 {
			t.Errorf("last interval %s with %v arrived, want 13s with 26 (from its Ready time)", w.Recent, w.RecentArrived)
		}
	})
}

func TestRecentStartup(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ready := []scaler.Pod{
		{Name: "old", Created: now.Add(-3 * time.Hour), ReadyAt: now.Add(-3*time.Hour + 10*time.Minute)},
		{Name: "cold", Created: now.Add(-10 * time.Minute), ReadyAt: now.Add(-10*time.Minute + 210*time.Second)},
		{Name: "warm", Created: now.Add(-5 * time.Minute), ReadyAt: now.Add(-5*time.Minute + 70*time.Second)},
		{Name: "unknown", Created: now.Add(-time.Minute)},
	}
	if got := scaler.RecentStartup(ready, now); got != 210*time.Second {
		t.Errorf("RecentStartup = %s, want 3m30s: the longest of the last hour's start-ups (a start-up three hours ago is forgotten)", got)
	}
}

// TestJoinedWindow: a replica that became ready inside the window, first read after that, has
// a window from its ready time with its counters at zero then — the requests it took before
// the first scrape count — also after a container restart; one whose readiness came back long
// after its containers started (a flapping probe: counters from before) or that was read
// before it became ready keeps windows between pages.
func TestJoinedWindow(t *testing.T) {
	tr, pods, stop := sloReplica(t, 4)
	start := time.Now()
	for _, tc := range []struct {
		name           string
		startup, ready time.Duration // containers started startup before ready; ready before the first page
		readBefore     bool          // the scraper read the endpoint before it became ready
		wantSpan       time.Duration
		wantArrived    float64
	}{
		{"joined 8 s before the first page", 2 * time.Minute, 8 * time.Second, false, 8 * time.Second, 24},
		{"ready before the window: pages only", 2 * time.Minute, 2 * time.Minute, false, 0, 0},
		{"ready again long after its containers started", 2 * time.Hour, 8 * time.Second, false, 0, 0},
		{"read before it was ready", 2 * time.Minute, 8 * time.Second, true, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(start)
			s := New(Options{Clock: clk, TTFTWindow: time.Minute})
			p := pods[0]
			if tc.readBefore {
				stop.Store(0)
				s.Observe(context.Background(), tr, []scaler.Pod{p}, 0)
				clk.Step(10 * time.Second)
			}
			p.ReadyAt = clk.Now().Add(-tc.ready)
			p.StartedAt = p.ReadyAt.Add(-tc.startup)
			p.Created = p.StartedAt.Add(-3 * time.Hour) // a container restarted: its age is not the pod's
			stop.Store(20)
			o, _ := s.Observe(context.Background(), tr, []scaler.Pod{p}, 0)
			if tc.wantSpan == 0 {
				if len(o.Windows) != 0 && o.Windows[0].Joined {
					t.Fatalf("window %+v: want none joined", o.Windows[0])
				}
				return
			}
			if len(o.Windows) != 1 {
				t.Fatalf("%d windows, want 1", len(o.Windows))
			}
			if w := o.Windows[0]; !w.Joined || w.Span != tc.wantSpan || w.Arrived != tc.wantArrived {
				t.Errorf("window: joined %v, span %s, arrived %v; want joined, %s, %v", w.Joined, w.Span, w.Arrived, tc.wantSpan, tc.wantArrived)
			} else if w.Recent != w.Span || w.RecentArrived != w.Arrived {
				t.Errorf("last interval %s with %v arrived, want the whole window (no page inside it)", w.Recent, w.RecentArrived)
			}
			if math.Abs(o.Arrivals-tc.wantArrived/tc.wantSpan.Seconds()) > 1e-9 {
				t.Errorf("arrivals %v, want %v", o.Arrivals, tc.wantArrived/tc.wantSpan.Seconds())
			}
		})
	}
}
