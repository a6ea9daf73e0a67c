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
	signalValue = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "signal_value",
		Help: "A ScaledObject's raw signal at its last evaluation: total waiting requests (queue), total KV-cache usage over ready replicas (kv_cache), p95 time to first token in seconds (ttft).",
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
		Help: "Replicas of the scale target that are ready or starting.",
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
	active = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "active",
		Help: "1 when the last evaluation found the ScaledObject active (KEDA scales 0↔1 on it).",
	}, []string{labelNamespace, labelScaledObject})
)

// Collectors returns the scaler's metrics for registration.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{requestDuration, scrapeDuration, scrapeErrors, evaluationErrors, signalValue, signalTarget,
		desiredReplicas, currentReplicas, maxReplicas, unsampledReplicas, sampleAge, lastSuccess, active}
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
		match := prometheus.Labels{labelNamespace: k[0], labelScaledObject: k[1]}
		for _, v := range []*prometheus.GaugeVec{signalValue, signalTarget, desiredReplicas, currentReplicas, maxReplicas, unsampledReplicas, sampleAge, lastSuccess, active} {
			v.DeletePartialMatch(match)
		}
		evaluationErrors.DeletePartialMatch(match)
	}
}

func record(ns, name string, d scaler.Decision, o scaler.Observation, max int, now time.Time) {
	for _, s := range d.Signals {
		signalValue.WithLabelValues(ns, name, string(s.Signal)).Set(s.Raw)
		signalTarget.WithLabelValues(ns, name, string(s.Signal)).Set(s.Target)
	}
	desiredReplicas.WithLabelValues(ns, name).Set(float64(d.Desired))
	currentReplicas.WithLabelValues(ns, name).Set(float64(d.Current))
	if max > 0 {
		maxReplicas.WithLabelValues(ns, name).Set(float64(max))
	}
	unsampledReplicas.WithLabelValues(ns, name).Set(float64(o.Ready - o.Sampled))
	sampleAge.WithLabelValues(ns, name).Set(o.OldestSample.Seconds())
	lastSuccess.WithLabelValues(ns, name).Set(float64(now.UnixNano()) / 1e9)
	b := 0.0
	if d.Active {
		b = 1
	}
	active.WithLabelValues(ns, name).Set(b)
}
