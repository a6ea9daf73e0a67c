// Package owners walks controller references from a gang member up to its topmost workload
// (a Job under a JobSet under a TrainJob; a worker StatefulSet under a leader pod under a
// StatefulSet under a LeaderWorkerSet), reading each object as unstructured with plain GETs.
// The status controller judges a gang by that workload; the adapter owns the PodGroups it
// creates by it.
package owners

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// The kinds a chain is read through.
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get
// +kubebuilder:rbac:groups=apps,resources=statefulsets;replicasets;deployments,verbs=get
// +kubebuilder:rbac:groups=jobset.x-k8s.io,resources=jobsets,verbs=get
// +kubebuilder:rbac:groups=leaderworkerset.x-k8s.io,resources=leaderworkersets,verbs=get
// +kubebuilder:rbac:groups=kubeflow.org,resources=pytorchjobs;tfjobs;mpijobs;jaxjobs;xgboostjobs;paddlejobs,verbs=get
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs,verbs=get
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters;rayjobs,verbs=get

// MaxDepth bounds the walk up a controller chain (a cycle would be an API bug).
const MaxDepth = 8

// Get reads a workload object; nil (no error) when it is gone, has another UID, or is of a kind
// the cluster does not serve or the reader may not read.
func Get(ctx context.Context, reader client.Reader, namespace string, ref berthv1alpha1.WorkloadReference) (*unstructured.Unstructured, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, nil //nolint:nilerr // a malformed owner reference names nothing berth can read
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gv.WithKind(ref.Kind))
	err = reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, obj)
	switch {
	case err == nil && obj.GetUID() == ref.UID:
		return obj, nil
	case err == nil, apierrors.IsNotFound(err), apierrors.IsForbidden(err), meta.IsNoMatchError(err):
		return nil, nil
	}
	return nil, fmt.Errorf("reading %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
}

// Tops resolves the topmost controller of owner references. Controller chains never change
// for a given owner UID, so the top of each chain is remembered.
type Tops struct {
	reader client.Reader
	mu     sync.Mutex
	top    map[types.UID]berthv1alpha1.WorkloadReference
}

// NewTops resolves chains with reader (uncached GETs: an API reader).
func NewTops(reader client.Reader) *Tops {
	return &Tops{reader: reader, top: map[types.UID]berthv1alpha1.WorkloadReference{}}
}

// Reader is what Tops reads with.
func (t *Tops) Reader() client.Reader { return t.reader }

// Of walks controller references up from ref to the topmost controller it can read; a chain
// stops at an object that is gone or of a kind it may not read.
func (t *Tops) Of(ctx context.Context, namespace string, ref metav1.OwnerReference) (berthv1alpha1.WorkloadReference, error) {
	t.mu.Lock()
	top, ok := t.top[ref.UID]
	t.mu.Unlock()
	if ok {
		return top, nil
	}
	cur := berthv1alpha1.WorkloadReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID}
	for range MaxDepth {
		obj, err := Get(ctx, t.reader, namespace, cur)
		if err != nil {
			return cur, err
		}
		if obj == nil {
			break // gone, or a kind berth does not read: the chain stops here
		}
		up := metav1.GetControllerOf(obj)
		if up == nil {
			break
		}
		cur = berthv1alpha1.WorkloadReference{APIVersion: up.APIVersion, Kind: up.Kind, Name: up.Name, UID: up.UID}
	}
	t.mu.Lock()
	t.top[ref.UID] = cur
	t.mu.Unlock()
	return cur, nil
}
