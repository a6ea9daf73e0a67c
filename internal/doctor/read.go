package doctor

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/berth-dev/berth/scaler/targets"
)

// Optional kinds, read only when the cluster serves them.
var (
	scaledObjectGVK = targets.ScaledObjectGVK
	nodePoolGVK     = schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1", Kind: "NodePool"}
	gangJobGVKs     = []schema.GroupVersionKind{
		{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"},
		{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"},
	}
)

// Read lists what the checks need from the cluster c (namespace "" = all namespaces). Kinds
// the cluster does not serve (KEDA, Karpenter, JobSet, Kubeflow) are left empty; kinds the
// caller may not list are recorded in Snapshot.Unread, and the checks that need them are
// skipped with a note. Any other failure to read is an error: nothing was checked.
func Read(ctx context.Context, c client.Client, namespace string) (Snapshot, error) {
	s := Snapshot{Unread: map[string]string{}}
	in := []client.ListOption{client.InNamespace(namespace)}
	var errs []error
	// list reads one kind; a Forbidden list marks it unread.
	list := func(kind string, l client.ObjectList, opts ...client.ListOption) bool {
		err := c.List(ctx, l, opts...)
		switch {
		case err == nil:
			return true
		case apierrors.IsForbidden(err):
			s.Unread[kind] = "forbidden"
		case meta.IsNoMatchError(err):
		default:
			errs = append(errs, fmt.Errorf("listing %s: %w", kind, err))
		}
		return false
	}
	var hpas autoscalingv2.HorizontalPodAutoscalerList
	if list(KindHPA, &hpas, in...) {
		s.HPAs = hpas.Items
	}
	var jobs batchv1.JobList
	if list(KindJob, &jobs, in...) {
		s.Jobs = jobs.Items
	}
	var deps appsv1.DeploymentList
	if list(KindDeployment, &deps, in...) {
		s.Deployments = deps.Items
	}
	if served(c, nodePoolGVK) {
		var nps karpv1.NodePoolList
		if list(KindNodePool, &nps) {
			s.NodePools = nps.Items
		}
	}
	if served(c, scaledObjectGVK) {
		l := unstructuredList(scaledObjectGVK)
		if list(KindScaledObject, l, in...) {
			s.ScaledObjects = l.Items
		}
	}
	for _, gvk := range gangJobGVKs {
		if !served(c, gvk) {
			continue
		}
		l := unstructuredList(gvk)
		if list(gvk.Kind, l, in...) {
			s.GangJobs = append(s.GangJobs, l.Items...)
		}
	}
	return s, errors.Join(errs...)
}

// unstructuredList is an empty list of gvk's objects.
func unstructuredList(gvk schema.GroupVersionKind) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	return l
}

func served(c client.Client, gvk schema.GroupVersionKind) bool {
	_, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	return err == nil
}
