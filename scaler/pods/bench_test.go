package pods

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/berth-dev/berth/test/scalertest"
)

// BenchmarkParseVLLMv1Page parses a real-sized vLLM v1 page (2 data-parallel engines, every
// request histogram): only the families berth reads, against the whole page.
func BenchmarkParseVLLMv1Page(b *testing.B) {
	page := []byte(scalertest.VLLMv1Page(2, 3, 8, 0.6))
	b.Run("berth", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParsePage(page, time.Unix(0, 0)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(page))/1024, "page-KiB")
	})
	b.Run("whole-page", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		b.ReportAllocs()
		for b.Loop() {
			p := expfmt.NewTextParser(model.UTF8Validation)
			if _, err := p.TextToMetricFamilies(bytes.NewReader(page)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestVLLMv1PageParses(t *testing.T) {
	r, err := ParsePage([]byte(scalertest.VLLMv1Page(2, 3, 8, 0.6)), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Sample("meta-llama/Llama-3.1-8B-Instruct")
	if err != nil || s.Waiting != 6 || s.Running != 16 || s.KVUsage != 0.6 || s.TTFT.Total() != 5060 {
		t.Fatalf("sample %+v, %v", s, err)
	}
	// The page carries inter_token_latency_seconds and the older time_per_output_token_seconds
	// (vLLM's transition): ITL counts the new one only (19 buckets, 1,900 per engine).
	if got := s.ITL.Total(); got != 3800 {
		t.Errorf("ITL observations %v, want 3800 (the new name only)", got)
	}
	if got := s.TPOT.Total(); got != 7600 {
		t.Errorf("requests' times per output token: %v, want 7600 (request_time_per_output_token_seconds, 3,800 an engine; not an ITL family)", got)
	}
	// A page from before the rename: the old name is read.
	old := strings.ReplaceAll(scalertest.VLLMv1Page(1, 0, 0, 0), "vllm:inter_token_latency_seconds", "vllm:x_ignored")
	r, err = ParsePage([]byte(old), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := r.Sample(""); s.ITL.Total() != 1900 {
		t.Errorf("ITL from time_per_output_token_seconds: %v observations, want 1900", s.ITL.Total())
	}
}
