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
	// ratios) or the p95 TTFT in seconds; over the replicas read when some had no fresh
	// sample (a lower bound).
	Raw float64
	// Target is the per-replica target.
	Target float64
	// Desired is the replica count this signal asks for.
	Desired int
	// Held says why Desired was held at the current count instead of following Raw ("" when
	// it was not).
	Held Held
	// Value is the metric value to give KEDA: with an AverageValue target of Target the HPA
	// computes ceil(Value/Target) = Desired.
	Value float64
}

// Held is why a signal's replica count was held: at the current count, or (HeldLearning with
// a history) at what the fleet keeps while it learns its burst headroom.
type Held string

const (
	// HeldStarting: replicas still starting (within the startup timeout) are the capacity the
	// signal asks for; a scale-up waits for them.
	HeldStarting Held = "starting"
	// HeldPartial: some ready replicas had no fresh sample, so no scale-down.
	HeldPartial Held = "partial"
	// HeldNoReadyReplica: no replica is ready (the others are stalled), so nothing measures
	// the load and nothing is removed.
	HeldNoReadyReplica Held = "no_ready_replica"
	// HeldLearning: the SLO signal has not yet seen what a replica carries at the SLO, or has
	// no arrival rate, so it holds the fleet (the TTFT and ITL constraints still add replicas);
	// or its history is still too short to learn the burst headroom from, so it grows the
	// fleet on the forecast but shrinks it no further than it keeps (Forecast.Keep: the fleet
	// its history began with or what its largest forecast needs).
	HeldLearning Held = "learning"
)

// HeldReasons lists every Held reason, in documentation order.
func HeldReasons() []Held { return []Held{HeldStarting, HeldPartial, HeldNoReadyReplica, HeldLearning} }

// Decision is the outcome of one evaluation.
type Decision struct {
	Signals []SignalDecision
	// Desired is the largest Desired over the signals — what the HPA does with several metrics.
	Desired int
	// Current is every live replica: ready, starting and stalled (what the decision moves from
	// is Observation.Spec where known).
	Current int
	// Held is the reason the decision was held, if any signal was (starting first).
	Held Held
	// Own is what this fleet's own signals ask for, before any followed ScaledObject's floor:
	// the count others follow (so two ScaledObjects that follow each other cannot ratchet).
	Own int
	// Active says whether the ScaledObject should be active (KEDA scales 0↔1 on it): requests
	// wait above the activation threshold, requests are running, or replicas exist that are not
	// ready yet.
	Active bool
	// Partial is true when some ready replicas had no fresh sample.
	Partial bool
	// Capacity is the request rate per replica the SLO signal sized on (0: no SLO signal or
	// nothing learned); Forecast the demand it sized for.
	Capacity float64
	Forecast Forecast
	// MissFloor is the share of first tokens the SLO signal's fleet misses the TTFT objective
	// for when nothing loads it (FleetModel.MissFloor; 0: not measured yet).
	MissFloor float64
	// Headroom is how many of the SLO signal's replicas are burst headroom: those it asks for
	// beyond what the demand expected, the demand now or the surge the last scrape proves
	// (Forecast.Surge) needs (the same floors and holds), warm seats included; a burst under
	// way uses it up. Held as serving replicas they absorb a burst at once; held as warm seats
	// (nodes up, the serving image pulled) a burst's replicas pay only their model load. 0
	// without an SLO signal, and while the signal is held.
	Headroom int
	// WarmSeats is how many warm seats the fleet should have (the trigger's warmSeats): the
	// headroom between minWarmSeats and warmSeats; the SLO signal asks for as much less of its
	// headroom as serving replicas as the seats stand in for, and — in a burst beyond its
	// forecast, where the replicas serving are more than it asks for — up to one replica more
	// per seat (splitSeats). While the SLO signal is held SeatsHeld is true and WarmSeats is
	// minWarmSeats: at least that many, and keep any more there are.
	WarmSeats int
	SeatsHeld bool
}

