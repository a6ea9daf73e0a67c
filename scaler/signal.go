package scaler

import (
	"math"
	"sort"
	"time"
)

// Signal is one thing a ScaledObject scales on.
type Signal string

const (
	// SignalQueue is requests waiting in vLLM's scheduler queue (vllm:num_requests_waiting).
	SignalQueue Signal = "queue"
	// SignalConcurrency is requests running plus waiting, per replica: the load.
	SignalConcurrency Signal = "concurrency"
	// SignalKVCache is KV-cache usage, 0–1 (vllm:kv_cache_usage_perc).
	SignalKVCache Signal = "kv_cache"
	// SignalTTFT is the p95 time to first token (vllm:time_to_first_token_seconds).
	SignalTTFT Signal = "ttft"
	// SignalITL is the p95 inter-token latency (vllm:inter_token_latency_seconds).
	SignalITL Signal = "itl"
	// SignalPreemption is preemptions per minute per replica (vllm:num_preemptions_total): the
	// KV cache running out mid-decode.
	SignalPreemption Signal = "preemptions"
	// SignalTokens is prompt plus generated tokens processed per second per replica
	// (vllm:prompt_tokens_total + vllm:generation_tokens_total): the load in tokens, which a
	// request count misses when lengths vary.
	SignalTokens Signal = "tokens"
	// SignalFollow is the replicas another ScaledObject's fleet needs from this one: the
	// followed ScaledObject's own count times followRatio (a prefill:decode ratio).
	SignalFollow Signal = "follow"
	// SignalQueuedPromptTokens is the prompt tokens waiting to be prefilled: each replica's
	// waiting requests times its mean prompt length (vllm:request_prompt_tokens). The prefill
	// work queued, which a request count misses when prompts differ in length.
	SignalQueuedPromptTokens Signal = "queued_prompt_tokens"
	// SignalKVTokens is the KV-cache tokens in use: usage times the cache's size in tokens
	// (vllm:cache_config_info's num_gpu_blocks × block_size; SGLang's sglang:num_used_tokens).
	// A decode fleet's load in the unit its memory is counted in, comparable across replicas
	// whose caches differ in size.
	SignalKVTokens Signal = "kv_tokens"
	// SignalKVSaturation is the fleet's mean KV-cache usage held against kvSaturation: a
	// guard, not a size — above it replicas are added before the caches fill and vLLM starts
	// preempting; at or under it (or unknown) it asks for nothing.
	SignalKVSaturation Signal = "kv_saturation"
	// SignalSLO sizes the fleet on its SLO (ttftSLOSeconds, itlSLOSeconds, sloAttainment): the
	// demand forecast one cold start ahead over the request rate one replica carries at the SLO,
	// learned online from the replicas' own windows (FleetModel).
	SignalSLO Signal = "slo"
)

// MetricName is the metric name berth gives KEDA for a signal (KEDA prefixes it with the
// trigger index, e.g. s0-berth-queue-depth).
func (s Signal) MetricName() string {
	switch s {
	case SignalQueue:
		return "berth-queue-depth"
	case SignalConcurrency:
		return "berth-concurrency"
	case SignalKVCache:
		return "berth-kv-cache-usage"
	case SignalTokens:
		return "berth-tokens-per-second"
	case SignalTTFT:
		return "berth-ttft-seconds"
	case SignalITL:
		return "berth-itl-seconds"
	case SignalPreemption:
		return "berth-preemptions-per-minute"
	case SignalFollow:
		return "berth-follow-replicas"
	case SignalQueuedPromptTokens:
		return "berth-queued-prompt-tokens"
	case SignalKVTokens:
		return "berth-kv-tokens"
	case SignalKVSaturation:
		return "berth-kv-saturation"
	case SignalSLO:
		return "berth-slo-replicas"
	}
	return ""
}

// Constraint reports whether the signal is an SLO constraint (adds replicas when violated, never
// sizes a fleet down) rather than a sizing signal.
func (s Signal) Constraint() bool {
	return s == SignalTTFT || s == SignalITL || s == SignalPreemption || s == SignalKVSaturation || s == SignalFollow
}

