package pods

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

const llama = "meta-llama/Llama-3.1-8B-Instruct"

func TestParseVLLMDataParallel(t *testing.T) {
	f, err := os.Open("testdata/vllm-dp2.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	at := time.Unix(1000, 0)
	r, err := Parse(f, at)
	if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{llama, ""} {
		s, err := r.Sample(model)
		if err != nil {
			t.Fatal(err)
		}
		// Counts are summed over the two engines, KV usage is their mean.
		if s.Waiting != 10 || s.Running != 22 || !s.HasKV || math.Abs(s.KVUsage-0.7) > 1e-9 || !s.At.Equal(at) {
			t.Fatalf("sample(%q) = %+v", model, s)
		}
		if s.TTFT.Total() != 300 {
			t.Fatalf("TTFT merged over engines: total %v, want 300", s.TTFT.Total())
		}
	}
	if _, err := r.Sample("mistral"); !errors.Is(err, ErrNoSeries) || !strings.Contains(err.Error(), llama) {
		t.Fatalf("unknown model: %v", err)
	}
}

func TestParseVariants(t *testing.T) {
	tests := []struct {
		name, page           string
		waiting, running, kv float64
		hasKV                bool
		err                  string
	}{
		{name: "legacy gpu_cache_usage_perc", page: "vllm:num_requests_waiting{model_name=\"m\"} 4\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.5\n",
			waiting: 4, kv: 0.5, hasKV: true},
		{name: "current name wins over legacy", page: "vllm:num_requests_waiting 1\nvllm:kv_cache_usage_perc 0.25\nvllm:gpu_cache_usage_perc 0.9\n",
			waiting: 1, kv: 0.25, hasKV: true},
		{name: "no KV series", page: "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 2\nvllm:num_requests_running 3\n",
			waiting: 2, running: 3},
		{name: "SGLang", page: "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\"} 9\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 5\n# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name=\"m\"} 0.4\n",
			waiting: 9, running: 5, kv: 0.4, hasKV: true},
		{name: "no vLLM series at all", page: "# TYPE go_goroutines gauge\ngo_goroutines 12\n", err: "no queue series"},
		{name: "HTML error page", page: "<html><body><h1>502 Bad Gateway</h1></body></html>", err: "parsing the metrics page"},
		{name: "garbage", page: "\x00\x01\x02 not { metrics", err: "parsing the metrics page"},
		{name: "negative gauge", page: "vllm:num_requests_waiting -3\n", err: "value -3"},
		{name: "NaN gauge", page: "vllm:num_requests_waiting NaN\n", err: "value NaN"},
		{name: "queue as a counter", page: "# TYPE vllm:num_requests_waiting counter\nvllm:num_requests_waiting 3\n", err: "want a gauge"},
		{name: "generated tokens as a gauge", page: "vllm:num_requests_waiting 3\n# TYPE vllm:generation_tokens_total gauge\nvllm:generation_tokens_total 3\n", err: "want a counter"},
		{name: "preemptions as a gauge", page: "vllm:num_requests_waiting 3\n# TYPE vllm:num_preemptions_total gauge\nvllm:num_preemptions_total 3\n", err: "want a counter"},
		{name: "TTFT as a gauge", page: "vllm:num_requests_waiting 3\n# TYPE vllm:time_to_first_token_seconds gauge\nvllm:time_to_first_token_seconds 3\n", err: "want a histogram"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse(strings.NewReader(tc.page), time.Unix(0, 0))
			var s struct{ w, r, kv float64 }
			if err == nil {
				var smp, serr = r.Sample("")
				err = serr
				s.w, s.r, s.kv = smp.Waiting, smp.Running, smp.KVUsage
				if err == nil && smp.HasKV != tc.hasKV {
					t.Errorf("HasKV = %v", smp.HasKV)
				}
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.w != tc.waiting || s.r != tc.running || math.Abs(s.kv-tc.kv) > 1e-9 {
				t.Fatalf("got %+v", s)
			}
		})
	}
}

// FuzzParse: the parsing path never panics, and what it accepts is never negative or NaN.
func FuzzParse(f *testing.F) {
	page, _ := os.ReadFile("testdata/vllm-dp2.txt")
	f.Add(string(page))
	f.Add("vllm:num_requests_waiting{model_name=\"a\"} 3\nvllm:kv_cache_usage_perc 0.5\n")
	f.Add("<html>oops</html>")
	f.Add("# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 1\n")
	f.Fuzz(func(t *testing.T, in string) {
		r, err := Parse(strings.NewReader(in), time.Unix(0, 0))
		if err != nil {
			return
		}
		for m := range r.ByModel {
			s, err := r.Sample(m)
			if err != nil {
				t.Fatalf("model %q listed but not sampled: %v", m, err)
			}
			for _, v := range []float64{s.Waiting, s.Running, s.KVUsage} {
				if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("accepted a bad value %v from %q", v, in)
				}
			}
			_ = s.TTFT.Quantile(0.95)
		}
		_, _ = r.Sample("")
	})
}

