// Package guard is berth's consolidation guard. Karpenter's WhenEmptyOrUnderutilized
// consolidation evicts running pods to repack underutilized nodes; on GPU nodes that kills
// training jobs and loses their progress. The guard finds GPU NodePools that allow it and, per
// mode, adds a disruption budget that blocks Underutilized consolidation (enforce), switches
// them to WhenEmpty (when-empty), or only reports them (audit).
package guard

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
)

// Name is the controller's name in logs and metrics.
const Name = "nodepool.guard"

// conflictRetry is how soon a reconcile that lost an optimistic-lock race runs again.
const conflictRetry = 100 * time.Millisecond

// Reconciler guards the consolidation of GPU NodePools.
type Reconciler struct {
	Client   client.Client
	Recorder *events.Recorder
	// DefaultMode applies to NodePools without ConsolidationGuardAnnotation; enforce when empty.
	DefaultMode Mode
}

// +kubebuilder:rbac:groups=karpenter.sh,resources=nodepools,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile guards one NodePool:
//
//  1. Read it and resolve its mode (annotation, else the default).
//  2. Plan (pure): the spec change, if any, and the status to record.
//  3. Patch spec and status annotation together, only on a semantic difference, with an
//     optimistic lock; a conflict requeues.
//  4. Report: Events and metrics, once per change of the recorded status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var np karpv1.NodePool
	if err := r.Client.Get(ctx, req.NamespacedName, &np); err != nil {
		if apierrors.IsNotFound(err) {
			unsafeConsolidation.DeleteLabelValues(req.Name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading NodePool %s: %w", req.Name, err)
	}
	if !np.DeletionTimestamp.IsZero() {
		unsafeConsolidation.DeleteLabelValues(np.Name)
		return reconcile.Result{}, nil
	}
	def := r.DefaultMode
	if def == "" {
		def = ModeEnforce
	}
	mode, invalid := resolveMode(&np, def)
	wanted := mode
	mode, gitOps := gitOpsMode(&np, mode)
	patched, status := plan(&np, mode)
	status = withGitOpsNote(withModeNote(status, invalid), gitOps, wanted)

	stored := np.DeepCopy()
	next := np.DeepCopy()
	if patched != nil {
		next = patched
	}
	setStatus(next, status)
	if !equality.Semantic.DeepEqual(stored, next) {
		patch := client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})
		if err := r.Client.Patch(ctx, next, patch); err != nil {
			if apierrors.IsConflict(err) {
				return reconcile.Result{RequeueAfter: conflictRetry}, nil
			}
			return reconcile.Result{}, fmt.Errorf("patching NodePool %s: %w", np.Name, err)
		}
	}
	r.report(stored, next, mode, invalid, patched != nil)
	return reconcile.Result{}, nil
}

// setStatus records status in the guard's status annotation; "" removes it.
func setStatus(np *karpv1.NodePool, status string) {
	if status == "" {
		delete(np.Annotations, berthv1alpha1.ConsolidationGuardStatusAnnotation)
		return
	}
	if np.Annotations == nil {
		np.Annotations = map[string]string{}
	}
	np.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation] = status
}

// report emits the Events and metrics for a NodePool that went from before to after.
func (r *Reconciler) report(before, after *karpv1.NodePool, mode Mode, invalidMode string, changed bool) {
	status := after.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation]
	if status == "" {
		unsafeConsolidation.DeleteLabelValues(after.Name)
		return
	}
	unsafe := IsUnsafe(after)
	if unsafe {
		unsafeConsolidation.WithLabelValues(after.Name).Set(1)
	} else {
		unsafeConsolidation.WithLabelValues(after.Name).Set(0)
	}
	if status == before.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation] {
		return
	}
	if problems := annotationProblems(after, mode, invalidMode); len(problems) > 0 {
		r.Recorder.Warning(after, events.ReasonInvalidConsolidationGuard, strings.Join(problems, "; "))
	}
	switch {
	case changed && mode == ModeWhenEmpty:
		guardActions.WithLabelValues(actionSwitchedWhenEmpty).Inc()
		r.Recorder.Normal(after, events.ReasonConsolidationGuarded, status)
	case changed:
		guardActions.WithLabelValues(actionBudgetAdded).Inc()
		r.Recorder.Normal(after, events.ReasonConsolidationGuarded, status)
	case unsafe:
		guardActions.WithLabelValues(actionAudited).Inc()
		_, why := IsGPUPool(after)
		r.Recorder.Warning(after, events.ReasonUnsafeConsolidation, fmt.Sprintf(
			"GPU NodePool (%s) lets Karpenter consolidate underutilized nodes, evicting running GPU pods: %s. "+
				"Set %s to %s or %s, or add a budget {nodes: \"0\", reasons: [Underutilized]}",
			why, status, berthv1alpha1.ConsolidationGuardAnnotation, ModeEnforce, ModeWhenEmpty))
	}
}

// SetupWithManager watches NodePools; status-only updates (Karpenter's resource counts) are
// ignored.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&karpv1.NodePool{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Complete(r)
}