// AllSignals lists every signal, in documentation order.
func AllSignals() []Signal {
	return []Signal{SignalSLO, SignalQueue, SignalConcurrency, SignalQueuedPromptTokens, SignalKVCache, SignalKVTokens, SignalTokens,
		SignalTTFT, SignalITL, SignalPreemption, SignalKVSaturation, SignalFollow}
}

// SignalForMetric maps a metric name from KEDA back to its signal.
func SignalForMetric(name string) (Signal, bool) {
	for _, s := range AllSignals() {
		if s.MetricName() == name {
			return s, true
		}
	}
	return "", false
}

// Histogram is a cumulative Prometheus histogram: Counts[i] observations were <= Bounds[i].
// The last bound is +Inf.
type Histogram struct {
	Bounds []float64
	Counts []float64
}

// Add merges o into h (same series from another engine or replica). Bounds missing on one
// side are taken from the other; mismatching layouts keep h unchanged and report false.
func (h *Histogram) Add(o Histogram) bool {
	if len(h.Bounds) == 0 {
		h.Bounds = append([]float64(nil), o.Bounds...)
		h.Counts = append([]float64(nil), o.Counts...)
		return true
	}
	if len(o.Bounds) != len(h.Bounds) {
		return false
	}
	for i := range o.Bounds {
		if o.Bounds[i] != h.Bounds[i] {
			return false
		}
	}
	for i := range o.Counts {
		h.Counts[i] += o.Counts[i]
	}
	return true
}

// Sub returns h − earlier, the observations made between two snapshots of one series. A
// counter reset (any bucket going down) returns h itself, as Prometheus's rate() would.
func (h Histogram) Sub(earlier Histogram) Histogram {
	out := Histogram{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts))}
	if len(earlier.Counts) != len(h.Counts) {
		copy(out.Counts, h.Counts)
		return out
	}
	for i := range h.Counts {
		d := h.Counts[i] - earlier.Counts[i]
		if d < 0 {
			copy(out.Counts, h.Counts)
			return out
		}
		out.Counts[i] = d
	}
	return out
}

// Total is the number of observations.
func (h Histogram) Total() float64 {
	if len(h.Counts) == 0 {
		return 0
	}
	return h.Counts[len(h.Counts)-1]
}

// Quantile estimates the q-quantile by linear interpolation inside the bucket that holds it,
// the way PromQL's histogram_quantile does. It returns NaN without observations. A quantile
// in the +Inf bucket returns the highest finite bound.
func (h Histogram) Quantile(q float64) float64 {
	total := h.Total()
	if total <= 0 || len(h.Bounds) < 2 || q < 0 || q > 1 {
		return math.NaN()
	}
	rank := q * total
	i := sort.Search(len(h.Counts), func(i int) bool { return h.Counts[i] >= rank })
	if i >= len(h.Bounds)-1 {
		return h.Bounds[len(h.Bounds)-2]
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h.Bounds[i-1], h.Counts[i-1]
	}
	in := h.Counts[i] - below
	if in <= 0 {
		return h.Bounds[i]
	}
	return lower + (h.Bounds[i]-lower)*(rank-below)/in
}

// FractionAtOrBelow estimates the fraction of observations at or below x, interpolating
// linearly inside the bucket that holds x as Quantile does; NaN without observations.
func (h Histogram) FractionAtOrBelow(x float64) float64 {
	total := h.Total()
	if total <= 0 || len(h.Bounds) == 0 {
		return math.NaN()
	}
	lower, below := 0.0, 0.0
	for i, b := range h.Bounds {
		if x < b {
			if math.IsInf(b, 1) {
				return below / total
			}
			return (below + (h.Counts[i]-below)*(x-lower)/(b-lower)) / total
		}
		lower, below = b, h.Counts[i]
	}
	return 1
}

