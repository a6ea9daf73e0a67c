package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	bmetrics "github.com/berth-dev/berth/internal/metrics"
	"github.com/berth-dev/berth/scaler"
)

// Label names of the scaler's metrics.
const (
	labelNamespace    = "namespace"
	labelScaledObject = "scaled_object"
	labelRPC          = "rpc"
	labelCode         = "code"
	labelSource       = "source"
	labelReason       = "reason"
	labelSignal       = "signal"
	labelOperation    = "operation"
	labelOutcome      = "outcome"
)

var (
	requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "request_duration_seconds",
		Help:    "Latency of the scaler's gRPC calls from KEDA, by RPC and gRPC status code.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
	}, []string{labelRPC, labelCode})
	scrapeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "scrape_duration_seconds",
		Help:    "Time to read one replica's metrics page (source pods) or run one evaluation's queries (source prometheus).",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
	}, []string{labelSource})
	scrapeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "scrape_errors_total",
		Help: "Failed scrapes or queries, by source and reason (timeout, connection, http_status, parse, no_series, query).",
	}, []string{labelSource, labelReason})
	evaluationErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "evaluation_errors_total",
		Help: "Evaluations of a ScaledObject that returned an error to KEDA instead of a value, by reason (invalid_metadata, target, no_fresh_data, source).",
	}, []string{labelNamespace, labelScaledObject, labelReason})
	targetReadErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "target_read_errors_total",
		Help: "Reads of a ScaledObject's scale target's spec.replicas (its /scale, read for each round of metrics the HPA asks for) that failed or took longer than 2 s: held decisions then keep the live replicas, which in a rollout count its surge pods. The target was resolved through the same /scale: an API server slow or failing, the target deleted, or RBAC changed since.",
	}, []string{labelNamespace, labelScaledObject})
	modelStoreErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "model_store_errors_total",
		Help: "Reads (load) and writes (save, collect) of the fleet models' ConfigMaps in the scaler's namespace that failed: a model not read is learned again after a restart (a first lesson, a quarter of an hour of history); one not written is lost with the scaler. Its log says which ScaledObject and why (RBAC, the API server).",
	}, []string{labelOperation})
	modelsRestored = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "models_restored_total",
		Help: "Reads of a fleet model from the scaler's namespace when the scaler had none or had not fed its own for a while (a restart, KEDA back from another replica), by outcome: restored, none (no model kept of this fleet: a new one, or a ScaledObject created again, retargeted or given another objective, which learns again), older (the scaler's own was newer).",
	}, []string{labelOutcome})
	signalValue = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "signal_value",
		Help: "A ScaledObject's raw signal at its last evaluation: total waiting requests (queue), total running plus waiting requests (concurrency), total KV-cache usage over ready replicas (kv_cache), prompt plus generated tokens per second over ready replicas (tokens), p95 time to first token in seconds (ttft), p95 inter-token latency in seconds (itl), preemptions per minute per replica (preemptions), estimated prompt tokens waiting (queued_prompt_tokens), KV-cache tokens in use (kv_tokens), mean KV-cache usage (kv_saturation), the followed ScaledObject's count times followRatio (follow), the replicas the forecast demand needs at the learned capacity (slo).",
	}, []string{labelNamespace, labelScaledObject, labelSignal})
	signalTarget = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "signal_target",
		Help: "A ScaledObject's per-replica target for each signal.",
	}, []string{labelNamespace, labelScaledObject, labelSignal})
	desiredReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "desired_replicas",
		Help: "Replicas berth asks for (the largest over the signals), before KEDA's and the HPA's min/max.",
	}, []string{labelNamespace, labelScaledObject})
	currentReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "current_replicas",
		Help: "Live replicas of the scale target: ready, starting and stalled.",
	}, []string{labelNamespace, labelScaledObject})
	readyReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "ready_replicas",
		Help: "Ready replicas of the scale target, those the scaler reads signals from (a LeaderWorkerSet group once every pod of it is ready).",
	}, []string{labelNamespace, labelScaledObject})
	replicaCapacity = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "replica_capacity_requests_per_second",
		Help: "Requests per second one replica carries at the ScaledObject's SLO, as berth has learned it from the replicas' windows (0: not learned yet; the SLO signal holds the fleet).",
	}, []string{labelNamespace, labelScaledObject})
	unattainableRatio = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "unattainable_ratio",
		Help: "The share of first tokens the fleet missed the TTFT objective for in the calmest quarter of its 10-minute blocks without a queue of the last day (0 until three such blocks): prompts no replica prefills within the objective. Where it is more than half what sloAttainment allows and at most 0.25, the SLO signal judges its windows on the other requests.",
	}, []string{labelNamespace, labelScaledObject})
	demandForecast = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "demand_forecast_requests_per_second",
		Help: "The demand the SLO signal sized the fleet for, in requests per second: the demand expected one cold start ahead (baseline, trend and the share of a deviation that persists), or the baseline and its trend times the burst headroom where that is more.",
	}, []string{labelNamespace, labelScaledObject})
	demandHeadroom = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "demand_headroom_ratio",
		Help: "The burst headroom the SLO signal holds, as a multiple of the baseline demand (the recent median and its trend): the smallest that covered headroomQuantile of the fleet's requests of the last day against their baseline forecast one cold start earlier, or on a clear fall of the requests that came on falls (1: none).",
	}, []string{labelNamespace, labelScaledObject})
	headroomReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "headroom_replicas",
		Help: "Of the replicas the SLO signal asks for, those that are burst headroom: beyond what the demand now (its minute's mean, or the surge its last scrape proves), its trend and the backlog need.",
	}, []string{labelNamespace, labelScaledObject})
	maxReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "max_replicas",
		Help: "The ScaledObject's maxReplicaCount.",
	}, []string{labelNamespace, labelScaledObject})
	unsampledReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "unsampled_replicas",
		Help: "Ready replicas without a fresh sample at the last evaluation (scrape failing beyond the staleness bound).",
	}, []string{labelNamespace, labelScaledObject})
	sampleAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "sample_age_seconds",
		Help: "Age of the oldest sample the last evaluation used.",
	}, []string{labelNamespace, labelScaledObject})
	lastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "last_success_timestamp_seconds",
		Help: "When a ScaledObject was last evaluated successfully (Unix time).",
	}, []string{labelNamespace, labelScaledObject})
	held = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "held",
		Help: "1 when the last evaluation held a ScaledObject at its current replicas instead of following its signals, by reason: starting (replicas within the startup timeout are the capacity asked for), partial (no scale-down on partial data), no_ready_replica (nothing ready to measure), learning (the SLO signal has not yet learned what a replica carries, or has no arrival rate; or, holding only scale-downs below what it keeps — the fleet its history began with or what its largest forecast needs — has too little history to learn its burst headroom from).",
	}, []string{labelNamespace, labelScaledObject, labelReason})
	heldSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "held_seconds",
		Help: "How long a ScaledObject's scale-up has been held for starting replicas without a break (0 when not held).",
	}, []string{labelNamespace, labelScaledObject})
	startupTimeout = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "startup_timeout_seconds",
		Help: "A ScaledObject's startupTimeoutSeconds: how long a replica that is not ready holds a scale-up.",
	}, []string{labelNamespace, labelScaledObject})
	stalledReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "stalled_replicas",
		Help: "Replicas that are not ready and no longer hold a scale-up, by reason: crash_loop (container back-off or broken configuration), unschedulable (no node and Karpenter says none is coming), startup_timeout (not ready within startupTimeoutSeconds).",
	}, []string{labelNamespace, labelScaledObject, labelReason})
	active = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "active",
		Help: "1 when the last evaluation found the ScaledObject active (KEDA scales 0↔1 on it).",
	}, []string{labelNamespace, labelScaledObject})
)

