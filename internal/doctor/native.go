package doctor

import (
	"fmt"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kubernetes' native gangs (feature gate GenericWorkload, beta and off by default in 1.37):
// scheduling.k8s.io/v1beta1 PodGroups that kube-scheduler places all or nothing, and that
// nothing provisions capacity for.

// CheckNativeGangWithoutCapacity is the check's name.
const CheckNativeGangWithoutCapacity = "native-gang-without-capacity"

// KindNativePodGroup is the kind the check reads (Kubernetes' PodGroup, not berth's).
const KindNativePodGroup = "PodGroup.scheduling.k8s.io"

// nativePodGroupGVK is the native PodGroup's API; served only where GenericWorkload is on.
var nativePodGroupGVK = schedulingv1beta1.SchemeGroupVersion.WithKind("PodGroup")

// podGroupInitiallyScheduled is kube-scheduler's condition on a native PodGroup: False while
// its gang cycle cannot place the group.
const podGroupInitiallyScheduled = "PodGroupInitiallyScheduled"

// NativeGang is a native PodGroup with a gang policy, as the check needs it.
type NativeGang struct {
	Namespace, Name string
	// MinCount is schedulingPolicy.gang.minCount.
	MinCount int32
	// Unplaced is kube-scheduler's PodGroupInitiallyScheduled=False condition (nil when the
	// group is placed or not yet tried).
	Unplaced *metav1.Condition
}

// nativeGangs keeps the gang PodGroups of a list.
func nativeGangs(groups []schedulingv1beta1.PodGroup) []NativeGang {
	var out []NativeGang
	for _, pg := range groups {
		if pg.Spec.SchedulingPolicy.Gang == nil {
			continue
		}
		g := NativeGang{Namespace: pg.Namespace, Name: pg.Name, MinCount: pg.Spec.SchedulingPolicy.Gang.MinCount}
		if c := meta.FindStatusCondition(pg.Status.Conditions, podGroupInitiallyScheduled); c != nil && c.Status == metav1.ConditionFalse {
			g.Unplaced = c.DeepCopy()
		}
		out = append(out, g)
	}
	return out
}

const nativeGangFix = "run berth's controller with provisioning on (it serves native gangs when scheduling.k8s.io/v1beta1 is served at its start): it asks Karpenter for the whole gang in one batch — the PodGroup's Events say how far it got (CapacityRequested, CapacityHandedOver, CapacityNotProvisioned); for members held until all fit, replacement and schedule timeouts use berth's PodGroup (docs/native-gangs.md)"

// nativeGangsWithoutCapacity finds native gangs kube-scheduler cannot place: Karpenter
// provisions for pods kube-scheduler reports Unschedulable, one pod at a time, never for a gang
// as a whole, and for none when the gang cycle fails with an error.
func nativeGangsWithoutCapacity(s Snapshot) []Finding {
	var out []Finding
	for _, g := range s.NativeGangs {
		if g.Unplaced == nil {
			continue
		}
		out = append(out, Finding{Check: CheckNativeGangWithoutCapacity, Object: obj(KindNativePodGroup, g.Namespace, g.Name),
			Problem: fmt.Sprintf("native gang of at least %d pods not placed (%s: %s); upstream provisions no whole gangs: Karpenter launches nodes for Unschedulable pods, none when the gang cycle fails with SchedulerError (no candidate node), and never withdraws a batch that came up short",
				g.MinCount, g.Unplaced.Reason, g.Unplaced.Message),
			Fix: nativeGangFix})
	}
	return out
}
