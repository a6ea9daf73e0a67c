package agent

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// ConditionType is the node condition the agent owns
// (berthv1alpha1.NodeConditionAcceleratedHardwareReady). Karpenter's AWS node-repair policies
// and berth's gang admission both read it.
const ConditionType = corev1.NodeConditionType(berthv1alpha1.NodeConditionAcceleratedHardwareReady)

// faultReasons maps a fault kind to the condition reason it gives.
var faultReasons = map[string]string{
	FaultXID: berthv1alpha1.ReasonXidCriticalError, FaultECCDoubleBit: berthv1alpha1.ReasonEccDoubleBitErrors,
	FaultRetiredPagesPending: berthv1alpha1.ReasonRetiredPagesPending, FaultRowRemapPending: berthv1alpha1.ReasonRowRemapPending,
	FaultRowRemapFailed: berthv1alpha1.ReasonRowRemapFailed, FaultThermalThrottle: berthv1alpha1.ReasonThermalThrottle,
	FaultPowerBrake: berthv1alpha1.ReasonPowerBrake, FaultFellOffBus: berthv1alpha1.ReasonGPULost,
}

// Hysteresis keeps the condition from flapping: it turns False on the first faulty probe, and
// back to True only after HealthyProbes consecutive clean probes spanning at least HealthyFor.
type Hysteresis struct {
	HealthyProbes int
	HealthyFor    time.Duration
}

// DefaultHysteresis: 3 clean probes over at least 2 minutes.
var DefaultHysteresis = Hysteresis{HealthyProbes: 3, HealthyFor: 2 * time.Minute}

// State is the agent's health verdict and what it needs to remember between probes.
type State struct {
	Healthy     bool
	Faults      []Fault
	CleanProbes int
	CleanSince  time.Time
	known       bool
}

// Evaluate folds one probe's faults into the state. Pure: no I/O, no clock.
func Evaluate(prev State, faults []Fault, now time.Time, h Hysteresis) State {
	if len(faults) > 0 {
		return State{Healthy: false, Faults: faults, known: true}
	}
	if !prev.known || prev.Healthy {
		return State{Healthy: true, known: true}
	}
	next := State{Healthy: false, known: true, CleanProbes: prev.CleanProbes + 1, CleanSince: prev.CleanSince}
	if next.CleanSince.IsZero() {
		next.CleanSince = now
	}
	if next.CleanProbes >= h.HealthyProbes && now.Sub(next.CleanSince) >= h.HealthyFor {
		return State{Healthy: true, known: true}
	}
	return next
}

// NodeCondition renders the state as the node condition (status, reason, message).
func NodeCondition(st State, inv Inventory, h Hysteresis) (corev1.ConditionStatus, string, string) {
	switch {
	case len(inv.GPUs) == 0:
		return corev1.ConditionFalse, berthv1alpha1.ReasonNoGPUs, "NVML reports no GPUs on this node"
	case st.Healthy:
		return corev1.ConditionTrue, berthv1alpha1.ReasonGPUsHealthy, fmt.Sprintf("%d GPUs healthy (%s, driver %s)", len(inv.GPUs), inv.GPUs[0].Name, inv.DriverVersion)
	case len(st.Faults) > 0:
		parts := make([]string, 0, len(st.Faults))
		for _, f := range st.Faults {
			parts = append(parts, f.String())
		}
		return corev1.ConditionFalse, faultReasons[st.Faults[0].Kind], strings.Join(parts, "; ")
	default:
		return corev1.ConditionFalse, berthv1alpha1.ReasonRecovering, fmt.Sprintf("no faults for %d probes since %s; healthy after %d clean probes over %s",
			st.CleanProbes, st.CleanSince.UTC().Format(time.RFC3339), h.HealthyProbes, h.HealthyFor)
	}
}
