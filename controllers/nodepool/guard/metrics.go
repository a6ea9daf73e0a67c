package guard

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	bmetrics "github.com/berth-dev/berth/internal/metrics"
)

// Label names of this package's metrics.
const (
	// labelNodePool is a Karpenter NodePool's name.
	labelNodePool = "nodepool"
	// labelAction is what the guard did: budget_added, switched_when_empty, audited.
	labelAction = "action"
)

// Values of labelAction.
const (
	actionBudgetAdded       = "budget_added"
	actionSwitchedWhenEmpty = "switched_when_empty"
	actionAudited           = "audited"
)

var (
	// unsafeConsolidation is 1 for each GPU NodePool whose underutilized nodes Karpenter may
	// consolidate and that the guard left so (audit), 0 for guarded or safe GPU pools.
	unsafeConsolidation = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "nodepool", Name: "unsafe_consolidation",
		Help: "1 for a GPU NodePool on which Karpenter may consolidate underutilized nodes (evicting running GPU pods), 0 for a safe GPU NodePool.",
	}, []string{labelNodePool})

	// guardActions counts what the guard did, by action.
	guardActions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "nodepool", Name: "guard_actions_total",
		Help: "Consolidation guard actions on GPU NodePools by action (budget_added, switched_when_empty, audited).",
	}, []string{labelAction})
)

func init() {
	ctrlmetrics.Registry.MustRegister(Collectors()...)
}

// Collectors are the package's metrics, as registered with controller-runtime's registry
// (docs/metrics.md is generated from them).
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{unsafeConsolidation, guardActions}
}
