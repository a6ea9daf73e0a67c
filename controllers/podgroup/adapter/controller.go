// Package adapter creates berth PodGroups for gangs declared the way other gang schedulers
// declare them (scheduler-plugins coscheduling, Volcano, KAI, Kueue pod groups), so those
// workloads get berth's admission without being rewritten. The pod-gate webhook labels such
// pods as berth members and records their source; this controller creates the same-named
// PodGroup when none exists, sized from what the source says. Each group of a LeaderWorkerSet
// (a leader and its workers) is one such gang, named after and owned by its leader pod.
//
// An adapted PodGroup belongs to one submission of its gang: it is owned by the members'
// controller (a Job, a Volcano Job…), or by the members themselves when they have none, so
// Kubernetes deletes it with them; and a PodGroup left from an earlier submission of the same
// name is replaced, never reused. PodGroups users create are never touched.
package adapter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/controllers/podgroup/owners"
	"github.com/berth-dev/berth/internal/events"
)

// Name is the controller's name in logs and metrics.
const Name = "podgroup.adapter"

// staleRetry is how soon a pod whose gang's stale PodGroup is being deleted is looked at again.
const staleRetry = time.Second

// leaderGoneRetry is how soon a LeaderWorkerSet worker whose leader is gone is looked at again.
const leaderGoneRetry = 5 * time.Second

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

	topsOnce sync.Once
	tops     *owners.Tops
}

// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups,verbs=create;patch;delete
// +kubebuilder:rbac:groups=scheduling.x-k8s.io;scheduling.volcano.sh;scheduling.run.ai,resources=podgroups,verbs=get
// +kubebuilder:rbac:groups=batch.volcano.sh,resources=jobs,verbs=get

// Reconcile handles one adapted pod.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pod corev1.Pod
	if err := r.Client.Get(ctx, req.NamespacedName, &pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	group := pod.Labels[berthv1alpha1.PodGroupLabel]
	source := pod.Annotations[berthv1alpha1.SourceAnnotation]
	if group == "" || source == "" || source == gate.SourceBerth.Name || pod.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	var existing berthv1alpha1.PodGroup
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: group}, &existing)
	var res reconcile.Result
	switch {
	case err == nil:
		res, err = r.keep(ctx, &pod, &existing)
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, fmt.Errorf("reading PodGroup %s: %w", group, err)
	default:
		err = r.create(ctx, &pod, source, group)
	}
	if errors.Is(err, errLeaderGone) {
		// A worker of a group whose leader is going: the group's next leader makes its PodGroup
		// (LeaderWorkerSet deletes the worker with its leader; looked at again until then).
		return reconcile.Result{RequeueAfter: leaderGoneRetry}, nil
	}
	return res, err
}

// create makes the adapted PodGroup for the pod's gang, owned like the pod (see ownerOf).
func (r *Reconciler) create(ctx context.Context, pod *corev1.Pod, source, group string) error {
	minMember, from, err := r.gangSize(ctx, pod, source, group)
	if err != nil {
		return err
	}
	if source == gate.SourceLWS.Name && group != pod.Name {
		// The group's size is its leader's: a worker of the revision before a rollout that
		// changed size, reconciled after the old PodGroup went, made the new one the old size
		// (and minMember cannot change).
		if n, err := r.leaderSize(ctx, pod, group); err != nil {
			return err
		} else if n > 0 {
			minMember, from = n, "the group leader's count annotation"
		}
	}
	if minMember == 0 {
		r.Recorder.Warning(pod, events.ReasonGangSizeUnknown, fmt.Sprintf(
			"pod is in %s gang %q but its size is unknown (no %s annotation and no %s PodGroup); create a berth PodGroup %q to admit it", source, group, berthv1alpha1.MinMemberAnnotation, source, group))
		return nil
	}
	owner, err := r.ownerOf(ctx, pod)
	if err != nil {
		return err
	}
	pg := &berthv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{
			Name: group, Namespace: pod.Namespace, Labels: map[string]string{berthv1alpha1.AdaptedFromLabel: source},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: berthv1alpha1.PodGroupSpec{MinMember: minMember},
	}
	if source == gate.SourceLWS.Name {
		if err := r.shapeLWSGroup(ctx, pod, pg); err != nil {
			return err
		}
		minMember = pg.Spec.MinMember
	}
	if err := r.Client.Create(ctx, pg); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil // another member's reconcile made it; the next event checks its owner
		}
		return fmt.Errorf("creating PodGroup %s for %s gang: %w", group, source, err)
	}
	r.Recorder.Normal(pg, events.ReasonGangAdapted, fmt.Sprintf("created for %s gang %q with minMember %d (from %s), owned by %s %s",
		source, group, minMember, from, pg.OwnerReferences[0].Kind, pg.OwnerReferences[0].Name))
	return nil
}

