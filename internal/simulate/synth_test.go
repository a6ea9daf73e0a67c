package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vllmsim"
)

func TestSyntheticLengths(t *testing.T) {
	rows, err := AzureConvLengths()
	if err != nil {
		t.Fatal(err)
	}
	custom := []vllmsim.TraceRequest{{Prompt: 10, Output: 3}, {Prompt: 9000, Output: 50}}
	for _, tc := range []struct {
		name    string
		lengths Lengths
		from    []vllmsim.TraceRequest
		// rows the pairs must come from, clamped to max tokens (nil: any); longLo and longHi
		// bound the fraction of prompts above 7,490 tokens.
		rows           []vllmsim.TraceRequest
		longLo, longHi float64
	}{
		{"the Azure trace's rows by default", LengthsTrace, nil, rows, 0, 0.001},
		{"another trace's rows, clamped to max tokens", LengthsTrace, custom, custom, 0.4, 0.6},
		{"log-normal: a heavier tail", LengthsLogNormal, nil, nil, 0.015, 0.03},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := DefaultSynthetic
			s.Duration, s.BurstEvery, s.Diurnal, s.Lengths, s.LengthTrace = time.Hour, 0, 0, tc.lengths, tc.from
			trace, err := s.Generate()
			if err != nil {
				t.Fatal(err)
			}
			pairs := map[[2]int]bool{}
			for _, r := range tc.rows {
				prompt := min(r.Prompt, s.MaxTokens-1)
				pairs[[2]int{prompt, min(r.Output, s.MaxTokens-prompt)}] = true
			}
			long := 0
			for _, r := range trace {
				if tc.rows != nil && !pairs[[2]int{r.Prompt, r.Output}] {
					t.Fatalf("request %+v is no row of the trace", r)
				}
				if r.Prompt+r.Output > s.MaxTokens {
					t.Fatalf("request %+v above %d tokens", r, s.MaxTokens)
				}
				if r.Prompt > 7490 {
					long++
				}
			}
			if frac := float64(long) / float64(len(trace)); frac < tc.longLo || frac > tc.longHi {
				t.Errorf("%.4f of the prompts above 7,490 tokens, want %.3f–%.3f", frac, tc.longLo, tc.longHi)
			}
		})
	}
	bad := DefaultSynthetic
	bad.Lengths = "uniform"
	if _, err := bad.Generate(); err == nil || !strings.Contains(err.Error(), "lengths") {
		t.Errorf("lengths %q: %v, want an error naming them", bad.Lengths, err)
	}
}