// splitSeats holds up to t.WarmSeats of the SLO signal's headroom replicas (what it asks for
// beyond the serving replicas) as warm seats, and at least t.MinWarmSeats: the signal then asks
// for as many fewer serving replicas as seats stand in for its headroom. Seats beyond the
// headroom take nothing from the serving replicas; and where the serving replicas are more than
// the signal asks for — a burst the forecast expects to end before a new node could serve it —
// the signal asks for up to that many replicas more, one on each seat: a seat's replica serves
// after its model load, within the burst. A held signal asks for at least t.MinWarmSeats and
// keeps what there is (held true).
func splitSeats(sd SignalDecision, serving int, t *Trigger) (out SignalDecision, seats int, held bool) {
	if t.WarmSeats == 0 {
		return sd, 0, false
	}
	if sd.Held != "" {
		return sd, t.MinWarmSeats, true
	}
	headroom := max(0, sd.Desired-serving)
	seats = min(max(headroom, t.MinWarmSeats), t.WarmSeats)
	if serving > sd.Desired {
		sd.Desired = min(serving, sd.Desired+seats)
	} else {
		sd.Desired -= min(seats, headroom)
	}
	sd.Value = metricValue(sd.Desired, sd.Target)
	return sd, seats, false
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
//   - queue: ceil(waiting / targetQueueDepth), waiting including the requests the demandQuery
//     sees in front of the replicas (so a fleet at zero has a demand);
//   - concurrency: ceil((running + waiting) / targetConcurrency): the load, not only the
//     backlog, so a healthy fleet with nothing waiting keeps the replicas its requests use;
//   - KV cache: ceil(Σ usage / targetKVCacheUsage), so the mean usage lands on the target;
//   - TTFT and ITL are SLO constraints, not sizes: above targetTTFTSeconds (targetITLSeconds)
//     the p95 adds replicas, at or under it (or unknown) it asks for what the sizing signals
//     ask — never fewer; so do preemptions per minute per replica above
//     maxPreemptionsPerMinute (the KV cache running out mid-decode), and so does the mean
//     KV-cache usage above kvSaturation (the caches about to run out);
//   - queued prompt tokens: ceil(Σ waiting × mean prompt length / targetQueuedPromptTokens);
//     KV tokens: ceil(Σ usage × cache tokens / targetKVTokens);
//   - a scale-up beyond the current count waits while replicas are starting (they are the
//     capacity the signal asked for; without the hold, a queue that keeps growing during a
//     cold start would ask for more and more replicas) — but only replicas that can still
//     come: crash-looping pods, pods with no node and none coming, and pods older than the
//     trigger's startup timeout are stalled and never hold;
//   - a scale-down removes replicas only while the rest stay within ScaleDownHeadroom of the
//     target, and never on partial data;
//   - with partial data (a ready replica without a fresh sample: typically one that has just
//     become ready and not been read yet) the demand is the sum over the replicas that were
//     read: a lower bound, since the others hold at least nothing. It may add replicas (the
//     demand is at least that) and never removes any. Extrapolating the others' mean to the
//     unread replicas instead overshoots at every scale-up step, because a replica that has
//     just become ready holds almost none of the load yet.
//
// With ready replicas and no fresh sample it returns ErrNoFreshData.
func (p Policy) Decide(o Observation, t *Trigger) (Decision, error) {
	if o.Ready > 0 && o.Sampled == 0 {
		return Decision{}, fmt.Errorf("%d ready replicas: %w", o.Ready, ErrNoFreshData)
	}
	if o.Ready > 0 && t.TargetKVCacheUsage > 0 && o.KVSampled == 0 {
		return Decision{}, fmt.Errorf("%d ready replicas, none reports vllm:kv_cache_usage_perc (or the older vllm:gpu_cache_usage_perc): %w", o.Ready, ErrNoFreshData)
	}
	if o.Ready > 0 && t.TargetKVTokens > 0 && o.KVTokensSampled == 0 {
		return Decision{}, fmt.Errorf("%d ready replicas, none says how large its KV cache is (vllm:cache_config_info with num_gpu_blocks and block_size, or sglang:num_used_tokens): %w", o.Ready, ErrNoFreshData)
	}
	if o.Ready > 0 && t.TargetQueuedPromptTokens > 0 && o.Waiting > 0 && o.PromptSampled == 0 {
		return Decision{}, fmt.Errorf("%d ready replicas with requests waiting, none reports the prompt lengths targetQueuedPromptTokens needs (vllm:request_prompt_tokens; SGLang exports none: set targetQueueDepth instead): %w", o.Ready, ErrNoFreshData)
	}
	headroom := p.ScaleDownHeadroom
	if headroom <= 0 || headroom > 1 {
		headroom = 1
	}
	stalled := o.StalledTotal()
	d := Decision{Current: o.Ready + o.Starting + stalled, Partial: o.Sampled < o.Ready}
	// What the decision moves from and a hold keeps: the HPA's own count where it was read. The
	// replicas starting that hold a scale-up are those on their way to that count: a rollout's
	// surge pods replace replicas that serve, and holding on them held every scale-up for as
	// long as the rollout ran.
	current, starting := d.Current, o.Starting
	if o.HasSpec {
		current, starting = o.Spec, min(o.Starting, max(0, o.Spec-o.Ready))
	}
	waiting := o.Waiting + o.Upstream
	d.Active = waiting > t.ActivationQueueDepth || o.Running > 0 || o.Starting > 0 || stalled > 0
	running := o.Running
	// Sizing signals first: they say how many replicas the load needs.
	for _, s := range t.Signals() {
		if s.Constraint() {
			continue
		}
		if s == SignalSLO {
			sd, fc, carry, serving := decideSLO(o, t, headroom, current, d.Partial)
			d.Capacity, d.Forecast = carry, fc
			d.MissFloor = o.Model.MissFloor()
			if sd.Held == "" {
				d.Headroom = max(0, sd.Desired-serving)
			}
			sd, d.WarmSeats, d.SeatsHeld = splitSeats(sd, serving, t)
			d.add(sd)
			continue
		}
		target := t.Target(s)
		sd := SignalDecision{Signal: s, Target: target}
		switch s {
		case SignalQueue:
			sd.Raw = waiting
		case SignalConcurrency:
			sd.Raw = waiting + running
		case SignalKVCache:
			sd.Raw = o.KVUsage
		case SignalKVTokens:
			sd.Raw = o.KVTokens
		case SignalQueuedPromptTokens:
			// A replica with requests waiting and none finished has no mean prompt length
			// yet: partial, like a replica not read.
			sd.Raw = o.QueuedPromptTokens
		case SignalTokens:
			// Replicas without a window yet (two pages) count for nothing; with none, the rate
			// is unknown: partial, so it holds the fleet and never shrinks it.
			sd.Raw = o.TokensPerSecond
		}
		partial := d.Partial || (s == SignalKVCache && o.KVSampled < o.Ready) || (s == SignalTokens && o.TokensSampled < o.Ready) ||
			(s == SignalKVTokens && o.KVTokensSampled < o.Ready) || (s == SignalQueuedPromptTokens && o.PromptSampled < o.Ready)
		sd.Desired, sd.Held = desired(sd.Raw, target, headroom, current, o.Ready, starting, partial)
		d.add(sd)
	}
	// Then the SLO constraints: they add replicas when violated and otherwise follow the
	// sizing signals (under the HPA's max, a vote that changes nothing).
	d.constrainAll(o, t, current, starting)
	d.Own = d.Desired
	if t.Follow != "" {
		sd := SignalDecision{Signal: SignalFollow, Target: 1, Desired: d.Desired}
		if !math.IsNaN(o.FollowReplicas) {
			sd.Raw = o.FollowReplicas
			sd.Desired = max(d.Desired, ceilCount(o.FollowReplicas))
		}
		sd.Value = metricValue(sd.Desired, 1)
		d.add(sd)
	}
	return d, nil
}

// constrainAll adds the decisions of the trigger's constraints (TTFT, ITL, preemptions, the KV
// guard) to a decision that holds the sizing signals' already; current is the count the
// decision moves from, starting the replicas on their way to it.
func (d *Decision) constrainAll(o Observation, t *Trigger, current, starting int) {
	sizing := d.Desired
	for _, s := range t.Signals() {
		if !s.Constraint() || s == SignalFollow {
			continue
		}
		value := o.TTFTP95
		switch s {
		case SignalITL:
			value = o.ITLP95
		case SignalPreemption:
			value = math.NaN()
			if o.Ready > 0 {
				value = o.PreemptionsPerMinute / float64(o.Ready)
			}
		case SignalKVSaturation:
			value = math.NaN()
			if o.KVSampled > 0 {
				value = o.KVUsage / float64(o.KVSampled)
			}
		}
		sd := constrain(s, t.Target(s), value, sizing, current, o.Ready, starting)
		if s == SignalKVSaturation && o.KVSampled > 0 {
			// The guard also keeps the fleet from shrinking into saturation: at least as many
			// replicas as hold the KV in use at or under the threshold (the KV in use moves with
			// the requests, not with the replica count). At or under the threshold that is never
			// more than the ready replicas, so it only ever holds; without it a guard that added
			// a replica would see the sizing signals take it away and add it again.
			if floor := ceilCount(o.KVUsage / t.Target(s)); floor > sd.Desired {
				sd.Desired = floor
				sd.Value = metricValue(sd.Desired, sd.Target)
			}
		}
		d.add(sd)
	}
}

// maxSLOStep caps how far one evaluation of a violated SLO multiplies the ready replicas.
const maxSLOStep = 2.0

// constrain is an SLO signal's decision: with p95 above target, ceil(ready × p95/target)
// replicas — at least one more than now, at most maxSLOStep times the ready ones, held while
// replicas start; with p95 at or under target, or unknown (NaN: no first token in the window,
// idle or stalled), the sizing signals' count. It never asks for fewer replicas than they do.
func constrain(s Signal, target, p95 float64, sizing, current, ready, starting int) SignalDecision {
	sd := SignalDecision{Signal: s, Target: target, Desired: sizing}
	if !math.IsNaN(p95) {
		sd.Raw = p95
	}
	if math.IsNaN(p95) || p95 <= target || ready == 0 {
		sd.Value = metricValue(sd.Desired, target)
		return sd
	}
	need := max(current+1, ceilCount(float64(ready)*min(p95/target, maxSLOStep)))
	if starting > 0 {
		sd.Desired, sd.Held = max(sizing, current), HeldStarting
	} else {
		sd.Desired = max(sizing, need)
	}
	sd.Value = metricValue(sd.Desired, target)
	return sd
}

// add records one signal's decision: the Decision asks for the largest count, as the HPA does
// with several metrics.
func (d *Decision) add(sd SignalDecision) {
	if sd.Value == 0 && sd.Desired > 0 {
		sd.Value = metricValue(sd.Desired, sd.Target)
	}
	d.Signals = append(d.Signals, sd)
	d.Desired = max(d.Desired, sd.Desired)
	if sd.Held != "" && (d.Held == "" || sd.Held == HeldStarting) {
		d.Held = sd.Held
	}
}

// desired is the replica count for demand at target per replica, with the cold-start hold and
// the conservative scale-down.
func desired(demand, target, headroom float64, current, ready, starting int, partial bool) (int, Held) {
	need := ceilCount(demand / target)
	switch {
	case need > current && starting > 0:
		return current, HeldStarting
	case need < current && ready == 0 && starting > 0: // nothing ready yet: nothing to measure
		return current, HeldStarting
	case need < current && ready == 0:
		return current, HeldNoReadyReplica
	case need < current && partial:
		return current, HeldPartial
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

// WireTarget is the target as GetMetricSpec sends it (targetSizeFloat): the target's exact
// milli count plus a quarter of a milli, so that KEDA's conversion into the HPA's target lands
// on targetMilli both ways — %.3f rounds the quarter away, and the truncation of KEDA before
// v2.20 does too, where the bare target would truncate one milli short for targets such as
// 2.01 (2.01·1000 is 2009.999… in binary: 2009 milli, and every replica count one too many).
func WireTarget(target float64) float64 {
	return (targetMilli(target) + 0.25) / 1000
}
