package status

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/owners"
)

// The workloads whose members berth follows, read as unstructured objects: the controller
// chain from a member pod up to its topmost controller (a Job under a JobSet under a TrainJob;
// a worker StatefulSet under a leader pod under a StatefulSet under a LeaderWorkerSet) is
// walked with plain GETs (package owners, which holds the RBAC for them), and the top's
// conditions say whether it finished.

// workloads resolves and reads the workloads that own members (chains through owners.Tops).
type workloads struct {
	tops *owners.Tops
}

func newWorkloads(reader client.Reader) *workloads {
	return &workloads{tops: owners.NewTops(reader)}
}

// of returns the workload of the gang's members and its state: the topmost controller of the
// first member that has one. A member without a controller, or a chain berth may not read,
// gives WorkloadNone (the gang is judged by its members).
func (w *workloads) of(ctx context.Context, namespace string, members []corev1.Pod) (*berthv1alpha1.WorkloadReference, WorkloadState, error) {
	for i := range members {
		ref := metav1.GetControllerOf(&members[i])
		if ref == nil || members[i].DeletionTimestamp != nil {
			continue
		}
		top, err := w.tops.Of(ctx, namespace, *ref)
		if err != nil {
			return nil, WorkloadNone, err
		}
		state, err := w.state(ctx, namespace, top)
		if err != nil {
			return nil, WorkloadNone, err
		}
		if state == WorkloadNone {
			return nil, WorkloadNone, nil
		}
		return &top, state, nil
	}
	return nil, WorkloadNone, nil
}

// state reads whether the workload finished, from its conditions: Complete, Completed,
// Succeeded or SuccessCriteriaMet True is success; Failed or FailureTarget True is failure;
// anything else (running, suspended, restarting, no terminal condition at all as with
// LeaderWorkerSets and RayClusters) is active. A workload that is gone is WorkloadNone.
func (w *workloads) state(ctx context.Context, namespace string, ref berthv1alpha1.WorkloadReference) (WorkloadState, error) {
	obj, err := owners.Get(ctx, w.tops.Reader(), namespace, ref)
	if err != nil || obj == nil {
		return WorkloadNone, err
	}
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	state := WorkloadActive
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["status"] != string(metav1.ConditionTrue) {
			continue
		}
		switch m["type"] {
		case "Complete", "Completed", "Succeeded", "SuccessCriteriaMet":
			state = WorkloadSucceeded
		case "Failed", "FailureTarget":
			return WorkloadFailed, nil
		}
	}
	return state, nil
}
