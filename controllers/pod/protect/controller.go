// Package protect shields running pods from Karpenter's voluntary disruption: members of gangs
// with spec.disruption.protect, and pods of Deployments annotated scheduling.berth.dev/protect,
// get karpenter.sh/do-not-disrupt while they run, and lose it when they finish or opt out.
package protect

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/index"
)

// Name is the controller's name in logs and metrics.
const Name = "pod.protect"

// Field indexes this controller registers (names are per package: each index is registered
// once per informer).
const (
	// indexPodReplicaSet indexes pods by the name of their controlling ReplicaSet.
	indexPodReplicaSet = "protect.podReplicaSet"
	// indexReplicaSetDeployment indexes ReplicaSets by the name of their controlling Deployment.
	indexReplicaSetDeployment = "protect.replicaSetDeployment"
)

var (
	replicaSetGVK = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")
	deploymentGVK = appsv1.SchemeGroupVersion.WithKind("Deployment")
)

// Reconciler keeps karpenter.sh/do-not-disrupt on protected pods.
type Reconciler struct {
	Client client.Client
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=replicasets;deployments,verbs=get;list;watch

// Reconcile brings one pod's protection annotations to what its gang and Deployment want, with a
// patch only when they differ. Pods being deleted are left alone.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pod corev1.Pod
	if err := r.Client.Get(ctx, req.NamespacedName, &pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pod.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	want := false
	if active(&pod) {
		gang, err := r.gangOf(ctx, &pod)
		if err != nil {
			return reconcile.Result{}, err
		}
		optIn := false
		if !gangProtects(gang) {
			if optIn, err = r.deploymentOptsIn(ctx, &pod); err != nil {
				return reconcile.Result{}, err
			}
		}
		want = wantProtected(&pod, gang, optIn)
	}
	annotations, changed := desiredAnnotations(pod.Annotations, want)
	if !changed {
		return reconcile.Result{}, nil
	}
	stored := pod.DeepCopy()
	pod.Annotations = annotations
	if err := r.Client.Patch(ctx, &pod, client.MergeFrom(stored)); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("patching protection of pod %s: %w", req.NamespacedName, err)
	}
	return reconcile.Result{}, nil
}

// gangOf is the pod's PodGroup; nil when it is in no gang or the PodGroup does not exist.
func (r *Reconciler) gangOf(ctx context.Context, pod *corev1.Pod) (*berthv1alpha1.PodGroup, error) {
	name := pod.Labels[berthv1alpha1.PodGroupLabel]
	if name == "" {
		return nil, nil
	}
	var pg berthv1alpha1.PodGroup
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, &pg); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading PodGroup %s/%s of pod %s: %w", pod.Namespace, name, pod.Name, err)
	}
	return &pg, nil
}

// deploymentOptsIn reports whether the Deployment owning the pod's ReplicaSet carries
// ProtectAnnotation "true". Both are read as metadata only.
func (r *Reconciler) deploymentOptsIn(ctx context.Context, pod *corev1.Pod) (bool, error) {
	rs, err := r.controllerOf(ctx, pod, replicaSetGVK)
	if rs == nil || err != nil {
		return false, err
	}
	d, err := r.controllerOf(ctx, rs, deploymentGVK)
	if d == nil || err != nil {
		return false, err
	}
	return d.GetAnnotations()[berthv1alpha1.ProtectAnnotation] == "true", nil
}

// controllerOf reads the metadata of o's controller of kind gvk in o's namespace; nil when o
// has no such controller or it is gone.
func (r *Reconciler) controllerOf(ctx context.Context, o client.Object, gvk schema.GroupVersionKind) (client.Object, error) {
	name := controllerName(o, gvk)
	if name == "" {
		return nil, nil
	}
	owner := metadataOf(gvk)
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: name}, owner); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s %s/%s of %s: %w", gvk.Kind, o.GetNamespace(), name, o.GetName(), err)
	}
	return owner, nil
}

// metadataOf is an empty metadata-only object of a kind, for the metadata informers.
func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	return m
}

// controllerName is the name of obj's controller when it is of kind gvk, else "".
func controllerName(obj metav1.Object, gvk schema.GroupVersionKind) string {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != gvk.Kind || ref.APIVersion != gvk.GroupVersion().String() {
		return ""
	}
	return ref.Name
}

// relevant reports whether a pod can need protection or carries berth's: it is a gang member,
// is controlled by a ReplicaSet, or has berth's marker.
func relevant(o client.Object) bool {
	if o.GetLabels()[berthv1alpha1.PodGroupLabel] != "" || o.GetAnnotations()[berthv1alpha1.ProtectedByAnnotation] != "" {
		return true
	}
	return controllerName(o, replicaSetGVK) != ""
}

