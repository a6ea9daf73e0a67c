package warmseats

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	bmetrics "github.com/berth-dev/berth/internal/metrics"
)

// Label names and values of the keeper's metrics.
const (
	labelNamespace    = "namespace"
	labelScaledObject = "scaled_object"
	labelState        = "state"
	labelOperation    = "operation"
	labelResult       = "result"

	stateWanted  = "wanted"
	statePending = "pending"
	stateReady   = "ready"
	stateStale   = "stale"
	stateRefused = "refused"
)

var (
	seatsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "warm_seats",
		Help: "A ScaledObject's warm seats: wanted (what the scaler's last evaluation asked for), pending (created, no node or image yet), ready (a node up with the serving image pulled), stale (of an older pod template, being replaced), refused (what its trigger's warmSeats asks for that the keeper will not keep: a LeaderWorkerSet target, a target without a pod template or not there; the policy then holds that headroom as serving replicas).",
	}, []string{labelNamespace, labelScaledObject, labelState})
	operations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "scaler", Name: "warm_seat_operations_total",
		Help: "Warm seats the keeper created, deleted and unprotected, by operation (create, delete, unprotect: karpenter.sh/do-not-disrupt taken off a seat an older berth made) and result (ok, error).",
	}, []string{labelNamespace, labelScaledObject, labelOperation, labelResult})

	seen   = map[Key]bool{}
	seenMu sync.Mutex
)

// Collectors returns the keeper's metrics for registration.
func Collectors() []prometheus.Collector { return []prometheus.Collector{seatsGauge, operations} }

// record exports one fleet's seats as the keeper saw them, and the seats it refuses to keep.
func record(key Key, want int, seats []Seat, template string, refused int) {
	n := map[string]int{stateWanted: want, stateRefused: refused}
	for _, s := range seats {
		switch {
		case s.Template != template:
			n[stateStale]++
		case s.Ready:
			n[stateReady]++
		default:
			n[statePending]++
		}
	}
	for _, st := range []string{stateWanted, statePending, stateReady, stateStale, stateRefused} {
		seatsGauge.WithLabelValues(key.Namespace, key.Name, st).Set(float64(n[st]))
	}
	seenMu.Lock()
	seen[key] = true
	seenMu.Unlock()
}

// count counts one create or delete.
func count(key Key, op string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	operations.WithLabelValues(key.Namespace, key.Name, op, result).Inc()
}

// forget drops the series of fleets the keeper no longer looks after.
func forget(live map[Key]bool) {
	seenMu.Lock()
	defer seenMu.Unlock()
	for key := range seen {
		if live[key] {
			continue
		}
		delete(seen, key)
		match := prometheus.Labels{labelNamespace: key.Namespace, labelScaledObject: key.Name}
		seatsGauge.DeletePartialMatch(match)
		operations.DeletePartialMatch(match)
	}
}
