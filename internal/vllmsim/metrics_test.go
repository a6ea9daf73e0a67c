package vllmsim

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func serveReplica(t *testing.T, r *Replica) *httptest.Server {
	t.Helper()
	h, err := r.Handler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

func TestMetricsExposition(t *testing.T) {
	r := newTestReplica(t, Config{Model: "m/x", Engines: 2, MaxNumSeqs: 2, ServiceTime: time.Second})
	r.Submit(6, t0)
	r.Step(t0)
	r.Step(t0.Add(1500 * time.Millisecond))
	r.Submit(2, t0.Add(time.Second)) // one queued per engine, then aborted
	r.Abort(t0.Add(1500 * time.Millisecond))
	fams := scrape(t, serveReplica(t, r).URL)

	for _, tc := range []struct {
		name  string
		typ   dto.MetricType
		help  string
		extra []string
	}{
		{MetricRunning, dto.MetricType_GAUGE, "Number of requests in model execution batches.", nil},
		{MetricWaiting, dto.MetricType_GAUGE, "Number of requests waiting to be processed.", nil},
		{MetricKVCacheUsage, dto.MetricType_GAUGE, "KV-cache usage. 1 means 100 percent usage.", nil},
		{MetricTTFT, dto.MetricType_HISTOGRAM, "Histogram of time to first token in seconds.", nil},
		{MetricE2ELatency, dto.MetricType_HISTOGRAM, "Histogram of e2e request latency in seconds.", nil},
		{MetricQueueTime, dto.MetricType_HISTOGRAM, "Histogram of time spent in WAITING phase for request.", nil},
		{MetricRequestSuccess, dto.MetricType_COUNTER, "Count of successfully processed requests.", []string{LabelFinishedReason}},
		{MetricPromptTokens, dto.MetricType_COUNTER, "Number of prefill tokens processed.", nil},
		{MetricGenerationTokens, dto.MetricType_COUNTER, "Number of generation tokens processed.", nil},
		{MetricPreemptions, dto.MetricType_COUNTER, "Cumulative number of preemption from the engine.", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fams[tc.name]
			if f == nil {
				t.Fatalf("%s missing", tc.name)
			}
			if f.GetType() != tc.typ || f.GetHelp() != tc.help {
				t.Errorf("type %v help %q; want %v %q", f.GetType(), f.GetHelp(), tc.typ, tc.help)
			}
			wantLabels := append([]string{LabelEngine}, tc.extra...)
			wantLabels = append(wantLabels, LabelModelName)
			slices.Sort(wantLabels)
			engines := map[string]bool{}
			for _, m := range f.Metric {
				var names []string
				for _, l := range m.Label {
					names = append(names, l.GetName())
					switch l.GetName() {
					case LabelEngine:
						engines[l.GetValue()] = true
					case LabelModelName:
						if l.GetValue() != "m/x" {
							t.Errorf("model_name %q", l.GetValue())
						}
					}
				}
				slices.Sort(names)
				if !slices.Equal(names, wantLabels) {
					t.Errorf("labels %v, want %v", names, wantLabels)
				}
			}
			if !engines["0"] || !engines["1"] || len(engines) != 2 {
				t.Errorf("engine label values %v, want 0 and 1", engines)
			}
		})
	}
	if fams[MetricGPUCacheUsage] != nil {
		t.Errorf("%s served without LegacyKVName", MetricGPUCacheUsage)
	}

	// 6 requests over 2 engines of 2 slots: at 1.5s each engine runs 1 and finished 2.
	for _, m := range fams[MetricRunning].Metric {
		if v := m.GetGauge().GetValue(); v != 1 {
			t.Errorf("running = %v, want 1", v)
		}
	}
	for _, m := range fams[MetricKVCacheUsage].Metric {
		if v := m.GetGauge().GetValue(); v != 0.05 {
			t.Errorf("kv usage = %v, want 1*50/1000", v)
		}
	}
	byReason := map[string]float64{}
	for _, m := range fams[MetricRequestSuccess].Metric {
		for _, l := range m.Label {
			if l.GetName() == LabelFinishedReason {
				byReason[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	if byReason["stop"] != 4 || byReason["abort"] != 2 {
		t.Errorf("request_success by finished_reason %v, want stop 4 and abort 2", byReason)
	}
	var ttftCount uint64
	for _, m := range fams[MetricTTFT].Metric {
		h := m.GetHistogram()
		ttftCount += h.GetSampleCount()
		var bounds []float64
		for _, b := range h.Bucket {
			bounds = append(bounds, b.GetUpperBound())
		}
		if want := append(slices.Clone(ttftBuckets), math.Inf(1)); !slices.Equal(bounds, want) {
			t.Errorf("TTFT bucket bounds %v, want vLLM's %v", bounds, want)
		}
	}
	if ttftCount != 6 {
		t.Errorf("TTFT observations = %d, want 6 (every admitted request)", ttftCount)
	}
}

func TestLegacyKVName(t *testing.T) {
	fams := scrape(t, serveReplica(t, newTestReplica(t, Config{LegacyKVName: true})).URL)
	if fams[MetricKVCacheUsage] != nil {
		t.Errorf("%s served with LegacyKVName", MetricKVCacheUsage)
	}
	f := fams[MetricGPUCacheUsage]
	if f == nil || f.GetType() != dto.MetricType_GAUGE || f.GetHelp() != "GPU KV-cache usage. 1 means 100 percent usage." {
		t.Fatalf("%s = %v", MetricGPUCacheUsage, f)
	}
}

func TestHealthAndModels(t *testing.T) {
	srv := serveReplica(t, newTestReplica(t, Config{}))
	resp, err := http.Get(srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /health: %s", resp.Status)
	}
	resp, err = http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("GET /v1/models: %v: %s", err, body)
	}
	if list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != DefaultModel ||
		list.Data[0].Object != "model" || list.Data[0].Created != t0.Unix() {
		t.Errorf("GET /v1/models = %s", body)
	}
}

// TestTokenModelReportsInterTokenLatency: under a profile the page carries vLLM's inter-token
// latency histogram and each finished request's mean time per output token with what the
// engine observed; the fixed model, which has no tokens to time, leaves both out rather than
// report empty ones.
func TestTokenModelReportsInterTokenLatency(t *testing.T) {
	cfg, err := Profile(ProfileL4Llama8B)
	if err != nil {
		t.Fatal(err)
	}
	r := newTestReplica(t, cfg)
	closedLoop(r, 4, t0, 30*time.Second, 10*time.Millisecond)
	fams := scrape(t, serveReplica(t, r).URL)
	itl := fams[MetricITL]
	if itl == nil || len(itl.GetMetric()) != 1 {
		t.Fatalf("%s missing under a profile: %v", MetricITL, itl)
	}
	h := itl.GetMetric()[0].GetHistogram()
	if want := r.Snapshot()[0].ITL.Count; h.GetSampleCount() != want || want == 0 {
		t.Errorf("%s counts %d, the engine observed %d", MetricITL, h.GetSampleCount(), want)
	}
	tpot := fams[MetricRequestTPOT]
	if tpot == nil || len(tpot.GetMetric()) != 1 {
		t.Fatalf("%s missing under a profile: %v", MetricRequestTPOT, tpot)
	}
	s := r.Snapshot()[0]
	if got := tpot.GetMetric()[0].GetHistogram().GetSampleCount(); got != s.RequestTPOT.Count || got == 0 || got > s.RequestSuccess {
		t.Errorf("%s counts %d, the engine observed %d of %d finished", MetricRequestTPOT, got, s.RequestTPOT.Count, s.RequestSuccess)
	}
	// A request's mean is its decode time over its tokens after the first: the tokens' mean.
	if got, want := mean(s.RequestTPOT), mean(s.ITL); math.Abs(got-want) > 0.2*want {
		t.Errorf("requests' mean time per output token %.4fs, the tokens' %.4fs: want about the same", got, want)
	}
	if fams := scrape(t, serveReplica(t, newTestReplica(t, Config{})).URL); fams[MetricITL] != nil || fams[MetricRequestTPOT] != nil {
		t.Errorf("%s or %s served by the fixed model", MetricITL, MetricRequestTPOT)
	}
}
