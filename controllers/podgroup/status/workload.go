package status

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// The workloads whose members berth follows, read as unstructured objects: the controller
// chain from a member pod up to its topmost controller (a Job under a JobSet under a TrainJob;
// a worker StatefulSet under a leader pod under a StatefulSet under a LeaderWorkerSet) is
// walked with plain GETs, and the top's conditions say whether it finished.
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get
// +kubebuilder:rbac:groups=apps,resources=statefulsets;replicasets;deployments,verbs=get
// +kubebuilder:rbac:groups=jobset.x-k8s.io,resources=jobsets,verbs=get
// +kubebuilder:rbac:groups=leaderworkerset.x-k8s.io,resources=leaderworkersets,verbs=get
// +kubebuilder:rbac:groups=kubeflow.org,resources=pytorchjobs;tfjobs;mpijobs;jaxjobs;xgboostjobs;paddlejobs,verbs=get
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs,verbs=get
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters;rayjobs,verbs=get

// maxOwnerDepth bounds the walk up a controller chain (a cycle would be an API bug).
const maxOwnerDepth = 8

// workloads resolves and reads the workloads that own members. Controller chains never change
// for a given owner UID, so the top of each chain is remembered.
type workloads struct {
	reader client.Reader
	mu     sync.Mutex
	top    map[types.UID]berthv1alpha1.WorkloadReference
}

func newWorkloads(reader client.Reader) *workloads {
	return &workloads{reader: reader, top: map[types.UID]berthv1alpha1.WorkloadReference{}}
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
		top, err := w.topOf(ctx, namespace, *ref)
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

// topOf walks controller references up from ref to the topmost controller it can read.
func (w *workloads) topOf(ctx context.Context, namespace string, ref metav1.OwnerReference) (berthv1alpha1.WorkloadReference, error) {
	w.mu.Lock()
	top, ok := w.top[ref.UID]
	w.mu.Unlock()
	if ok {
		return top, nil
	}
	cur := berthv1alpha1.WorkloadReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID}
	for range maxOwnerDepth {
		obj, err := w.get(ctx, namespace, cur)
		if err != nil || obj == nil {
			break // gone, or a kind berth does not read: the chain stops here
		}
		up := metav1.GetControllerOf(obj)
		if up == nil {
			break
		}
		cur = berthv1alpha1.WorkloadReference{APIVersion: up.APIVersion, Kind: up.Kind, Name: up.Name, UID: up.UID}
	}
	w.mu.Lock()
	w.top[ref.UID] = cur
	w.mu.Unlock()
	return cur, nil
}

// get reads a workload object; nil (no error) when it is gone, has another UID, or is of a kind
// the cluster does not serve or berth may not read.
func (w *workloads) get(ctx context.Context, namespace string, ref berthv1alpha1.WorkloadReference) (*unstructured.Unstructured, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, nil //nolint:nilerr // a malformed owner reference names nothing berth can read
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gv.WithKind(ref.Kind))
	err = w.reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, obj)
	switch {
	case err == nil && obj.GetUID() == ref.UID:
		return obj, nil
	case err == nil, apierrors.IsNotFound(err), apierrors.IsForbidden(err), meta.IsNoMatchError(err):
		return nil, nil
	}
	return nil, fmt.Errorf("reading %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
}

// state reads whether the workload finished, from its conditions: Complete, Completed,
// Succeeded or SuccessCriteriaMet True is success; Failed or FailureTarget True is failure;
// anything else (running, suspended, restarting, no terminal condition at all as with
// LeaderWorkerSets and RayClusters) is active. A workload that is gone is WorkloadNone.
func (w *workloads) state(ctx context.Context, namespace string, ref berthv1alpha1.WorkloadReference) (WorkloadState, error) {
	obj, err := w.get(ctx, namespace, ref)
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
