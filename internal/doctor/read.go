package doctor

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
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
// the cluster does not serve (KEDA, Karpenter, JobSet, Kubeflow) are skipped.
func Read(ctx context.Context, c client.Client, namespace string) (Snapshot, error) {
	var s Snapshot
	in := []client.ListOption{client.InNamespace(namespace)}
	var hpas autoscalingv2.HorizontalPodAutoscalerList
	if err := c.List(ctx, &hpas, in...); err != nil {
		return s, fmt.Errorf("listing HorizontalPodAutoscalers: %w", err)
	}
	s.HPAs = hpas.Items
	var jobs batchv1.JobList
	if err := c.List(ctx, &jobs, in...); err != nil {
		return s, fmt.Errorf("listing Jobs: %w", err)
	}
	s.Jobs = jobs.Items
	var deps appsv1.DeploymentList
	if err := c.List(ctx, &deps, in...); err != nil {
		return s, fmt.Errorf("listing Deployments: %w", err)
	}
	s.Deployments = deps.Items
	if served(c, nodePoolGVK) {
		var nps karpv1.NodePoolList
		if err := c.List(ctx, &nps); err != nil {
			return s, fmt.Errorf("listing NodePools: %w", err)
		}
		s.NodePools = nps.Items
	}
	var err error
	if s.ScaledObjects, err = listOptional(ctx, c, scaledObjectGVK, in); err != nil {
		return s, err
	}
	for _, gvk := range gangJobGVKs {
		items, err := listOptional(ctx, c, gvk, in)
		if err != nil {
			return s, err
		}
		s.GangJobs = append(s.GangJobs, items...)
	}
	return s, nil
}

func served(c client.Client, gvk schema.GroupVersionKind) bool {
	_, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	return err == nil
}

func listOptional(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, opts []client.ListOption) ([]unstructured.Unstructured, error) {
	if !served(c, gvk) {
		return nil, nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := c.List(ctx, list, opts...); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
	}
	return list.Items, nil
}
