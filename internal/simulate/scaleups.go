package simulate

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// burstAnswerWindow is how long after a burst began a new replica still counts as its answer.
const burstAnswerWindow = 10 * time.Minute

// StartupQuantile is the q-quantile of the time from a replica's creation (the scale-up) to its
// serving, over the replicas created after the warm-up; 0 with none.
func (r InferenceResult) StartupQuantile(q float64) time.Duration {
	if len(r.Startups) == 0 {
		return 0
	}
	d := make([]time.Duration, len(r.Startups))
	for i, s := range r.Startups {
		d[i] = s.Serving - s.Created
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

// BurstResponse is, over the bursts that began at or after from, the median time from a
// burst's start to the first replica created after it that came to serve (within
// burstAnswerWindow); answered counts the bursts some replica answered.
func (r InferenceResult) BurstResponse(bursts []time.Duration, from time.Duration) (p50 time.Duration, answered, total int) {
	var d []time.Duration
	for _, b := range bursts {
		if b < from {
			continue
		}
		total++
		first := time.Duration(-1)
		for _, s := range r.Startups {
			if s.Created >= b && s.Created <= b+burstAnswerWindow && (first < 0 || s.Serving < first) {
				first = s.Serving
			}
		}
		if first >= 0 {
			d = append(d, first-b)
		}
	}
	if len(d) == 0 {
		return 0, 0, total
	}
	slices.Sort(d)
	return d[len(d)/2], len(d), total
}

// scaleUpTable writes how fast each policy's scale-ups served, and each burst's answer.
func scaleUpTable(b *strings.Builder, rs []*InferenceResult, bursts []time.Duration, warmUp time.Duration) {
	b.WriteString("\n### Scale-ups\n\n| policy | replicas started | on warm seats | scale-up → serving p50 | p95 |")
	if len(bursts) > 0 {
		b.WriteString(" burst → first new replica serving p50 | bursts answered |")
	}
	b.WriteString("\n|---|---|---|---|---|")
	if len(bursts) > 0 {
		b.WriteString("---|---|")
	}
	b.WriteString("\n")
	for _, r := range rs {
		fmt.Fprintf(b, "| %s | %d | %d | %s | %s |", r.Autoscaler, len(r.Startups), r.SeatsTaken, r.StartupQuantile(0.5).Round(time.Second), r.StartupQuantile(0.95).Round(time.Second))
		if len(bursts) > 0 {
			p50, answered, total := r.BurstResponse(bursts, warmUp)
			fmt.Fprintf(b, " %s | %d of %d |", p50.Round(time.Second), answered, total)
		}
		b.WriteString("\n")
	}
}