// ownerOf is what an adapted PodGroup for the pod's gang is owned by: the pod's topmost
// controller (the JobSet of a JobSet's Jobs, so every Job of it shares the gang and the
// PodGroup lives as long as the JobSet), or the pod itself when it has none (more members are
// added as owners as they come).
func (r *Reconciler) ownerOf(ctx context.Context, pod *corev1.Pod) (metav1.OwnerReference, error) {
	if pod.Annotations[berthv1alpha1.SourceAnnotation] == gate.SourceLWS.Name {
		return r.groupLeader(ctx, pod)
	}
	c := metav1.GetControllerOf(pod)
	if c == nil {
		return metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}, nil
	}
	r.topsOnce.Do(func() { r.tops = owners.NewTops(r.Reader) })
	top, err := r.tops.Of(ctx, pod.Namespace, *c)
	if err != nil {
		return metav1.OwnerReference{}, fmt.Errorf("resolving the workload of pod %s: %w", pod.Name, err)
	}
	return metav1.OwnerReference{APIVersion: top.APIVersion, Kind: top.Kind, Name: top.Name, UID: top.UID}, nil
}

// keep decides about a PodGroup that already has the gang's name. A user's PodGroup is theirs.
// An adapted one serves one submission: when the pod's owner (its controller, or the pod
// itself when it has none) does not own it and every owner it has is gone, it is left from an
// earlier submission of the same name and is replaced; a PodGroup owned by controller-less
// members that are still there gains the pod as another owner. Two live workloads claiming one
// gang name are told so, and nothing is deleted.
func (r *Reconciler) keep(ctx context.Context, pod *corev1.Pod, pg *berthv1alpha1.PodGroup) (reconcile.Result, error) {
	if pg.Labels[berthv1alpha1.AdaptedFromLabel] == "" {
		return reconcile.Result{}, nil
	}
	if pg.DeletionTimestamp != nil {
		return reconcile.Result{RequeueAfter: staleRetry}, nil
	}
	owner, err := r.ownerOf(ctx, pod)
	if err != nil {
		return reconcile.Result{}, err
	}
	// Owned by the pod's workload — or by its immediate controller, as PodGroups adapted before
	// berth walked up to the topmost workload are: the same submission either way.
	if c := metav1.GetControllerOf(pod); ownedBy(pg, owner.UID) || (c != nil && ownedBy(pg, c.UID)) {
		return reconcile.Result{}, nil
	}
	live, err := r.liveOwner(ctx, pg)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case live == nil:
		return r.replaceStale(ctx, pod, pg, owner)
	case owner.Kind == "Pod" && live.Kind == "Pod":
		patch := client.MergeFromWithOptions(pg.DeepCopy(), client.MergeFromWithOptimisticLock{})
		pg.OwnerReferences = append(pg.OwnerReferences, owner)
		if err := r.Client.Patch(ctx, pg, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding pod %s as an owner of PodGroup %s: %w", pod.Name, pg.Name, err)
		}
		return reconcile.Result{}, nil
	}
	r.Recorder.Warning(pod, events.ReasonGangNameTaken, fmt.Sprintf(
		"gang %q already has a PodGroup, owned by %s %s, which still exists; two workloads cannot share one gang name (rename one)", pg.Name, live.Kind, live.Name))
	return reconcile.Result{}, nil
}

// liveOwner is an owner of pg that still exists (same UID, not being deleted), read from the
// API server, or nil when every owner is gone. An owner berth may not read counts as live:
// berth deletes nothing it cannot prove stale.
func (r *Reconciler) liveOwner(ctx context.Context, pg *berthv1alpha1.PodGroup) (*metav1.OwnerReference, error) {
	for i := range pg.OwnerReferences {
		o := &pg.OwnerReferences[i]
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		if err != nil {
			continue
		}
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gv.WithKind(o.Kind))
		err = r.Reader.Get(ctx, client.ObjectKey{Namespace: pg.Namespace, Name: o.Name}, obj)
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			continue
		case apierrors.IsForbidden(err):
			return o, nil
		case err != nil:
			return nil, fmt.Errorf("reading %s %s, an owner of PodGroup %s: %w", o.Kind, o.Name, pg.Name, err)
		}
		if obj.UID == o.UID && obj.DeletionTimestamp == nil {
			return o, nil
		}
	}
	return nil, nil
}

// replaceStale deletes a PodGroup left from an earlier submission (only that very object:
// a UID precondition) and looks again once it is gone.
func (r *Reconciler) replaceStale(ctx context.Context, pod *corev1.Pod, pg *berthv1alpha1.PodGroup, owner metav1.OwnerReference) (reconcile.Result, error) {
	was := "no owner"
	if len(pg.OwnerReferences) > 0 {
		was = pg.OwnerReferences[0].Kind + " " + pg.OwnerReferences[0].Name + " (uid " + string(pg.OwnerReferences[0].UID) + ")"
	}
	err := r.Client.Delete(ctx, pg, client.Preconditions{UID: &pg.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return reconcile.Result{}, fmt.Errorf("deleting stale PodGroup %s: %w", pg.Name, err)
	}
	r.Recorder.Normal(pod, events.ReasonStaleGangReplaced, fmt.Sprintf(
		"PodGroup %s was adapted for an earlier submission (owned by %s); it is replaced by one owned by %s %s", pg.Name, was, owner.Kind, owner.Name))
	return reconcile.Result{RequeueAfter: staleRetry}, nil
}

// ownedBy reports whether uid is among pg's owners.
func ownedBy(pg *berthv1alpha1.PodGroup, uid types.UID) bool {
	return slices.ContainsFunc(pg.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == uid })
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
