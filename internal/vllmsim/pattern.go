package vllmsim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Pattern is how requests arrive around the mean rate.
type Pattern string

const (
	// PatternSteady is a deterministic fluid: exactly rate × elapsed requests (the default,
	// for tests that need exact counts).
	PatternSteady Pattern = "steady"
	// PatternPoisson draws independent arrivals: a Poisson process at the rate.
	PatternPoisson Pattern = "poisson"
	// PatternBursty alternates bursts and lulls of exponentially distributed length (mean
	// BurstOn and BurstOff): Poisson arrivals at rate × (on+off)/on during a burst, none in a
	// lull, so the mean rate is unchanged while the peaks are (on+off)/on times higher — the
	// shape of chat traffic that arrives in waves.
	PatternBursty Pattern = "bursty"
)

// Mean lengths of PatternBursty's phases.
const (
	BurstOn  = 10 * time.Second
	BurstOff = 30 * time.Second
)

// ParsePattern validates a pattern name.
func ParsePattern(s string) (Pattern, error) {
	switch p := Pattern(s); p {
	case PatternSteady, PatternPoisson, PatternBursty:
		return p, nil
	case "":
		return PatternSteady, nil
	}
	return "", fmt.Errorf("arrival pattern %q: want steady, poisson or bursty", s)
}

// arrivals is the random part of a LoadGenerator: the phase of a bursty pattern and a seeded
// source, so a run is reproducible.
type arrivals struct {
	pattern  Pattern
	rng      *rand.Rand
	inBurst  bool
	phaseEnd time.Time
}

func newArrivals(seed uint64) arrivals {
	return arrivals{pattern: PatternSteady, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// draw returns how many requests arrive in (from, to] at mean rate under the pattern. Steady
// is handled by the caller's fluid accumulator.
func (a *arrivals) draw(rate float64, from, to time.Time) int {
	if a.pattern == PatternPoisson {
		return a.poisson(rate * to.Sub(from).Seconds())
	}
	n := 0
	for t := from; t.Before(to); {
		if a.phaseEnd.IsZero() || !t.Before(a.phaseEnd) {
			a.inBurst = !a.inBurst
			mean := BurstOff
			if a.inBurst {
				mean = BurstOn
			}
			a.phaseEnd = t.Add(time.Duration(a.rng.ExpFloat64() * float64(mean)))
		}
		end := a.phaseEnd
		if to.Before(end) {
			end = to
		}
		if a.inBurst {
			n += a.poisson(rate * float64(BurstOn+BurstOff) / float64(BurstOn) * end.Sub(t).Seconds())
		}
		t = end
	}
	return n
}

// poisson draws from a Poisson distribution of mean m: by counting exponential gaps for small
// means, by a rounded normal for large ones.
func (a *arrivals) poisson(m float64) int {
	if m <= 0 {
		return 0
	}
	if m > 30 {
		return max(0, int(math.Round(m+math.Sqrt(m)*a.rng.NormFloat64())))
	}
	n, p, limit := 0, 1.0, math.Exp(-m)
	for {
		p *= a.rng.Float64()
		if p <= limit {
			return n
		}
		n++
	}
}
