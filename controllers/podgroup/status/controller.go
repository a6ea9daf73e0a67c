// Package status reconciles PodGroup status: it counts each gang's member pods by state and derives
// the gang's phase and conditions from them.
package status

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
)

// Name is the controller's name in logs and metrics.
const Name = "podgroup.status"

// conflictRetry is how soon a reconcile that lost an optimistic-lock race runs again.
const conflictRetry = 100 * time.Millisecond

// Reconciler keeps PodGroup status in step with the gang's member pods.
type Reconciler struct {
	Client   client.Client
	Clock    clock.PassiveClock
	Recorder *events.Recorder
}

// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile recomputes one PodGroup's status from its member pods and writes it when it
// changed semantically. A conflict requeues.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pg berthv1alpha1.PodGroup
	if err := r.Client.Get(ctx, req.NamespacedName, &pg); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(pg.Namespace),
		client.MatchingLabels{berthv1alpha1.PodGroupLabel: pg.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing members of %s: %w", req.NamespacedName, err)
	}
	status := computeStatus(&pg, pods.Items, metav1.NewTime(r.Clock.Now()))
	if equality.Semantic.DeepEqual(status, pg.Status) {
		return reconcile.Result{}, nil
	}
	before := pg.Status.Phase
	pg.Status = status
	// A full status update (optimistic lock on resourceVersion): merge patches would drop the
	// zero-valued member counts, which the schema requires.
	if err := r.Client.Status().Update(ctx, &pg); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return reconcile.Result{}, fmt.Errorf("patching status of %s: %w", req.NamespacedName, err)
	}
	r.recordPhaseChange(&pg, before)
	return reconcile.Result{}, nil
}

func (r *Reconciler) recordPhaseChange(pg *berthv1alpha1.PodGroup, before berthv1alpha1.PodGroupPhase) {
	if pg.Status.Phase == before {
		return
	}
	m := pg.Status.Members
	switch pg.Status.Phase {
	case berthv1alpha1.PodGroupRunning:
		r.Recorder.Normal(pg, events.ReasonGangRunning, fmt.Sprintf("%d of %d members running", m.Running, pg.Spec.MinMember))
	case berthv1alpha1.PodGroupSucceeded:
		r.Recorder.Normal(pg, events.ReasonGangSucceeded, fmt.Sprintf("%d of %d members succeeded", m.Succeeded, pg.Spec.MinMember))
	case berthv1alpha1.PodGroupFailed:
		r.Recorder.Warning(pg, events.ReasonGangFailed, fmt.Sprintf("%d members failed; minMember %d can no longer be reached", m.Failed, pg.Spec.MinMember))
	}
}

// SetupWithManager registers the controller: PodGroups, and pods that carry the pod-group label.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&berthv1alpha1.PodGroup{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToGroup)).
		Complete(r)
}

// podToGroup maps a member pod to its PodGroup.
func podToGroup(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[berthv1alpha1.PodGroupLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}}}
}
