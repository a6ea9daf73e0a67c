package simulate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/berth-dev/berth/internal/vllmsim"
)

// Lengths says how synthetic requests get their prompt and output lengths.
type Lengths string

const (
	// LengthsTrace takes each request's (prompt, output) pair together, keeping their
	// correlation, from a row of a real trace drawn uniformly: Synthetic.LengthTrace, or the
	// Azure LLM inference trace 2023's conversation hour embedded in berth
	// (AzureConvLengths).
	LengthsTrace Lengths = "trace"
	// LengthsLogNormal draws the prompt and the output independently, each log-normal around
	// its median. Its tail is heavier than the real trace's: 2.2 % of the prompts are above
	// 7,490 tokens, against 0.02 % in the Azure conversation trace.
	LengthsLogNormal Lengths = "lognormal"
)

// Synthetic describes generated request traffic, for when no trace is at hand. Arrivals are a
// Poisson process whose rate follows a day (a sinusoid) with random bursts on top; lengths come
// from a real trace's rows (LengthsTrace) or are log-normal around its medians
// (LengthsLogNormal).
//
//	rate(t) = MeanRate × (1 + Diurnal × cos(2π (t − PeakAt) / Period)) × (BurstFactor in a burst, else 1)
type Synthetic struct {
	// Duration is how long the trace lasts.
	Duration time.Duration
	// MeanRate is the mean arrival rate outside bursts, in requests per second.
	MeanRate float64
	// Diurnal (0–1) is the daily swing: the peak rate is (1+Diurnal) and the trough (1−Diurnal)
	// times the mean. 0.6 makes the peak 4× the trough, about what the Azure 2024 week-long
	// trace shows between business hours and night.
	Diurnal float64
	// Period is the length of a "day" (24 h; shorter to compress a day into a short replay).
	Period time.Duration
	// PeakAt is when in the period the rate peaks, counted from the trace's start.
	PeakAt time.Duration
	// BurstEvery is the mean time between burst starts (exponential); 0 for no bursts.
	BurstEvery time.Duration
	// BurstLength is how long a burst lasts; BurstFactor multiplies the rate during one.
	BurstLength time.Duration
	BurstFactor float64
	// Lengths is how each request's lengths are drawn; LengthTrace the trace whose rows
	// LengthsTrace samples (empty: AzureConvLengths).
	Lengths     Lengths
	LengthTrace []vllmsim.TraceRequest
	// PromptMedian and OutputMedian are LengthsLogNormal's median prompt and generated
	// tokens; PromptSigma and OutputSigma the σ of their logarithms.
	PromptMedian, OutputMedian int
	PromptSigma, OutputSigma   float64
	// MaxTokens caps prompt plus output (the engine's max-model-len), whichever way they are
	// drawn: a longer prompt is cut to MaxTokens−1, then the output to what is left.
	MaxTokens int
	// Seed makes the trace reproducible.
	Seed uint64
}

// DefaultSynthetic is a day of chat traffic at 11.6 requests/s on average (about a million
// requests), each request's lengths a row of the Azure 2023 conversation trace (under
// LengthsLogNormal, its fitted medians 1,020 prompt and 129 generated tokens and σ of the logs
// 0.99 and 0.86), a 4:1 day/night swing peaking 14 h into the day, and bursts of 3× for 2
// minutes about every 90 minutes.
var DefaultSynthetic = Synthetic{
	Duration: 24 * time.Hour, MeanRate: 11.6, Diurnal: 0.6, Period: 24 * time.Hour, PeakAt: 14 * time.Hour,
	BurstEvery: 90 * time.Minute, BurstLength: 2 * time.Minute, BurstFactor: 3, Lengths: LengthsTrace,
	PromptMedian: vllmsim.AzureConvPromptMedian, OutputMedian: vllmsim.AzureConvGenerationMedian,
	PromptSigma: vllmsim.AzureConvPromptSigma, OutputSigma: vllmsim.AzureConvGenerationSigma,
	MaxTokens: 8192, Seed: 1,
}

