package vllmsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Names of the metrics a Replica exposes; they, their help strings, types and labels are
// vLLM's own (vllm/v1/metrics/loggers.py). Counters carry the _total suffix that the
// Python client adds in the text format.
const (
	MetricRunning          = "vllm:num_requests_running"
	MetricWaiting          = "vllm:num_requests_waiting"
	MetricKVCacheUsage     = "vllm:kv_cache_usage_perc"
	MetricGPUCacheUsage    = "vllm:gpu_cache_usage_perc" // before vLLM 0.9; see Config.LegacyKVName
	MetricTTFT             = "vllm:time_to_first_token_seconds"
	MetricE2ELatency       = "vllm:e2e_request_latency_seconds"
	MetricQueueTime        = "vllm:request_queue_time_seconds"
	MetricRequestSuccess   = "vllm:request_success_total"
	MetricPromptTokens     = "vllm:prompt_tokens_total"
	MetricGenerationTokens = "vllm:generation_tokens_total"
	MetricPreemptions      = "vllm:num_preemptions_total"
	MetricITL              = "vllm:inter_token_latency_seconds" // only under Config.Tokens
	// MetricRequestTPOT is each finished request's mean time per output token (only under
	// Config.Tokens).
	MetricRequestTPOT = "vllm:request_time_per_output_token_seconds"
	// MetricPromptLength is the histogram of finished requests' prompt lengths in tokens.
	MetricPromptLength = "vllm:request_prompt_tokens"
	// MetricCacheConfig is vLLM's info gauge of the KV-cache configuration; the emulator
	// sets the labels berth reads (block_size, num_gpu_blocks) and engine.
	MetricCacheConfig = "vllm:cache_config_info"
)

// defaultBlockSize is vLLM's default --block-size, reported when the emulator runs without
// the token model (which has its own).
const defaultBlockSize = 16

// Label names vLLM puts on every per-engine series.
const (
	LabelModelName      = "model_name"
	LabelEngine         = "engine"
	LabelFinishedReason = "finished_reason"
)

// finishedReasons are the finished_reason values vLLM pre-creates series for.
var finishedReasons = []string{"stop", "length", "abort"}

// collector renders a Replica's snapshot as vLLM's metrics on every scrape.
type collector struct {
	r                                      *Replica
	running, waiting, kvUsage              *prometheus.Desc
	ttft, e2e, queue                       *prometheus.Desc
	success, prompt, generation, preempted *prometheus.Desc
	itl, tpot                              *prometheus.Desc // nil without Config.Tokens
	promptLength, cacheConfig              *prometheus.Desc
}

func newCollector(r *Replica) *collector {
	labels := []string{LabelModelName, LabelEngine}
	desc := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append(append([]string(nil), labels...), extra...), nil)
	}
	kv := desc(MetricKVCacheUsage, "KV-cache usage. 1 means 100 percent usage.")
	if r.cfg.LegacyKVName {
		kv = desc(MetricGPUCacheUsage, "GPU KV-cache usage. 1 means 100 percent usage.")
	}
	var itl, tpot *prometheus.Desc
	if r.cfg.Tokens != nil {
		itl = desc(MetricITL, "Histogram of inter-token latency in seconds.")
		tpot = desc(MetricRequestTPOT, "Histogram of time_per_output_token_seconds per request.")
	}
	return &collector{
		r:          r,
		itl:        itl,
		tpot:       tpot,
		running:    desc(MetricRunning, "Number of requests in model execution batches."),
		waiting:    desc(MetricWaiting, "Number of requests waiting to be processed."),
		kvUsage:    kv,
		ttft:       desc(MetricTTFT, "Histogram of time to first token in seconds."),
		e2e:        desc(MetricE2ELatency, "Histogram of e2e request latency in seconds."),
		queue:      desc(MetricQueueTime, "Histogram of time spent in WAITING phase for request."),
		success:    desc(MetricRequestSuccess, "Count of successfully processed requests.", LabelFinishedReason),
		prompt:     desc(MetricPromptTokens, "Number of prefill tokens processed."),
		generation: desc(MetricGenerationTokens, "Number of generation tokens processed."),
		preempted:  desc(MetricPreemptions, "Cumulative number of preemption from the engine."),

		promptLength: desc(MetricPromptLength, "Number of prefill tokens processed."),
		cacheConfig:  prometheus.NewDesc(MetricCacheConfig, "Information of the LLMEngine CacheConfig", []string{"block_size", LabelEngine, "num_gpu_blocks"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.waiting, c.kvUsage, c.ttft, c.e2e, c.queue,
		c.success, c.prompt, c.generation, c.preempted, c.promptLength, c.cacheConfig} {
		ch <- d
	}
	if c.itl != nil {
		ch <- c.itl
		ch <- c.tpot
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	model := c.r.cfg.Model
	for _, s := range c.r.Snapshot() {
		eng := strconv.Itoa(s.Engine)
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, model, eng)
		}
		counter := func(d *prometheus.Desc, v uint64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{model, eng}, extra...)...)
		}
		hist := func(d *prometheus.Desc, h Histogram) {
			buckets := make(map[float64]uint64, len(h.Bounds))
			for i, b := range h.Bounds {
				buckets[b] = h.Buckets[i]
			}
			ch <- prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets, model, eng)
		}
		gauge(c.running, float64(s.Running))
		gauge(c.waiting, float64(s.Waiting))
		gauge(c.kvUsage, s.KVCacheUsage)
		hist(c.ttft, s.TTFT)
		hist(c.e2e, s.E2ELatency)
		hist(c.queue, s.QueueTime)
		if c.itl != nil {
			hist(c.itl, s.ITL)
			hist(c.tpot, s.RequestTPOT)
		}
		for _, reason := range finishedReasons {
			var n uint64
			switch reason {
			case "stop":
				n = s.RequestSuccess
			case "abort":
				n = s.Aborted
			}
			counter(c.success, n, reason)
		}
		counter(c.prompt, s.PromptTokens)
		counter(c.generation, s.GenerationTokens)
		counter(c.preempted, s.Preemptions)
		hist(c.promptLength, s.PromptLength)
		blockSize := defaultBlockSize
		if c.r.cfg.Tokens != nil {
			blockSize = c.r.cfg.Tokens.BlockSize
		}
		ch <- prometheus.MustNewConstMetric(c.cacheConfig, prometheus.GaugeValue, 1,
			strconv.Itoa(blockSize), eng, strconv.Itoa(c.r.cfg.KVBlocksTotal))
	}
}

// Handler returns the replica's HTTP API, shaped like vLLM's OpenAI-compatible server:
// GET /metrics (Prometheus text format), GET /health (200, empty body) and GET /v1/models.
func (r *Replica) Handler() (http.Handler, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(newCollector(r)); err != nil {
		return nil, fmt.Errorf("registering the metrics of model %s: %w", r.cfg.Model, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /v1/models", r.serveModels)
	return mux, nil
}

type modelCard struct {
	ID      string  `json:"id"`
	Object  string  `json:"object"`
	Created int64   `json:"created"`
	OwnedBy string  `json:"owned_by"`
	Root    string  `json:"root"`
	Parent  *string `json:"parent"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

func (r *Replica) serveModels(w http.ResponseWriter, _ *http.Request) {
	list := modelList{Object: "list", Data: []modelCard{{
		ID:      r.cfg.Model,
		Object:  "model",
		Created: r.created.Unix(),
		OwnedBy: "vllm",
		Root:    r.cfg.Model,
	}}}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}
