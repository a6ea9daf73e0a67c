// Package disruption reports when Karpenter (or anything else) disrupts a node a running gang
// stands on: the PodGroup gets condition Disrupted=True naming the node and why, a Warning
// Event, and berth_podgroup_disruptions_total counts it, once per node per gang.
package disruption

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
)

// Name is the controller's name in logs and metrics.
const Name = "podgroup.disruption"

// Field indexes this controller registers.
const (
	// indexPodNode indexes pods by spec.nodeName.
	indexPodNode = "disruption.podNode"
	// indexGroupNode indexes PodGroups by status.nodes.
	indexGroupNode = "disruption.podGroupStatusNode"
	// indexClaimNode indexes NodeClaims by status.nodeName.
	indexClaimNode = "disruption.nodeClaimNode"
)

// Reconciler reports disruptions of the nodes running gangs stand on.
type Reconciler struct {
	Client client.Client
	// APIReader reads around the cache: to confirm a node is gone, and for the fresh read
	// before a status update.
	APIReader client.Reader
	Clock     clock.PassiveClock
	Recorder  *events.Recorder
	// Karpenter is true when Karpenter's NodeClaim API is installed; NodeClaims are then
	// watched too.
	Karpenter bool
}

// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups/status,verbs=get;update
// +kubebuilder:rbac:groups="",resources=pods;nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=karpenter.sh,resources=nodeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile checks the nodes one gang stands on:
//
//  1. Read the PodGroup and its members (cache); only Admitted and Running gangs are watched.
//  2. Read each backing node and its NodeClaim; decide (pure) which are being disrupted and
//     which of those the Disrupted condition does not name yet.
//  3. Write the condition with a full status update on a fresh read, retrying conflicts.
//  4. Report each newly disrupted node: Warning Event and counter.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pg berthv1alpha1.PodGroup
	if err := r.Client.Get(ctx, req.NamespacedName, &pg); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !watched(pg.Status.Phase) {
		return reconcile.Result{}, nil
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(pg.Namespace),
		client.MatchingLabels{berthv1alpha1.PodGroupLabel: pg.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing members of %s: %w", req.NamespacedName, err)
	}
	states, err := r.nodeStates(ctx, backingNodes(&pg, pods.Items))
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("PodGroup %s: %w", req.NamespacedName, err)
	}
	found := findDisruptions(pods.Items, states)
	if _, fresh := disruptedCondition(&pg, found, metav1.NewTime(r.Clock.Now())); len(fresh) == 0 {
		return reconcile.Result{}, nil
	}
	var reported []disruption
	var latest berthv1alpha1.PodGroup
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		// A full status update (optimistic lock on resourceVersion) on a fresh read: merge
		// patches would drop the zero-valued member counts, which the schema requires.
		if err := r.APIReader.Get(ctx, req.NamespacedName, &latest); err != nil {
			return err
		}
		if !watched(latest.Status.Phase) {
			reported = nil
			return nil
		}
		cond, fresh := disruptedCondition(&latest, found, metav1.NewTime(r.Clock.Now()))
		if reported = fresh; len(fresh) == 0 {
			return nil
		}
		meta.SetStatusCondition(&latest.Status.Conditions, cond)
		return r.Client.Status().Update(ctx, &latest)
	})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("updating status of %s: %w", req.NamespacedName, err)
	}
	for _, d := range reported {
		disruptions.WithLabelValues(latest.Namespace, d.NodePool, d.Cause).Inc()
		r.Recorder.Warning(&latest, events.ReasonGangMemberDisrupted, fmt.Sprintf("node %s backing the gang is being disrupted: %s", d.Node, d.Why))
	}
	return reconcile.Result{}, nil
}