// podChanged reports whether an update touched what protection depends on.
func podChanged(oldPod, newPod *corev1.Pod) bool {
	return oldPod.Spec.NodeName != newPod.Spec.NodeName || oldPod.Status.Phase != newPod.Status.Phase ||
		!equality.Semantic.DeepEqual(oldPod.Labels, newPod.Labels) ||
		!equality.Semantic.DeepEqual(oldPod.Annotations, newPod.Annotations) ||
		!equality.Semantic.DeepEqual(oldPod.OwnerReferences, newPod.OwnerReferences)
}

// SetupWithManager indexes pods by ReplicaSet and ReplicaSets by Deployment, and watches pods,
// PodGroups (mapped to their members) and, as metadata only, ReplicaSets and Deployments
// (mapped to their pods).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexPodReplicaSet, func(o client.Object) []string {
		return nonEmpty(controllerName(o, replicaSetGVK))
	}); err != nil {
		return fmt.Errorf("indexing pods by ReplicaSet: %w", err)
	}
	if err := idx.IndexField(ctx, metadataOf(replicaSetGVK), indexReplicaSetDeployment, func(o client.Object) []string {
		return nonEmpty(controllerName(o, deploymentGVK))
	}); err != nil {
		return fmt.Errorf("indexing ReplicaSets by Deployment: %w", err)
	}
	pods := predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return relevant(e.Object) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(e event.GenericEvent) bool { return relevant(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*corev1.Pod)
			n, okNew := e.ObjectNew.(*corev1.Pod)
			return okOld && okNew && (relevant(o) || relevant(n)) && podChanged(o, n)
		},
	}
	deployments := predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool {
			return e.Object.GetAnnotations()[berthv1alpha1.ProtectAnnotation] != ""
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			return e.Object.GetAnnotations()[berthv1alpha1.ProtectAnnotation] != ""
		},
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetAnnotations()[berthv1alpha1.ProtectAnnotation] != e.ObjectNew.GetAnnotations()[berthv1alpha1.ProtectAnnotation]
		},
	}
	replicaSets := predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return controllerName(e.Object, deploymentGVK) != "" },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return controllerName(e.ObjectOld, deploymentGVK) != controllerName(e.ObjectNew, deploymentGVK)
		},
	}
	gangs := predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*berthv1alpha1.PodGroup)
			n, okNew := e.ObjectNew.(*berthv1alpha1.PodGroup)
			return okOld && okNew && (o.Status.Phase != n.Status.Phase || !equality.Semantic.DeepEqual(o.Spec.Disruption, n.Spec.Disruption))
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&corev1.Pod{}, builder.WithPredicates(pods)).
		Watches(&berthv1alpha1.PodGroup{}, handler.EnqueueRequestsFromMapFunc(r.membersOf), builder.WithPredicates(gangs)).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(r.podsOfDeployment),
			builder.OnlyMetadata, builder.WithPredicates(deployments)).
		Watches(&appsv1.ReplicaSet{}, handler.EnqueueRequestsFromMapFunc(r.podsOfReplicaSet),
			builder.OnlyMetadata, builder.WithPredicates(replicaSets)).
		Complete(r)
}

// membersOf maps a PodGroup to its member pods.
func (r *Reconciler) membersOf(ctx context.Context, o client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, index.Members(o.GetNamespace(), o.GetName())...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing members", "podgroup", client.ObjectKeyFromObject(o))
		return nil
	}
	return requests(pods.Items)
}

// podsOfDeployment maps a Deployment to the pods of its ReplicaSets.
func (r *Reconciler) podsOfDeployment(ctx context.Context, o client.Object) []reconcile.Request {
	rss := &metav1.PartialObjectMetadataList{}
	rss.SetGroupVersionKind(replicaSetGVK.GroupVersion().WithKind("ReplicaSetList"))
	if err := r.Client.List(ctx, rss, client.InNamespace(o.GetNamespace()),
		client.MatchingFields{indexReplicaSetDeployment: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing ReplicaSets", "deployment", client.ObjectKeyFromObject(o))
		return nil
	}
	var out []reconcile.Request
	for i := range rss.Items {
		out = append(out, r.podsOfReplicaSet(ctx, &rss.Items[i])...)
	}
	return out
}

// podsOfReplicaSet maps a ReplicaSet to its pods.
func (r *Reconciler) podsOfReplicaSet(ctx context.Context, o client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(o.GetNamespace()),
		client.MatchingFields{indexPodReplicaSet: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing pods", "replicaset", client.ObjectKeyFromObject(o))
		return nil
	}
	return requests(pods.Items)
}

func requests(pods []corev1.Pod) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(pods))
	for i := range pods {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&pods[i])})
	}
	return out
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
