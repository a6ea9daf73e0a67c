package pods

import (
	"bytes"
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
}
