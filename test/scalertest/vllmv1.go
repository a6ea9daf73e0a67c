package scalertest

import (
	"fmt"
	"net/http"
	"strings"
)

// vLLM v1's histogram families and their bucket bounds (vllm/v1/metrics/loggers.py of the 0.10
// line), as a real /metrics page carries them for every engine.
var vllmV1Histograms = []struct {
	name   string
	bounds []float64
}{
	{"vllm:iteration_tokens_total", []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}},
	{"vllm:time_to_first_token_seconds", []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}},
	{"vllm:time_per_output_token_seconds", []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}},
	{"vllm:inter_token_latency_seconds", []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}},
	// Each request's mean time per output token (vLLM 0.11 on).
	{"vllm:request_time_per_output_token_seconds", []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}},
	{"vllm:e2e_request_latency_seconds", []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}},
	{"vllm:request_queue_time_seconds", []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}},
	{"vllm:request_inference_time_seconds", []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}},
	{"vllm:request_prefill_time_seconds", []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}},
	{"vllm:request_decode_time_seconds", []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}},
	{"vllm:request_prompt_tokens", []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}},
	{"vllm:request_generation_tokens", []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}},
	{"vllm:request_max_num_generation_tokens", []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}},
	{"vllm:request_params_n", []float64{1, 2, 5, 10, 20}},
	{"vllm:request_params_max_tokens", []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}},
}

// VLLMv1Page is the text of a vLLM v1 /metrics page as a real server with engines
// data-parallel engines serves it: the gauges berth reads, the counters, every request
// histogram per engine, and the Python process metrics — tens of KB, most of which berth skips.
// waiting, running and kv are per engine.
func VLLMv1Page(engines int, waiting, running, kv float64) string {
	const model = `model_name="meta-llama/Llama-3.1-8B-Instruct"`
	var b strings.Builder
	b.WriteString("# HELP python_gc_objects_collected_total Objects collected during gc\n# TYPE python_gc_objects_collected_total counter\n")
	for g := range 3 {
		fmt.Fprintf(&b, "python_gc_objects_collected_total{generation=\"%d\"} %d\n", g, 1000*(g+1))
	}
	for _, m := range []string{"process_virtual_memory_bytes 8.3e+10", "process_resident_memory_bytes 4.1e+09", "process_start_time_seconds 1.76e+09",
		"process_cpu_seconds_total 5321.4", "process_open_fds 212", "process_max_fds 1.048576e+06"} {
		fmt.Fprintf(&b, "# TYPE %s gauge\n%s\n", strings.Fields(m)[0], m)
	}
	gauges := []struct {
		name string
		v    float64
	}{{"vllm:num_requests_running", running}, {"vllm:num_requests_waiting", waiting}, {"vllm:kv_cache_usage_perc", kv}}
	for _, g := range gauges {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", g.name, g.name, g.name)
		for e := range engines {
			fmt.Fprintf(&b, "%s{engine=\"%d\",%s} %v\n", g.name, e, model, g.v)
		}
	}
	for _, c := range []string{"vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"} {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n", c, c, c)
		for e := range engines {
			fmt.Fprintf(&b, "%s{engine=\"%d\",%s} %d\n", c, e, model, 123456+e)
		}
	}
	b.WriteString("# HELP vllm:request_success_total Count of successfully processed requests.\n# TYPE vllm:request_success_total counter\n")
	for e := range engines {
		for _, r := range []string{"stop", "length", "abort"} {
			fmt.Fprintf(&b, "vllm:request_success_total{engine=\"%d\",finished_reason=%q,%s} %d\n", e, r, model, 4242)
		}
	}
	for _, h := range vllmV1Histograms {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s histogram\n", h.name, h.name, h.name)
		step := 10
		if h.name == "vllm:request_time_per_output_token_seconds" {
			step = 20 // counts of its own: a parser that read another family for it is caught
		}
		for e := range engines {
			n := 0
			for i, le := range h.bounds {
				n += step * (i + 1)
				fmt.Fprintf(&b, "%s_bucket{engine=\"%d\",le=\"%v\",%s} %d\n", h.name, e, le, model, n)
			}
			fmt.Fprintf(&b, "%s_bucket{engine=\"%d\",le=\"+Inf\",%s} %d\n%s_count{engine=\"%d\",%s} %d\n%s_sum{engine=\"%d\",%s} %d\n",
				h.name, e, model, n, h.name, e, model, n, h.name, e, model, n*3)
		}
	}
	return b.String()
}

// VLLMv1 answers VLLMv1Page.
func VLLMv1(engines int, waiting, running, kv float64) http.HandlerFunc {
	page := VLLMv1Page(engines, waiting, running, kv)
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(page))
	}
}