// FractionAtOrBelowBound is the fraction of observations at or below the first bucket bound at
// or above x: what the histogram can say of x without guessing inside a bucket (vLLM's TTFT
// buckets go 1 s, 2.5 s: a linear guess for 2 s counts a third of the first tokens between
// them as slow, where they are mostly long prompts' prefills just over 1 s). NaN without
// observations.
func (h Histogram) FractionAtOrBelowBound(x float64) float64 {
	total := h.Total()
	if total <= 0 || len(h.Bounds) == 0 {
		return math.NaN()
	}
	i := sort.SearchFloat64s(h.Bounds, x)
	if i >= len(h.Bounds) || math.IsInf(h.Bounds[i], 1) {
		return h.FractionAtOrBelow(x)
	}
	return h.Counts[i] / total
}

// Sample is what one replica reported at one moment, summed across its engines.
type Sample struct {
	// At is when the sample was taken (scrape time, or the series' timestamp in Prometheus).
	At time.Time
	// Waiting and Running are requests queued and in flight.
	Waiting, Running float64
	// KVUsage is KV-cache usage, 0–1, the mean over the replica's engines; HasKV is false when
	// the replica exposes neither vllm:kv_cache_usage_perc nor vllm:gpu_cache_usage_perc.
	KVUsage float64
	HasKV   bool
	// TTFT is the cumulative time-to-first-token histogram.
	TTFT Histogram
	// ITL is the cumulative inter-token latency histogram.
	ITL Histogram
	// TPOT is the cumulative histogram of finished requests' mean time per output token
	// (vllm:request_time_per_output_token_seconds; empty on engines without it).
	TPOT Histogram
	// Preemptions is the cumulative count of preempted sequences.
	Preemptions float64
	// Tokens is the cumulative count of prompt tokens prefilled plus tokens generated.
	Tokens float64
	// KVTokens is the KV-cache tokens in use, summed over the replica's engines; HasKVTokens is
	// false when the page does not say how large the caches are.
	KVTokens    float64
	HasKVTokens bool
	// PromptTokens and Prompts are the cumulative sum and count of finished requests' prompt
	// lengths (vllm:request_prompt_tokens): their ratio is the mean prompt length.
	PromptTokens, Prompts float64
	// Finished is the cumulative count of requests that completed (vllm:request_success_total,
	// finished_reason stop or length) and Aborted of those aborted (finished_reason abort: the
	// client gave up); HasFinished is false when the page has no such series.
	Finished, Aborted float64
	HasFinished       bool
}

// QueuedPromptTokens estimates the prompt tokens a replica has waiting: its waiting requests
// times its mean prompt length so far. Nothing waiting is a known zero; requests waiting on a
// replica that has finished none yet are unknown (false).
func (s Sample) QueuedPromptTokens() (float64, bool) {
	switch {
	case s.Waiting <= 0:
		return 0, true
	case s.Prompts <= 0:
		return 0, false
	}
	return s.Waiting * s.PromptTokens / s.Prompts, true
}

