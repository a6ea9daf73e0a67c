package agent

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// The agent's verdict, as two node conditions with different audiences:
//
//   - HardwareCondition (AcceleratedHardwareReady) is what Karpenter's AWS node-repair policies
//     act on: False replaces (or reboots) the node after 10 minutes, do-not-disrupt or not. It
//     turns False only for faults that need that — fatal Xids, double-bit ECC, a failed row
//     remap, a lost GPU, fewer GPUs than the instance has — with a reason the policies match
//     (NvidiaXID<n>Error), and stays False (latched) while the node runs: the hardware does not
//     heal, and a condition flapping back to True would restart Karpenter's toleration clock.
//   - DegradedCondition (GPUDegraded, berth's own: no repair policy reads it) reports what
//     recovers in place — throttling, power brake, pending page retirement or row remapping,
//     non-fatal Xids, NVML trouble — with hysteresis so it does not flap.

// ConditionType is the node condition Karpenter's repair policies read
// (berthv1alpha1.NodeConditionAcceleratedHardwareReady).
const ConditionType = corev1.NodeConditionType(berthv1alpha1.NodeConditionAcceleratedHardwareReady)

// DegradedConditionType is berth's own node condition for GPU trouble that needs no new node.
const DegradedConditionType = corev1.NodeConditionType(berthv1alpha1.NodeConditionGPUDegraded)

// degradedReasons maps a non-fatal fault kind to the GPUDegraded reason it gives.
var degradedReasons = map[string]string{
	FaultRetiredPagesPending: berthv1alpha1.ReasonRetiredPagesPending, FaultRowRemapPending: berthv1alpha1.ReasonRowRemapPending,
	FaultThermalThrottle: berthv1alpha1.ReasonThermalThrottle, FaultPowerBrake: berthv1alpha1.ReasonPowerBrake,
	FaultXID: berthv1alpha1.ReasonXidError,
}

// Hysteresis keeps GPUDegraded from flapping: it turns True on the first degraded probe, and
// back to False only after HealthyProbes consecutive clean probes spanning at least HealthyFor.
type Hysteresis struct {
	HealthyProbes int
	HealthyFor    time.Duration
}

// DefaultHysteresis: 3 clean probes over at least 2 minutes.
var DefaultHysteresis = Hysteresis{HealthyProbes: 3, HealthyFor: 2 * time.Minute}

// State is the agent's verdict and what it remembers between probes.
type State struct {
	// Fatal are the fatal faults seen since the agent started on this boot of the node,
	// latched.
	Fatal []Fault
	// Degraded are the last probe's other faults.
	Degraded []Fault
	// Recovering is true while degraded faults have cleared for fewer than the hysteresis'
	// probes or time.
	Recovering  bool
	CleanProbes int
	CleanSince  time.Time
}

// Healthy reports whether the node shows no fault at all.
func (s State) Healthy() bool { return len(s.Fatal) == 0 && len(s.Degraded) == 0 && !s.Recovering }

// Evaluate folds one probe's faults into the state. Pure: no I/O, no clock.
func Evaluate(prev State, faults []Fault, now time.Time, h Hysteresis) State {
	next := State{Fatal: prev.Fatal}
	for _, f := range faults {
		if f.Fatal {
			next.Fatal = latch(next.Fatal, f)
		} else {
			next.Degraded = append(next.Degraded, f)
		}
	}
	if len(next.Degraded) > 0 {
		return next
	}
	if len(prev.Degraded) == 0 && !prev.Recovering {
		return next
	}
	next.CleanProbes, next.CleanSince = prev.CleanProbes+1, prev.CleanSince
	if next.CleanSince.IsZero() {
		next.CleanSince = now
	}
	next.Recovering = next.CleanProbes < h.HealthyProbes || now.Sub(next.CleanSince) < h.HealthyFor
	if !next.Recovering {
		next.CleanProbes, next.CleanSince = 0, time.Time{}
	}
	return next
}