// Collectors returns the scaler's metrics for registration.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{requestDuration, scrapeDuration, scrapeErrors, evaluationErrors, targetReadErrors, signalValue, signalTarget,
		desiredReplicas, currentReplicas, readyReplicas, maxReplicas, unsampledReplicas, sampleAge, lastSuccess, active, held, heldSeconds,
		startupTimeout, stalledReplicas, replicaCapacity, unattainableRatio, demandForecast, demandHeadroom, headroomReplicas,
		modelStoreErrors, modelsRestored}
}

// ObserveScrape records one scrape or query of source.
func ObserveScrape(source scaler.Source, d time.Duration, reason string) {
	scrapeDuration.WithLabelValues(string(source)).Observe(d.Seconds())
	if reason != "" {
		scrapeErrors.WithLabelValues(string(source), reason).Inc()
	}
}

// series remembers when each ScaledObject was last evaluated so its series can be dropped once
// KEDA stops asking (the ScaledObject was deleted or moved to another scaler).
type series struct {
	mu   sync.Mutex
	seen map[[2]string]time.Time
	// heldSince is when each ScaledObject's current run of starting holds began.
	heldSince map[[2]string]time.Time
}

// heldFor returns how long ns/name has been held for starting replicas without a break, as of
// now (0 when the last evaluation was not held).
func (s *series) heldFor(ns, name string, isHeld bool, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{ns, name}
	if !isHeld {
		delete(s.heldSince, k)
		return 0
	}
	if s.heldSince == nil {
		s.heldSince = map[[2]string]time.Time{}
	}
	since, ok := s.heldSince[k]
	if !ok {
		s.heldSince[k], since = now, now
	}
	return now.Sub(since)
}

