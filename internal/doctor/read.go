package doctor

import (
	"context"
	"errors"
	"fmt"

	awsapis "github.com/aws/karpenter-provider-aws/pkg/apis"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scaler/targets"
)

// Optional kinds, read only when the cluster serves them.
var (
	scaledObjectGVK = targets.ScaledObjectGVK
	nodePoolGVK     = schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1", Kind: "NodePool"}
	ec2NodeClassGVK = schema.GroupVersionKind{Group: awsapis.Group, Version: "v1", Kind: KindEC2NodeClass}
	// resourceClaimTemplateGVK is DRA's (GA in Kubernetes 1.34).
	resourceClaimTemplateGVK = resourcev1.SchemeGroupVersion.WithKind("ResourceClaimTemplate")
	gangJobGVKs              = []schema.GroupVersionKind{
		{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"},
		{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"},
	}
)

// Read lists what the checks need from the cluster c (namespace "" = all namespaces). Kinds
// the cluster does not serve (KEDA, Karpenter, its node classes, DRA, JobSet, Kubeflow) are left
// empty; kinds the caller may not list are recorded in Snapshot.Unread, and the checks that need
// them are skipped with a note. Any other failure to read is an error: nothing was checked.
func Read(ctx context.Context, c client.Client, namespace string) (Snapshot, error) {
	r := &reader{ctx: ctx, c: c, s: Snapshot{Unread: map[string]string{}}, in: []client.ListOption{client.InNamespace(namespace)}}
	r.workloads()
	r.capacity()
	return r.s, errors.Join(r.errs...)
}

// reader fills a Snapshot, kind by kind.
type reader struct {
	ctx  context.Context
	c    client.Client
	s    Snapshot
	in   []client.ListOption // the namespace checked
	errs []error
}

// list reads one kind; a Forbidden list marks it unread, a kind not served is left empty.
func (r *reader) list(kind string, l client.ObjectList, opts ...client.ListOption) bool {
	err := r.c.List(r.ctx, l, opts...)
	switch {
	case err == nil:
		return true
	case apierrors.IsForbidden(err):
		r.s.Unread[kind] = "forbidden"
	case meta.IsNoMatchError(err):
	default:
		r.errs = append(r.errs, fmt.Errorf("listing %s: %w", kind, err))
	}
	return false
}

// workloads reads the namespace's autoscalers, Deployments, jobs and DRA claims.
func (r *reader) workloads() {
	var hpas autoscalingv2.HorizontalPodAutoscalerList
	if r.list(KindHPA, &hpas, r.in...) {
		r.s.HPAs = hpas.Items
	}
	var jobs batchv1.JobList
	if r.list(KindJob, &jobs, r.in...) {
		r.s.Jobs = jobs.Items
	}
	var deps appsv1.DeploymentList
	if r.list(KindDeployment, &deps, r.in...) {
		r.s.Deployments = deps.Items
	}
	if served(r.c, scaledObjectGVK) {
		l := unstructuredList(scaledObjectGVK)
		if r.list(KindScaledObject, l, r.in...) {
			r.s.ScaledObjects = l.Items
		}
	}
	for _, gvk := range gangJobGVKs {
		if !served(r.c, gvk) {
			continue
		}
		l := unstructuredList(gvk)
		if r.list(gvk.Kind, l, r.in...) {
			r.s.GangJobs = append(r.s.GangJobs, l.Items...)
		}
	}
	if served(r.c, lwsGVK) {
		l := unstructuredList(lwsGVK)
		if r.list(KindLWS, l, r.in...) {
			r.s.LeaderWorkerSets = l.Items
		}
	}
	if served(r.c, resourceClaimTemplateGVK) {
		var tmpls resourcev1.ResourceClaimTemplateList
		if r.list(KindResourceClaim, &tmpls, r.in...) {
			for _, t := range tmpls.Items {
				r.s.ResourceClaims = append(r.s.ResourceClaims, obj("ResourceClaimTemplate", t.Namespace, t.Name))
				requestedClasses(r.classRequests(), t.Spec.Spec, obj("ResourceClaimTemplate", t.Namespace, t.Name))
			}
		}
		var claims resourcev1.ResourceClaimList
		if r.list(KindResourceClaim, &claims, r.in...) {
			for _, rc := range claims.Items {
				if len(rc.OwnerReferences) == 0 { // claims made from a template are counted by it
					r.s.ResourceClaims = append(r.s.ResourceClaims, obj("ResourceClaim", rc.Namespace, rc.Name))
					requestedClasses(r.classRequests(), rc.Spec, obj("ResourceClaim", rc.Namespace, rc.Name))
				}
			}
		}
	}
}

// capacity reads what is cluster-wide whatever the namespace: NodePools, EC2NodeClasses, nodes
// and Karpenter's controller (it runs in its own namespace).
func (r *reader) capacity() {
	if served(r.c, nodePoolGVK) {
		var nps karpv1.NodePoolList
		if r.list(KindNodePool, &nps) {
			r.s.NodePools = nps.Items
		}
	}
	if served(r.c, ec2NodeClassGVK) {
		l := unstructuredList(ec2NodeClassGVK)
		if r.list(KindEC2NodeClass, l) {
			for _, u := range l.Items {
				var nc awsv1.EC2NodeClass
				if err := runtimeConvert(u.Object, &nc); err != nil {
					r.errs = append(r.errs, fmt.Errorf("reading EC2NodeClass %s: %w", u.GetName(), err))
					continue
				}
				r.s.NodeClasses = append(r.s.NodeClasses, nc)
			}
		}
	}
	var karp appsv1.DeploymentList
	if r.list(KindKarpenter, &karp, client.MatchingLabelsSelector{Selector: karpenterSelector}) {
		r.s.Karpenter = karp.Items
	}
	var nodes corev1.NodeList
	if r.list(KindNode, &nodes) {
		r.s.Nodes = nodes.Items
	}
	if served(r.c, resourceClaimTemplateGVK) {
		var slices resourcev1.ResourceSliceList
		if r.list(KindResourceSlice, &slices) {
			r.s.ResourceSlices = slices.Items
		}
		var classes resourcev1.DeviceClassList
		if r.list(KindDeviceClass, &classes) {
			r.s.DeviceClasses = classes.Items
		}
	}
	r.kueue()
	r.nativeGangs()
}

// nativeGangs reads whether native gang scheduling is on, and its gang PodGroups.
func (r *reader) nativeGangs() {
	if r.s.GenericWorkload = served(r.c, nativePodGroupGVK); !r.s.GenericWorkload {
		return
	}
	var groups schedulingv1beta1.PodGroupList
	if r.list(KindNativePodGroup, &groups, r.in...) {
		r.s.NativeGangs = nativeGangs(groups.Items)
	}
}

// kueue reads Kueue's provisioning admission checks, whether ProvisioningRequests are served,
// and whether Cluster Autoscaler runs (its chart's name label, in any namespace).
func (r *reader) kueue() {
	r.s.ProvisioningRequestAPI = served(r.c, provisioningRequestGVK)
	var checks, configs []unstructured.Unstructured
	for _, gvk := range admissionCheckGVKs {
		if served(r.c, gvk) {
			if l := unstructuredList(gvk); r.list(KindAdmissionCheck, l) {
				checks = l.Items
			}
			break
		}
	}
	for _, gvk := range provisioningConfigGVKs {
		if served(r.c, gvk) {
			if l := unstructuredList(gvk); r.list(KindAdmissionCheck, l) {
				configs = l.Items
			}
			break
		}
	}
	var queues []unstructured.Unstructured
	for _, gvk := range clusterQueueGVKs {
		if served(r.c, gvk) {
			if l := unstructuredList(gvk); r.list(KindAdmissionCheck, l) {
				queues = l.Items
			}
			break
		}
	}
	r.s.ProvisioningChecks = provisioningChecks(checks, configs, queues)
	if len(r.s.ProvisioningChecks) == 0 {
		return
	}
	for _, name := range []string{"cluster-autoscaler", "aws-cluster-autoscaler"} {
		var deps appsv1.DeploymentList
		if err := r.c.List(r.ctx, &deps, client.MatchingLabels{berthv1alpha1.NameLabel: name}); err == nil && len(deps.Items) > 0 {
			r.s.ClusterAutoscaler = true
		}
	}
}

// karpenterSelector selects Karpenter's controller Deployment, as its Helm chart labels it.
var karpenterSelector = labels.SelectorFromSet(labels.Set{berthv1alpha1.NameLabel: "karpenter"})

// unstructuredList is an empty list of gvk's objects.
func unstructuredList(gvk schema.GroupVersionKind) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	return l
}

// classRequests is the snapshot's DeviceClassRequests, made on first use.
func (r *reader) classRequests() map[string][]string {
	if r.s.DeviceClassRequests == nil {
		r.s.DeviceClassRequests = map[string][]string{}
	}
	return r.s.DeviceClassRequests
}

func served(c client.Client, gvk schema.GroupVersionKind) bool {
	_, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	return err == nil
}
