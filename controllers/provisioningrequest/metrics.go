package provisioningrequest

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	bmetrics "github.com/berth-dev/berth/internal/metrics"
)

var (
	// conditionsSet counts the conditions berth set on ProvisioningRequests.
	conditionsSet = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "provisioningrequest", Name: "conditions_total",
		Help: "Conditions berth set on ProvisioningRequests, by the request's namespace, its class, the condition (Accepted, Provisioned, Failed, BookingExpired) with its status, and the reason (Cluster Autoscaler's: CapacityIsFound, CapacityIsProvisioned, CapacityIsNotFound, FailedToCreatePods, Expired, CapacityBookingConsumed, CapacityReservationTimeExpired).",
	}, []string{bmetrics.LabelNamespace, bmetrics.LabelClass, bmetrics.LabelCondition, bmetrics.LabelReason})
	// seatsChanged counts seats created and removed for ProvisioningRequests.
	seatsChanged = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "provisioningrequest", Name: "seat_changes_total",
		Help: "Seat pods created (result=created) and removed (result=removed) for ProvisioningRequests, by the request's namespace and class.",
	}, []string{bmetrics.LabelNamespace, bmetrics.LabelClass, bmetrics.LabelResult})
)

func init() {
	ctrlmetrics.Registry.MustRegister(Collectors()...)
}

// Collectors are the controller's metrics, for the metrics reference.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{conditionsSet, seatsChanged}
}