// Observation is what one evaluation knows about a scale target: its replicas from the API
// and the fresh samples the source could get.
type Observation struct {
	// Ready replicas serve traffic; Sampled of them have a fresh sample.
	Ready, Sampled int
	// Starting replicas exist but are not ready yet: capacity on its way, which holds a
	// scale-up until it arrives.
	Starting int
	// Stalled counts replicas that are not ready and no longer count as capacity on its way,
	// by reason: they never hold a scale-up.
	Stalled map[StallReason]int
	// Spec is the scale target's spec.replicas read for this evaluation, when HasSpec (not for a
	// ScaledJob, nor when the read failed): the count the HPA moves from, which a held decision
	// keeps. The live replicas differ from it in a rollout (maxSurge pods on top) and while pods
	// are replaced; holding at the live count made every held evaluation of a rollout ask for its
	// surge pods as replicas (and the next rollout step surged again), and a pod lost before its
	// replacement existed shrank the fleet by one.
	Spec    int
	HasSpec bool
	// Waiting, Running and KVUsage are sums over the sampled replicas.
	Waiting, Running, KVUsage float64
	// Upstream is the requests waiting in front of the replicas (the trigger's demandQuery at a
	// router or gateway), which exist even with no replica: 0 without a demandQuery.
	Upstream float64
	// KVSampled is how many sampled replicas reported KV-cache usage.
	KVSampled int
	// KVTokens is the KV-cache tokens in use, summed over the KVTokensSampled replicas whose
	// pages say how large their caches are.
	KVTokens        float64
	KVTokensSampled int
	// QueuedPromptTokens is the prompt tokens waiting, summed over the PromptSampled replicas
	// whose queue length in tokens is known (Sample.QueuedPromptTokens).
	QueuedPromptTokens float64
	PromptSampled      int
	// TTFTP95 is the p95 time to first token over the recent window; NaN when no request
	// got its first token in the window.
	TTFTP95 float64
	// ITLP95 is the p95 inter-token latency over the recent window; NaN when no token was
	// generated in the window.
	ITLP95 float64
	// PreemptionsPerMinute is the fleet's preemptions per minute over the recent window; NaN
	// when no replica has a window yet.
	PreemptionsPerMinute float64
	// TokensPerSecond is the prompt plus generated tokens per second over the recent window,
	// summed over the TokensSampled replicas that have a window (two pages).
	TokensPerSecond float64
	TokensSampled   int
	// FollowReplicas is what the followed ScaledObject asks of this fleet (its own count times
	// followRatio); NaN when it is not known (not evaluated recently).
	FollowReplicas float64
	// OldestSample is the age of the oldest sample used.
	OldestSample time.Duration
	// Windows is each sampled replica's last window, for SignalSLO's capacity model (empty
	// when the trigger has no SLO).
	Windows []ReplicaWindow
	// Arrivals is the requests per second that arrived at the ArrivalsSampled replicas with a
	// window; NaN when no replica has one.
	Arrivals        float64
	ArrivalsSampled int
	// Startup is the longest start-up (created to ready) of the ready replicas that started
	// recently; 0 when none did.
	Startup time.Duration
	// Model is what berth has learned of the fleet (kept by the caller between evaluations and
	// fed each observation with FleetModel.Learn); nil: nothing.
	Model *FleetModel
}

// Pod is a replica of a scale target as the API reports it. Pods being deleted are left out.
type Pod struct {
	// Name is the pod's name; IP its pod IP ("" before the pod has one).
	Name, IP string
	// UID is the pod's UID ("" when unknown). What the scaler remembers of a replica's metrics
	// endpoint is the pod's, not its IP's: a pod that gets a deleted pod's IP starts with no
	// memory, never with the deleted pod's pages.
	UID string
	// Ready is the pod's Ready condition.
	Ready bool
	// Created is when the pod was created: how long a pod that is not ready has been starting.
	Created time.Time
	// ReadyAt is when a ready pod's Ready condition last turned true (zero when unknown):
	// with Created, how long the replica took to start.
	ReadyAt time.Time
	// StartedAt is when the longest-running of its containers started (zero when unknown or
	// not all run): counters a replica exports start at zero then.
	StartedAt time.Time
	// Stuck, for a pod that is not ready, says why it will not become ready by itself ("" when
	// it may): a crash-looping or unpullable container, or no node and none coming.
	Stuck StallReason
}

// StallReason says why a replica that is not ready no longer counts as capacity on its way.
type StallReason string

const (
	// StallCrashLoop: a container is in CrashLoopBackOff, or its image cannot be pulled, or its
	// configuration is broken — waiting for it would wait for good.
	StallCrashLoop StallReason = "crash_loop"
	// StallUnschedulable: the pod fits no node and Karpenter said it cannot launch one (e.g. a
	// GPU stock-out or no NodePool that matches).
	StallUnschedulable StallReason = "unschedulable"
	// StallStartupTimeout: the pod has not become ready within the trigger's
	// startupTimeoutSeconds.
	StallStartupTimeout StallReason = "startup_timeout"
)

// StallReasons lists every StallReason, in documentation order.
func StallReasons() []StallReason {
	return []StallReason{StallCrashLoop, StallUnschedulable, StallStartupTimeout}
}

// StalledTotal is the number of stalled replicas.
func (o Observation) StalledTotal() int {
	n := 0
	for _, c := range o.Stalled {
		n += c
	}
	return n
}
