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
	"github.com/berth-dev/berth/internal/index"
)

// Name is the controller's name in logs and metrics.
const Name = "podgroup.status"

// conflictRetry is how soon a reconcile that lost an optimistic-lock race runs again.
const conflictRetry = 100 * time.Millisecond

// workloadRecheck is how soon a gang whose workload is active but has no live member is looked
// at again: the workload may finish without another pod event.
const workloadRecheck = 15 * time.Second

// Reconciler keeps PodGroup status in step with the gang's member pods and their workload.
// Build it with New.
type Reconciler struct {
	client    client.Client
	clock     clock.PassiveClock
	recorder  *events.Recorder
	workloads *workloads
}

// New builds the status controller; apiReader reads the members' workloads (uncached).
func New(c client.Client, apiReader client.Reader, clk clock.PassiveClock, rec *events.Recorder) *Reconciler {
	return &Reconciler{client: c, clock: clk, recorder: rec, workloads: newWorkloads(apiReader)}
}

// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile recomputes one PodGroup's status from its member pods and their workload, and
// writes it when it changed semantically. A conflict requeues.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pg berthv1alpha1.PodGroup
	if err := r.client.Get(ctx, req.NamespacedName, &pg); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var pods corev1.PodList // the cache's own pods: read only
	if err := r.client.List(ctx, &pods, index.Members(pg.Namespace, pg.Name)...); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing members of %s: %w", req.NamespacedName, err)
	}
	wl, state, err := r.workloads.of(ctx, pg.Namespace, pods.Items)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("reading the workload of %s: %w", req.NamespacedName, err)
	}
	var next reconcile.Result
	status := computeStatus(&pg, pods.Items, wl, state, metav1.NewTime(r.clock.Now()))
	if m := status.Members; state == WorkloadActive && m.Total == m.Succeeded+m.Failed {
		next.RequeueAfter = workloadRecheck
	}
	if equality.Semantic.DeepEqual(status, pg.Status) {
		return next, nil
	}
	before := pg.Status.Phase
	pg.Status = status
	// A full status update (optimistic lock on resourceVersion): merge patches would drop the
	// zero-valued member counts, which the schema requires.
	if err := r.client.Status().Update(ctx, &pg); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return reconcile.Result{}, fmt.Errorf("patching status of %s: %w", req.NamespacedName, err)
	}
	r.recordPhaseChange(&pg, before)
	return next, nil
}

func (r *Reconciler) recordPhaseChange(pg *berthv1alpha1.PodGroup, before berthv1alpha1.PodGroupPhase) {
	if pg.Status.Phase == before {
		return
	}
	m := pg.Status.Members
	switch pg.Status.Phase {
	case berthv1alpha1.PodGroupRunning:
		r.recorder.Normal(pg, events.ReasonGangRunning, fmt.Sprintf("%d of %d members running", m.Running, pg.Spec.MinMember))
	case berthv1alpha1.PodGroupSucceeded:
		r.recorder.Normal(pg, events.ReasonGangSucceeded, fmt.Sprintf("%d of %d members succeeded", m.Succeeded, pg.Spec.MinMember))
	case berthv1alpha1.PodGroupFailed:
		r.recorder.Warning(pg, events.ReasonGangFailed, fmt.Sprintf("%d members failed; minMember %d can no longer be reached", m.Failed, pg.Spec.MinMember))
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