// latch adds f to the latched fatal faults unless the same fault (GPU, kind, Xid) is there.
func latch(fatal []Fault, f Fault) []Fault {
	for _, g := range fatal {
		if g.GPU == f.GPU && g.Kind == f.Kind && g.XID == f.XID {
			return fatal
		}
	}
	return append(append([]Fault(nil), fatal...), f)
}

// Condition is a node condition as the agent publishes it.
type Condition struct {
	Status  corev1.ConditionStatus
	Reason  string
	Message string
}

// HardwareCondition is AcceleratedHardwareReady for the state: False naming the fatal faults,
// with the reason of the one that most needs a new node, or True. ok is false when the agent
// cannot tell (no GPUs seen and no expected count): it then leaves the condition alone.
func HardwareCondition(st State, inv Inventory) (c Condition, ok bool) {
	if len(st.Fatal) > 0 {
		return Condition{Status: corev1.ConditionFalse, Reason: fatalReason(st.Fatal), Message: faultList(st.Fatal)}, true
	}
	if len(inv.GPUs) == 0 {
		return Condition{}, false
	}
	return Condition{Status: corev1.ConditionTrue, Reason: berthv1alpha1.ReasonGPUsHealthy,
		Message: fmt.Sprintf("%d GPUs without fatal faults (%s, driver %s)", len(inv.GPUs), inv.GPUs[0].Name, inv.DriverVersion)}, true
}

// replaceFirst orders fatal Xids by how surely the node must go: Karpenter replaces these
// families and reboots the others.
var replaceFirst = []uint64{79, 74, 64, 119, 120}

// fatalReason is the reason for a set of fatal faults: an Xid's NvidiaXID<n>Error, the
// replace family first; a GPU count mismatch otherwise.
func fatalReason(fatal []Fault) string {
	for _, x := range replaceFirst {
		for _, f := range fatal {
			if f.XID == x {
				return fmt.Sprintf(berthv1alpha1.ReasonNvidiaXIDErrorFormat, x)
			}
		}
	}
	for _, f := range fatal {
		if f.XID != 0 {
			return fmt.Sprintf(berthv1alpha1.ReasonNvidiaXIDErrorFormat, f.XID)
		}
	}
	return berthv1alpha1.ReasonNvidiaDeviceCountMismatch
}

// DegradedCondition is GPUDegraded for the state: True naming the degraded faults (or that they
// cleared only recently), False when there are none.
func DegradedCondition(st State, inv Inventory, h Hysteresis) Condition {
	switch {
	case len(st.Degraded) > 0:
		return Condition{Status: corev1.ConditionTrue, Reason: degradedReasons[st.Degraded[0].Kind], Message: faultList(st.Degraded)}
	case st.Recovering:
		return Condition{Status: corev1.ConditionTrue, Reason: berthv1alpha1.ReasonRecovering, Message: fmt.Sprintf(
			"no faults for %d probes since %s; not degraded after %d clean probes over %s",
			st.CleanProbes, st.CleanSince.UTC().Format(time.RFC3339), h.HealthyProbes, h.HealthyFor)}
	case len(inv.GPUs) == 0:
		return Condition{Status: corev1.ConditionTrue, Reason: berthv1alpha1.ReasonNoGPUs, Message: "NVML reports no GPUs on this node"}
	}
	return Condition{Status: corev1.ConditionFalse, Reason: berthv1alpha1.ReasonGPUsHealthy, Message: fmt.Sprintf("%d GPUs, none degraded", len(inv.GPUs))}
}

// NVMLCondition is GPUDegraded when NVML cannot be used: the agent cannot see the GPUs, which
// says nothing about the hardware, so AcceleratedHardwareReady is left alone.
func NVMLCondition(err error) Condition {
	return Condition{Status: corev1.ConditionTrue, Reason: berthv1alpha1.ReasonNVMLUnavailable, Message: err.Error()}
}

func faultList(fs []Fault) string {
	parts := make([]string, 0, len(fs))
	for _, f := range fs {
		parts = append(parts, f.String())
	}
	return strings.Join(parts, "; ")
}