// nodeStates reads each named node and its NodeClaim. A node missing from the cache is looked
// up on the API server before it is reported gone: the node cache may lag the pod cache.
func (r *Reconciler) nodeStates(ctx context.Context, names []string) ([]nodeState, error) {
	out := make([]nodeState, 0, len(names))
	for _, name := range names {
		s := nodeState{Name: name}
		var n corev1.Node
		err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &n)
		if apierrors.IsNotFound(err) {
			err = r.APIReader.Get(ctx, client.ObjectKey{Name: name}, &n)
		}
		switch {
		case err == nil:
			s.Node = &n
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading node %s: %w", name, err)
		}
		if r.Karpenter {
			var claims karpv1.NodeClaimList
			if err := r.Client.List(ctx, &claims, client.MatchingFields{indexClaimNode: name}); err != nil {
				return nil, fmt.Errorf("listing NodeClaims of node %s: %w", name, err)
			}
			if len(claims.Items) > 0 {
				s.Claim = &claims.Items[0]
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// SetupWithManager indexes pods by node, PodGroups by status.nodes and NodeClaims by node, and
// watches PodGroups, their members, nodes and (with Karpenter) NodeClaims.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexPodNode, func(o client.Object) []string {
		if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing pods by node: %w", err)
	}
	if err := idx.IndexField(ctx, &berthv1alpha1.PodGroup{}, indexGroupNode, func(o client.Object) []string {
		return o.(*berthv1alpha1.PodGroup).Status.Nodes
	}); err != nil {
		return fmt.Errorf("indexing PodGroups by node: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&berthv1alpha1.PodGroup{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(memberToGroup), builder.WithPredicates(memberChanges())).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.groupsOnNode(ctx, o.GetName())
		}), builder.WithPredicates(nodeChanges()))
	if r.Karpenter {
		if err := idx.IndexField(ctx, &karpv1.NodeClaim{}, indexClaimNode, func(o client.Object) []string {
			if n := o.(*karpv1.NodeClaim).Status.NodeName; n != "" {
				return []string{n}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("indexing NodeClaims by node: %w", err)
		}
		b = b.Watches(&karpv1.NodeClaim{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.groupsOnNode(ctx, o.(*karpv1.NodeClaim).Status.NodeName)
		}), builder.WithPredicates(deletionChanges()))
	}
	return b.Complete(r)
}

// groupsOnNode are the gangs standing on a node: those with a member bound to it and those
// admission placed on it.
func (r *Reconciler) groupsOnNode(ctx context.Context, node string) []reconcile.Request {
	if node == "" {
		return nil
	}
	set := map[client.ObjectKey]bool{}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.MatchingFields{indexPodNode: node}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing pods on node", "node", node)
	}
	for i := range pods.Items {
		if g := pods.Items[i].Labels[berthv1alpha1.PodGroupLabel]; g != "" {
			set[client.ObjectKey{Namespace: pods.Items[i].Namespace, Name: g}] = true
		}
	}
	var groups berthv1alpha1.PodGroupList
	if err := r.Client.List(ctx, &groups, client.MatchingFields{indexGroupNode: node}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing PodGroups on node", "node", node)
	}
	for i := range groups.Items {
		set[client.ObjectKeyFromObject(&groups.Items[i])] = true
	}
	out := make([]reconcile.Request, 0, len(set))
	for k := range set {
		out = append(out, reconcile.Request{NamespacedName: k})
	}
	return out
}

// memberToGroup maps a member pod to its PodGroup.
func memberToGroup(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[berthv1alpha1.PodGroupLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}

// memberChanges passes member pods whose node or DisruptionTarget condition changed.
func memberChanges() predicate.Predicate {
	isMember := func(o client.Object) bool { return o.GetLabels()[berthv1alpha1.PodGroupLabel] != "" }
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return isMember(e.Object) },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*corev1.Pod)
			n, okNew := e.ObjectNew.(*corev1.Pod)
			return okOld && okNew && isMember(n) &&
				(o.Spec.NodeName != n.Spec.NodeName || disruptionTarget(o) != disruptionTarget(n))
		},
	}
}

func disruptionTarget(p *corev1.Pod) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			return c.Status
		}
	}
	return ""
}

// nodeChanges passes node deletions, and updates of taints or the deletion timestamp.
func nodeChanges() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*corev1.Node)
			n, okNew := e.ObjectNew.(*corev1.Node)
			return okOld && okNew && (hasDisruptedTaint(o) != hasDisruptedTaint(n) ||
				(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil))
		},
	}
}

// deletionChanges passes deletions and updates that set the deletion timestamp.
func deletionChanges() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return (e.ObjectOld.GetDeletionTimestamp() == nil) != (e.ObjectNew.GetDeletionTimestamp() == nil)
		},
	}
}