func (s *series) touch(ns, name string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[[2]string]time.Time{}
	}
	s.seen[[2]string{ns, name}] = now
}

// expire deletes the series of ScaledObjects not evaluated since before.
func (s *series) expire(before time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, at := range s.seen {
		if at.After(before) {
			continue
		}
		delete(s.seen, k)
		delete(s.heldSince, k)
		match := prometheus.Labels{labelNamespace: k[0], labelScaledObject: k[1]}
		for _, v := range []*prometheus.GaugeVec{signalValue, signalTarget, desiredReplicas, currentReplicas, readyReplicas, maxReplicas, unsampledReplicas, sampleAge, lastSuccess, active,
			held, heldSeconds, startupTimeout, stalledReplicas, replicaCapacity, unattainableRatio, demandForecast, demandHeadroom, headroomReplicas} {
			v.DeletePartialMatch(match)
		}
		evaluationErrors.DeletePartialMatch(match)
		targetReadErrors.DeletePartialMatch(match)
	}
}

// record exports one successful evaluation; heldFor is how long its scale-up has been held for
// starting replicas without a break.
func record(ns, name string, t *scaler.Trigger, d scaler.Decision, o scaler.Observation, max int, heldFor time.Duration, now time.Time) {
	for _, s := range d.Signals {
		signalValue.WithLabelValues(ns, name, string(s.Signal)).Set(s.Raw)
		signalTarget.WithLabelValues(ns, name, string(s.Signal)).Set(s.Target)
	}
	desiredReplicas.WithLabelValues(ns, name).Set(float64(d.Desired))
	if t.SLO.TTFT > 0 {
		replicaCapacity.WithLabelValues(ns, name).Set(d.Capacity)
		unattainableRatio.WithLabelValues(ns, name).Set(d.MissFloor)
		demandForecast.WithLabelValues(ns, name).Set(d.Forecast.Rate())
		demandHeadroom.WithLabelValues(ns, name).Set(d.Forecast.Headroom)
		headroomReplicas.WithLabelValues(ns, name).Set(float64(d.Headroom))
	}
	currentReplicas.WithLabelValues(ns, name).Set(float64(d.Current))
	readyReplicas.WithLabelValues(ns, name).Set(float64(o.Ready))
	if max > 0 {
		maxReplicas.WithLabelValues(ns, name).Set(float64(max))
	}
	unsampledReplicas.WithLabelValues(ns, name).Set(float64(o.Ready - o.Sampled))
	sampleAge.WithLabelValues(ns, name).Set(o.OldestSample.Seconds())
	lastSuccess.WithLabelValues(ns, name).Set(float64(now.UnixNano()) / 1e9)
	active.WithLabelValues(ns, name).Set(boolValue(d.Active))
	for _, r := range scaler.HeldReasons() {
		held.WithLabelValues(ns, name, string(r)).Set(boolValue(d.Held == r))
	}
	heldSeconds.WithLabelValues(ns, name).Set(heldFor.Seconds())
	startupTimeout.WithLabelValues(ns, name).Set(t.StartupTimeout.Seconds())
	for _, r := range scaler.StallReasons() {
		stalledReplicas.WithLabelValues(ns, name, string(r)).Set(float64(o.Stalled[r]))
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