// TestParseKVTokensAndPromptLengths: KV tokens are each engine's usage times its cache size from
// vllm:cache_config_info (matched on the engine label), known only when every engine's size is;
// prompt lengths are the request_prompt_tokens histogram's sum and count over engines.
func TestParseKVTokensAndPromptLengths(t *testing.T) {
	const engines = `vllm:num_requests_waiting{engine="0",model_name="m"} 3
vllm:num_requests_waiting{engine="1",model_name="m"} 1
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{engine="0",le="1000.0",model_name="m"} 2
vllm:request_prompt_tokens_bucket{engine="0",le="+Inf",model_name="m"} 4
vllm:request_prompt_tokens_sum{engine="0",model_name="m"} 6000
vllm:request_prompt_tokens_count{engine="0",model_name="m"} 4
vllm:request_prompt_tokens_bucket{engine="1",le="1000.0",model_name="m"} 0
vllm:request_prompt_tokens_bucket{engine="1",le="+Inf",model_name="m"} 2
vllm:request_prompt_tokens_sum{engine="1",model_name="m"} 3000
vllm:request_prompt_tokens_count{engine="1",model_name="m"} 2
`
	for _, tc := range []struct {
		name, info string
		kvTokens   float64
		known      bool
	}{
		{"both engines sized", `vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="2000"} 1
`, 0.5*16000 + 0.25*32000, true},
		{"one engine not profiled yet", `vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="None"} 1
`, 0, false},
		{"no cache_config_info", "", 0, false},
	} {
		r, err := ParsePage([]byte(engines+tc.info), time.Unix(1, 0))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s, err := r.Sample("")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if s.HasKVTokens != tc.known || s.KVTokens != tc.kvTokens {
			t.Errorf("%s: KV tokens = %v (known %v), want %v (%v)", tc.name, s.KVTokens, s.HasKVTokens, tc.kvTokens, tc.known)
		}
		// 4 waiting at a mean prompt of 9,000/6 = 1,500 tokens.
		if q, ok := s.QueuedPromptTokens(); !ok || q != 6000 {
			t.Errorf("%s: queued prompt tokens = %v, %v; want 6000", tc.name, q, ok)
		}
	}
	// One engine, no engine label on either side (vLLM before V1); and SGLang's used tokens.
	r, err := ParsePage([]byte("vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.5\nvllm:cache_config_info{block_size=\"32\",num_gpu_blocks=\"100\"} 1\n"), time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := r.Sample(""); !s.HasKVTokens || s.KVTokens != 1600 {
		t.Errorf("single engine: KV tokens = %v (%v), want 1600", s.KVTokens, s.HasKVTokens)
	}
	if s, _ := r.Sample(""); func() bool { q, ok := s.QueuedPromptTokens(); return !ok || q != 0 }() {
		t.Error("nothing waiting must be a known zero of queued prompt tokens")
	}
	r, err = ParsePage([]byte("sglang:num_queue_reqs{model_name=\"m\"} 2\nsglang:token_usage{model_name=\"m\"} 0.3\nsglang:num_used_tokens{model_name=\"m\"} 45000\n"), time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := r.Sample("m"); !s.HasKVTokens || s.KVTokens != 45000 {
		t.Errorf("SGLang: KV tokens = %v (%v), want 45000", s.KVTokens, s.HasKVTokens)
	}
	if s, _ := r.Sample("m"); func() bool { _, ok := s.QueuedPromptTokens(); return ok }() {
		t.Error("requests waiting with no prompt length known must be unknown")
	}
}
