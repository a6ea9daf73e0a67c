package simulate

import (
	"math"
	"time"
)

// HPAPolicy is one scaling policy of an HPA behavior: at most Value pods (or Value percent)
// per Period.
type HPAPolicy struct {
	Percent bool
	Value   int
	Period  time.Duration
}

// HPARules are one direction of an HPA behavior (autoscaling/v2 HPAScalingRules).
type HPARules struct {
	// Window is the stabilization window.
	Window time.Duration
	// Tolerance is the usage ratio's dead band in this direction (0.1 by default).
	Tolerance float64
	// Policies limit the rate; SelectMin picks the policy allowing the least change (the
	// default, Max, the most).
	Policies  []HPAPolicy
	SelectMin bool
}

// HPABehavior is an HPA's behavior; the zero value is not meaningful, see DefaultHPABehavior.
type HPABehavior struct {
	Up, Down HPARules
}

// DefaultHPABehavior is what the HPA does without a behavior: scale up at once by 100 % or 4
// pods per 15 s, whichever is more; scale down after 300 s of lower recommendations, by up to
// 100 % per 15 s; 10 % tolerance both ways (kube-controller-manager's default).
var DefaultHPABehavior = HPABehavior{
	Up: HPARules{Tolerance: 0.1, Policies: []HPAPolicy{
		{Percent: true, Value: 100, Period: 15 * time.Second}, {Value: 4, Period: 15 * time.Second}}},
	Down: HPARules{Window: 300 * time.Second, Tolerance: 0.1, Policies: []HPAPolicy{
		{Percent: true, Value: 100, Period: 15 * time.Second}}},
}

// hpa is the HPA controller's replica arithmetic for one target (pkg/controller/podautoscaler:
// stabilization over recommendations, rate limits from the scale events of each policy's
// period, then the min/max clamp).
type hpa struct {
	behavior HPABehavior
	min, max int
	recs     []timedCount
	events   []scaleEvent
}

type timedCount struct {
	at time.Duration
	n  int
}

type scaleEvent struct {
	at     time.Duration
	change int
}

// normalize turns a metric's recommendation into the replica count the HPA sets at now.
func (h *hpa) normalize(now time.Duration, current, rec int) int {
	h.recs = append(h.recs, timedCount{now, rec})
	keep := max(h.behavior.Up.Window, h.behavior.Down.Window)
	for len(h.recs) > 0 && now-h.recs[0].at > keep {
		h.recs = h.recs[1:]
	}
	up, down := rec, rec
	for _, r := range h.recs { // strictly within the window, as the HPA's cutoff.After
		if now-r.at < h.behavior.Up.Window {
			up = min(up, r.n)
		}
		if now-r.at < h.behavior.Down.Window {
			down = max(down, r.n)
		}
	}
	out := current
	if out < up {
		out = up
	}
	if out > down {
		out = down
	}
	if out > current {
		out = min(out, h.limit(now, current, h.behavior.Up, true))
	} else if out < current {
		out = max(out, h.limit(now, current, h.behavior.Down, false))
	}
	out = min(max(out, h.min), h.max)
	if out != current {
		h.events = append(h.events, scaleEvent{now, out - current})
	}
	return out
}

// limit is the furthest the policies let the count go from current in one direction
// (calculateScaleUpLimitWithScalingRules and calculateScaleDownLimitWithBehaviors): each
// policy's count at the start of its period is current minus the replicas added plus those
// removed since; a Percent policy rounds up when scaling up and truncates when scaling down.
func (h *hpa) limit(now time.Duration, current int, r HPARules, up bool) int {
	if len(r.Policies) == 0 {
		if up {
			return math.MaxInt32
		}
		return 0
	}
	var best int
	found := false
	for _, p := range r.Policies {
		start := current
		for _, e := range h.events {
			if now-e.at < p.Period {
				start -= e.change
			}
		}
		var v int
		switch {
		case up && p.Percent:
			v = int(math.Ceil(float64(start) * (1 + float64(p.Value)/100)))
		case up:
			v = start + p.Value
		case p.Percent:
			v = int(float64(start) * (1 - float64(p.Value)/100))
		default:
			v = start - p.Value
		}
		// selectPolicy Max allows the largest change (up: the highest bound, down: the lowest);
		// Min the smallest.
		better := v > best
		if !up {
			better = v < best
		}
		if r.SelectMin {
			better = !better
		}
		if !found || better {
			best, found = v, true
		}
	}
	return best
}

// averageValue is the HPA's recommendation for an AverageValue metric (external, or a
// pods metric summed over the pods that report it): ceil(total/target), or current within
// the tolerance of the ratio.
func averageValue(total, target float64, current int, b HPABehavior) int {
	if current == 0 {
		return int(math.Ceil(total/target - 1e-9))
	}
	ratio := total / (target * float64(current))
	if withinTolerance(ratio, b) {
		return current
	}
	return int(math.Ceil(total/target - 1e-9))
}

// withinTolerance is the HPA's dead band around a usage ratio of 1.
func withinTolerance(ratio float64, b HPABehavior) bool {
	if ratio > 1 {
		return ratio-1 <= b.Up.Tolerance
	}
	return 1-ratio <= b.Down.Tolerance
}