// Validate reports every parameter that cannot describe traffic.
func (s Synthetic) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(s.Duration > 0, "duration must be positive, got %s", s.Duration)
	check(s.MeanRate > 0 && !math.IsInf(s.MeanRate, 0), "mean rate must be a positive number of requests per second, got %v", s.MeanRate)
	check(s.Diurnal >= 0 && s.Diurnal <= 1, "diurnal swing must be between 0 and 1, got %v", s.Diurnal)
	check(s.Diurnal == 0 || s.Period > 0, "a diurnal swing needs a positive period, got %s", s.Period)
	check(s.BurstEvery >= 0, "burst interval must not be negative, got %s", s.BurstEvery)
	check(s.BurstEvery == 0 || (s.BurstLength > 0 && s.BurstFactor >= 1), "bursts need a positive length and a factor of at least 1, got %s and %v", s.BurstLength, s.BurstFactor)
	check(s.PromptMedian >= 1 && s.OutputMedian >= 1, "median lengths must be at least one token, got %d and %d", s.PromptMedian, s.OutputMedian)
	check(s.PromptSigma >= 0 && s.PromptSigma <= 4 && s.OutputSigma >= 0 && s.OutputSigma <= 4, "length spreads must be between 0 and 4, got %v and %v", s.PromptSigma, s.OutputSigma)
	check(s.MaxTokens >= 2 && s.MaxTokens > s.PromptMedian, "max tokens must leave room to generate after the median prompt, got %d", s.MaxTokens)
	check(s.Lengths == LengthsTrace || s.Lengths == LengthsLogNormal, "lengths must be %s or %s, got %q", LengthsTrace, LengthsLogNormal, s.Lengths)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid synthetic traffic: %w", err)
	}
	return nil
}

// Rate is the arrival rate at t outside bursts.
func (s Synthetic) Rate(t time.Duration) float64 {
	if s.Diurnal == 0 {
		return s.MeanRate
	}
	return s.MeanRate * (1 + s.Diurnal*math.Cos(2*math.Pi*float64(t-s.PeakAt)/float64(s.Period)))
}

// Generate draws the trace.
func (s Synthetic) Generate() ([]vllmsim.TraceRequest, error) {
	out, _, err := s.GenerateWithBursts()
	return out, err
}

// GenerateWithBursts is Generate that also says when each burst began.
func (s Synthetic) GenerateWithBursts() ([]vllmsim.TraceRequest, []time.Duration, error) {
	if err := s.Validate(); err != nil {
		return nil, nil, err
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x9e3779b97f4a7c15))
	lengths, err := s.lengthDraw(rng)
	if err != nil {
		return nil, nil, err
	}
	bursts := s.bursts(rng)
	peak := s.MeanRate * (1 + s.Diurnal) * max(1, s.BurstFactor)
	out := make([]vllmsim.TraceRequest, 0, int(s.MeanRate*s.Duration.Seconds()*1.05))
	b := 0
	for t := 0.0; ; {
		t += rng.ExpFloat64() / peak // thinning: candidates at the peak rate
		at := time.Duration(t * float64(time.Second))
		if at >= s.Duration {
			break
		}
		rate := s.Rate(at)
		for b < len(bursts) && bursts[b]+s.BurstLength <= at {
			b++
		}
		if b < len(bursts) && bursts[b] <= at {
			rate *= s.BurstFactor
		}
		if rng.Float64()*peak > rate {
			continue
		}
		prompt, output := lengths()
		out = append(out, vllmsim.TraceRequest{At: at, Prompt: prompt, Output: output})
	}
	if len(out) == 0 {
		return nil, nil, errors.New("the synthetic traffic drew no request: raise the rate or the duration")
	}
	return out, bursts, nil
}

// lengthDraw returns what draws one request's lengths from rng, clamped to MaxTokens.
func (s Synthetic) lengthDraw(rng *rand.Rand) (func() (prompt, output int), error) {
	if s.Lengths == LengthsLogNormal {
		return func() (int, int) {
			prompt := logNormal(rng, s.PromptMedian, s.PromptSigma, 1, s.MaxTokens-1)
			return prompt, logNormal(rng, s.OutputMedian, s.OutputSigma, 1, s.MaxTokens-prompt)
		}, nil
	}
	rows := s.LengthTrace
	if len(rows) == 0 {
		var err error
		if rows, err = AzureConvLengths(); err != nil {
			return nil, err
		}
	}
	return func() (int, int) {
		r := rows[rng.IntN(len(rows))]
		prompt := min(max(r.Prompt, 1), s.MaxTokens-1)
		return prompt, min(max(r.Output, 1), s.MaxTokens-prompt)
	}, nil
}

// bursts draws the burst start times.
func (s Synthetic) bursts(rng *rand.Rand) []time.Duration {
	if s.BurstEvery <= 0 {
		return nil
	}
	var out []time.Duration
	for t := time.Duration(0); ; {
		t += time.Duration(rng.ExpFloat64() * float64(s.BurstEvery))
		if t >= s.Duration {
			return out
		}
		out = append(out, t)
	}
}

// logNormal is a whole number log-normal around median with σ sigma, clamped to [lo, hi].
func logNormal(rng *rand.Rand, median int, sigma float64, lo, hi int) int {
	v := float64(median)
	if sigma > 0 {
		v *= math.Exp(sigma * rng.NormFloat64())
	}
	return min(max(int(math.Round(v)), lo), max(lo, hi))
}
