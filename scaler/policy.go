package scaler

import (
	"errors"
	"fmt"
	"math"
)

// ErrNoFreshData is returned when a scale target has ready replicas but not one fresh sample:
// berth refuses to guess, so KEDA's fallback takes over instead of a silent zero.
var ErrNoFreshData = errors.New("no fresh sample from any ready replica")

// Policy tunes the replica math shared by all ScaledObjects.
type Policy struct {
	// ScaleDownHeadroom (0–1] is the fraction of each target the remaining replicas may reach
	// after a scale-down: 0.8 removes replicas only while those left stay at or below 80% of
	// the target, so a scale-down never lands exactly on the edge of the next scale-up.
	ScaleDownHeadroom float64
}

// DefaultPolicy is what `berth scaler` uses unless flags say otherwise.
var DefaultPolicy = Policy{ScaleDownHeadroom: 0.8}

// SignalDecision is one signal's raw reading and the replicas it asks for.
type SignalDecision struct {
	Signal Signal
	// Raw is the reading: total waiting requests, total KV-cache usage (sum of per-replica
	// ratios) or the p95 TTFT in seconds; extrapolated to every ready replica when some had
	// no fresh sample.
	Raw float64
	// Target is the per-replica target.
	Target float64
	// Desired is the replica count this signal asks for.
	Desired int
	// Held says why Desired was held at the current count instead of following Raw: "starting"
	// (replicas still starting count as the capacity the signal asks for) or "partial" (some
	// ready replicas had no fresh sample, so no scale-down).
	Held string
	// Value is the metric value to give KEDA: with an AverageValue target of Target the HPA
	// computes ceil(Value/Target) = Desired.
	Value float64
}

// Decision is the outcome of one evaluation.
type Decision struct {
	Signals []SignalDecision
	// Desired is the largest Desired over the signals — what the HPA does with several metrics.
	Desired int
	// Current is ready + starting replicas.
	Current int
	// Active says whether the ScaledObject should be active (KEDA scales 0↔1 on it): requests
	// wait above the activation threshold, requests are running, or replicas are starting.
	Active bool
	// Partial is true when some ready replicas had no fresh sample.
	Partial bool
}

// Signal returns the decision for s, if the trigger scales on it.
func (d Decision) Signal(s Signal) (SignalDecision, bool) {
	for _, sd := range d.Signals {
		if sd.Signal == s {
			return sd, true
		}
	}
	return SignalDecision{}, false
}

// Decide turns an observation into replica counts per signal. It is pure: the same inputs give
// the same decision. The math (docs/scaler.md):
//
//   - queue: ceil(waiting / targetQueueDepth);
//   - KV cache: ceil(Σ usage / targetKVCacheUsage), so the mean usage lands on the target;
//   - TTFT: ceil(ready × p95 / targetTTFTSeconds), proportional like the HPA's utilisation;
//   - a scale-up beyond the current count waits while replicas are starting (they are the
//     capacity the signal asked for; without the hold, a queue that keeps growing during a
//     cold start would ask for more and more replicas);
//   - a scale-down removes replicas only while the rest stay within ScaleDownHeadroom of the
//     target, and never on partial data.
//
// With ready replicas and no fresh sample it returns ErrNoFreshData.
func (p Policy) Decide(o Observation, t *Trigger) (Decision, error) {
	if o.Ready > 0 && o.Sampled == 0 {
		return Decision{}, fmt.Errorf("%d ready replicas: %w", o.Ready, ErrNoFreshData)
	}
	if o.Ready > 0 && t.TargetKVCacheUsage > 0 && o.KVSampled == 0 {
		return Decision{}, fmt.Errorf("%d ready replicas, none reports vllm:kv_cache_usage_perc (or the older vllm:gpu_cache_usage_perc): %w", o.Ready, ErrNoFreshData)
	}
	headroom := p.ScaleDownHeadroom
	if headroom <= 0 || headroom > 1 {
		headroom = 1
	}
	d := Decision{Current: o.Ready + o.Starting, Partial: o.Sampled < o.Ready}
	scale := 1.0
	if o.Sampled > 0 {
		scale = float64(o.Ready) / float64(o.Sampled)
	}
	waiting := o.Waiting * scale
	d.Active = waiting > t.ActivationQueueDepth || o.Running > 0 || o.Starting > 0
	for _, s := range t.Signals() {
		target := t.Target(s)
		sd := SignalDecision{Signal: s, Target: target}
		switch s {
		case SignalQueue:
			sd.Raw = waiting
		case SignalKVCache:
			kvScale := 0.0
			if o.KVSampled > 0 {
				kvScale = float64(o.Ready) / float64(o.KVSampled)
			}
			sd.Raw = o.KVUsage * kvScale
		case SignalTTFT:
			if !math.IsNaN(o.TTFTP95) {
				sd.Raw = o.TTFTP95
			}
		}
		demand := sd.Raw
		if s == SignalTTFT {
			demand = sd.Raw * float64(o.Ready) // replica-seconds: p95 scales with the fleet
		}
		partial := d.Partial || (s == SignalKVCache && o.KVSampled < o.Ready)
		sd.Desired, sd.Held = desired(demand, target, headroom, d.Current, o.Starting, partial)
		sd.Value = metricValue(sd.Desired, target)
		d.Signals = append(d.Signals, sd)
		d.Desired = max(d.Desired, sd.Desired)
	}
	return d, nil
}

// desired is the replica count for demand at target per replica, with the cold-start hold and
// the conservative scale-down.
func desired(demand, target, headroom float64, current, starting int, partial bool) (int, string) {
	need := ceilCount(demand / target)
	switch {
	case starting == current && current > 0: // nothing ready yet: nothing to measure, hold
		return current, "starting"
	case need > current && starting > 0:
		return current, "starting"
	case need < current && partial:
		return current, "partial"
	case need < current:
		return min(current, ceilCount(demand/(target*headroom))), ""
	}
	return need, ""
}

// ceilCount rounds a replica count up, forgiving float noise (3.0000000001 is 3).
func ceilCount(x float64) int {
	if x <= 0 || math.IsNaN(x) {
		return 0
	}
	return int(math.Ceil(x - 1e-9))
}

// metricValue is the value whose AverageValue ratio to target makes the HPA compute exactly
// replicas. KEDA (v2.20 and later) turns the value into a quantity by formatting it with %.3f,
// which rounds to the nearest thousandth; older KEDA truncated value·1000; the HPA then computes
// ceil(valueMilli / targetMilli). The value is the exact milli product replicas·targetMilli plus
// a quarter of a milli: rounding drops the quarter and so does truncation, so both conversions
// give exactly replicas·targetMilli and the HPA exactly replicas. (Targets are already kept to
// thousandths by ParseTrigger, so targetMilli is what KEDA sends as the HPA's target.)
func metricValue(replicas int, target float64) float64 {
	if replicas <= 0 {
		return 0
	}
	return (float64(replicas)*targetMilli(target) + 0.25) / 1000
}

// targetMilli is a target in the milli-units KEDA and the HPA carry it in.
func targetMilli(target float64) float64 {
	return math.Round(target * 1000)
}
