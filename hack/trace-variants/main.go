// Command trace-variants writes variants of a request trace in the Azure LLM inference trace
// format, to judge a scaler setting on traffic it was not chosen on (docs/economics.md): the
// same requests faster or slower, the trace followed by itself reversed in time, and a step —
// the first half thinned to half, the second half thickened to 1.6 times, so the rate steps up
// 3.2 times at the middle and stays. Nothing is invented: every request is one of the trace's,
// with its own lengths.
//
//	go run ./hack/trace-variants -in ../shared/traces/AzureLLMInferenceTrace_conv.csv -out /tmp/variants
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/berth-dev/berth/internal/vllmsim"
)

// variants maps a variant's file name to how it is made from the trace.
var variants = map[string]func([]vllmsim.TraceRequest) []vllmsim.TraceRequest{
	// fast15: 1.5 times the rate, two thirds of the time.
	"fast15.csv": func(tr []vllmsim.TraceRequest) []vllmsim.TraceRequest {
		return retime(tr, func(at time.Duration) time.Duration { return at * 2 / 3 })
	},
	// slow2: half the rate, twice the time.
	"slow2.csv": func(tr []vllmsim.TraceRequest) []vllmsim.TraceRequest {
		return retime(tr, func(at time.Duration) time.Duration { return at * 2 })
	},
	// mirror: the trace, then the trace reversed in time (its climbs become falls).
	"mirror.csv": func(tr []vllmsim.TraceRequest) []vllmsim.TraceRequest {
		end := tr[len(tr)-1].At
		out := slices.Clone(tr)
		for _, r := range tr {
			r.At = 2*end - r.At + time.Second
			out = append(out, r)
		}
		return out
	},
	// ramp: every other request of the first half; every request of the second half and three
	// in five of them again, 370 ms later — a step of 3.2 times at the middle that stays.
	"ramp.csv": func(tr []vllmsim.TraceRequest) []vllmsim.TraceRequest {
		mid := tr[len(tr)-1].At / 2
		var out []vllmsim.TraceRequest
		for i, r := range tr {
			switch {
			case r.At < mid:
				if i%2 == 0 {
					out = append(out, r)
				}
			default:
				out = append(out, r)
				if i%5 < 3 {
					r.At += 370 * time.Millisecond
					out = append(out, r)
				}
			}
		}
		return out
	},
}

func retime(tr []vllmsim.TraceRequest, f func(time.Duration) time.Duration) []vllmsim.TraceRequest {
	out := slices.Clone(tr)
	for i := range out {
		out[i].At = f(out[i].At)
	}
	return out
}

func main() {
	in := flag.String("in", "", "the trace (Azure LLM inference trace format)")
	dir := flag.String("out", "", "the folder to write the variants to")
	flag.Parse()
	if err := run(*in, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "trace-variants:", err)
		os.Exit(1)
	}
}

func run(in, dir string) error {
	if in == "" || dir == "" {
		return errors.New("-in and -out are required")
	}
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	tr, err := vllmsim.ReadAzureTrace(f)
	err = errors.Join(err, f.Close())
	if err != nil {
		return fmt.Errorf("reading %s: %w", in, err)
	}
	if len(tr) == 0 {
		return fmt.Errorf("%s holds no requests", in)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, build := range variants {
		reqs := build(tr)
		slices.SortStableFunc(reqs, func(a, b vllmsim.TraceRequest) int { return cmp.Compare(a.At, b.At) })
		if err := write(filepath.Join(dir, name), reqs); err != nil {
			return err
		}
		fmt.Printf("%s: %d requests over %s\n", name, len(reqs), reqs[len(reqs)-1].At.Round(time.Second))
	}
	return nil
}

func write(path string, reqs []vllmsim.TraceRequest) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	if err := vllmsim.WriteAzureTrace(f, reqs); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
