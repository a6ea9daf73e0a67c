package simulate

import (
	"math"
	"slices"
)

// samples keeps every observation of one latency, for exact quantiles.
type samples struct {
	v      []float32
	sorted bool
}

func (s *samples) add(x float64) {
	s.v = append(s.v, float32(x))
	s.sorted = false
}

// quantile is the nearest-rank q-quantile in seconds, NaN without observations.
func (s *samples) quantile(q float64) float64 {
	if len(s.v) == 0 {
		return math.NaN()
	}
	if !s.sorted {
		slices.Sort(s.v)
		s.sorted = true
	}
	i := int(math.Ceil(q*float64(len(s.v)))) - 1
	return float64(s.v[min(max(i, 0), len(s.v)-1)])
}
