// Package adapter creates berth PodGroups for gangs declared the way other gang schedulers
// declare them (scheduler-plugins coscheduling, Volcano, KAI, Kueue pod groups), so those
// workloads get berth's admission without being rewritten. The pod-gate webhook labels such
// pods as berth members and records their source; this controller creates the same-named
// PodGroup when none exists, sized from what the source says.
package adapter

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/internal/events"
)

// Name is the controller's name in logs and metrics.
const Name = "podgroup.adapter"

// sourceGroups are the foreign PodGroup kinds whose spec.minMember sizes an adapted gang.
var sourceGroups = map[string]schema.GroupVersionKind{
	gate.SourceCoscheduling.Name: {Group: "scheduling.x-k8s.io", Version: "v1alpha1", Kind: "PodGroup"},
	gate.SourceVolcano.Name:      {Group: "scheduling.volcano.sh", Version: "v1beta1", Kind: "PodGroup"},
	gate.SourceKAI.Name:          {Group: "scheduling.run.ai", Version: "v2alpha2", Kind: "PodGroup"},
}

// Reconciler creates PodGroups for adapted pods.
type Reconciler struct {
	Client   client.Client
	Reader   client.Reader
	Recorder *events.Recorder
}

// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups,verbs=create
// +kubebuilder:rbac:groups=scheduling.x-k8s.io;scheduling.volcano.sh;scheduling.run.ai,resources=podgroups,verbs=get

// Reconcile handles one adapted pod.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pod corev1.Pod
	if err := r.Client.Get(ctx, req.NamespacedName, &pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	group := pod.Labels[berthv1alpha1.PodGroupLabel]
	source := pod.Annotations[berthv1alpha1.SourceAnnotation]
	if group == "" || source == "" || source == gate.SourceBerth.Name {
		return reconcile.Result{}, nil
	}
	var existing berthv1alpha1.PodGroup
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: group}, &existing)
	if err == nil {
		return reconcile.Result{}, nil
	}
	if !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("reading PodGroup %s: %w", group, err)
	}
	minMember, from, err := r.gangSize(ctx, &pod, source, group)
	if err != nil {
		return reconcile.Result{}, err
	}
	if minMember == 0 {
		r.Recorder.Warning(&pod, events.ReasonGangSizeUnknown, fmt.Sprintf(
			"pod is in %s gang %q but its size is unknown (no %s annotation and no %s PodGroup); create a berth PodGroup %q to admit it", source, group, berthv1alpha1.MinMemberAnnotation, source, group))
		return reconcile.Result{}, nil
	}
	pg := &berthv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: group, Namespace: pod.Namespace, Labels: map[string]string{berthv1alpha1.AdaptedFromLabel: source}},
		Spec:       berthv1alpha1.PodGroupSpec{MinMember: minMember},
	}
	if err := r.Client.Create(ctx, pg); err != nil && !apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, fmt.Errorf("creating PodGroup %s for %s gang: %w", group, source, err)
	}
	r.Recorder.Normal(pg, events.ReasonGangAdapted, fmt.Sprintf("created for %s gang %q with minMember %d (from %s)", source, group, minMember, from))
	return reconcile.Result{}, nil
}

// gangSize is minMember from the pod's annotation, else from the source's own PodGroup.
func (r *Reconciler) gangSize(ctx context.Context, pod *corev1.Pod, source, group string) (int32, string, error) {
	if n, err := strconv.ParseInt(pod.Annotations[berthv1alpha1.MinMemberAnnotation], 10, 32); err == nil && n > 0 {
		return int32(n), "the pod's count annotation", nil
	}
	gvk, ok := sourceGroups[source]
	if !ok {
		return 0, "", nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: group}, u); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return 0, "", nil
		}
		return 0, "", fmt.Errorf("reading %s PodGroup %s: %w", source, group, err)
	}
	n, found, err := unstructured.NestedInt64(u.Object, "spec", "minMember")
	if err != nil || !found || n < 1 {
		return 0, "", nil
	}
	return int32(n), fmt.Sprintf("%s PodGroup spec.minMember", source), nil
}

// SetupWithManager watches pods the webhook adapted.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	adapted := predicate.NewPredicateFuncs(func(o client.Object) bool {
		s := o.GetAnnotations()[berthv1alpha1.SourceAnnotation]
		return s != "" && s != gate.SourceBerth.Name
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&corev1.Pod{}, builder.WithPredicates(adapted)).
		Complete(r)
}
