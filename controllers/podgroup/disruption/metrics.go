package disruption

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	bmetrics "github.com/berth-dev/berth/internal/metrics"
)

// labelReason is why a node counts as disrupted: one of the Cause* constants (node_gone,
// node_deleting, nodeclaim_deleting, disrupted_taint, disruption_target).
const labelReason = "reason"

// disruptions counts nodes backing a running gang that were disrupted, once per node per gang.
var disruptions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "disruptions_total",
	Help: "Nodes backing an admitted or running gang that were disrupted, once per node per gang, by the gang's namespace, the node's NodePool (empty when not Karpenter's) and reason (node_gone, node_deleting, nodeclaim_deleting, disrupted_taint, disruption_target).",
}, []string{bmetrics.LabelNamespace, bmetrics.LabelNodePool, labelReason})

func init() {
	ctrlmetrics.Registry.MustRegister(Collectors()...)
}

// Collectors are the package's metrics, as registered with controller-runtime's registry
// (docs/metrics.md is generated from them).
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{disruptions}
}
