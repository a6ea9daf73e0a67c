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

const nativeGangFix = "for gangs that need new nodes use berth's PodGroup (scheduling.berth.dev/v1alpha1): it holds the members and gets the whole gang's capacity from Karpenter in one batch (docs/native-gangs.md)"

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
			Problem: fmt.Sprintf("native gang of at least %d pods not placed (%s: %s); nothing provisions whole gangs for kube-scheduler's gang cycle: Karpenter launches nodes for Unschedulable pods one by one, and for none when the cycle fails with %s",
				g.MinCount, g.Unplaced.Reason, g.Unplaced.Message, "SchedulerError"),
			Fix: nativeGangFix})
	}
	return out
}
