// Package nativegang gives Kubernetes' native gangs (scheduling.k8s.io/v1beta1 PodGroups with
// schedulingPolicy.gang, feature gate GenericWorkload) what upstream leaves out on Karpenter
// clusters: when kube-scheduler's gang cycle cannot place a gang, berth asks Karpenter for every
// pending member's node in one batch (seat pods, internal/seat); once all of them are Ready the
// seats give way and kube-scheduler places the gang; an attempt whose nodes are not all Ready in
// time is withdrawn and its unused NodeClaims deleted. Members of a gang with disruptionMode all
// are marked karpenter.sh/do-not-disrupt once bound. berth never writes the PodGroup's spec or
// status (kube-scheduler's): it keeps its own two annotations and records Events.
package nativegang

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/internal/index"
	"github.com/berth-dev/berth/internal/ledger"
	"github.com/berth-dev/berth/internal/seat"
	"github.com/berth-dev/berth/scheduling"
)

// Name is the controller's name in logs and metrics.
const Name = "nativegang"

// podGroupInitiallyScheduled is kube-scheduler's condition on a native PodGroup.
const podGroupInitiallyScheduled = "PodGroupInitiallyScheduled"

// Options configure the controller; zero values take the defaults.
type Options struct {
	// SeatNamespace is where seats live (berth's namespace); seat.DefaultNamespace when empty.
	SeatNamespace string
	// SeatImage is the seats' image; seat.DefaultImage when empty.
	SeatImage string
	// ProvisioningTimeout, RetryAfter: see the Default* constants.
	ProvisioningTimeout, RetryAfter time.Duration
	// Ledger is the capacity account shared with gang admission and ProvisioningRequests: the
	// room seats give way to a gang's members is held there until they are placed. A ledger of
	// its own when nil.
	Ledger *ledger.Ledger
}

// Reconciler provisions for native gangs. Build it with New.
type Reconciler struct {
	client    client.Client
	apiReader client.Reader
	clock     clock.PassiveClock
	recorder  *events.Recorder
	opts      Options

	mu sync.Mutex
	// notRequested is the last CapacityNotRequested note recorded per gang (by namespace/name).
	notRequested map[types.NamespacedName]string
}

// New builds the controller.
func New(c client.Client, apiReader client.Reader, clk clock.PassiveClock, rec *events.Recorder, opts Options) *Reconciler {
	if opts.SeatNamespace == "" {
		opts.SeatNamespace = seat.DefaultNamespace
	}
	if opts.SeatImage == "" {
		opts.SeatImage = seat.DefaultImage
	}
	if opts.ProvisioningTimeout <= 0 {
		opts.ProvisioningTimeout = DefaultProvisioningTimeout
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	if opts.Ledger == nil {
		opts.Ledger = ledger.New(clk)
	}
	return &Reconciler{client: c, apiReader: apiReader, clock: clk, recorder: rec, opts: opts, notRequested: map[types.NamespacedName]string{}}
}

// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=podgroups,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch

// SetupWithManager watches native PodGroups, their members and their seats.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	toGroup := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if k, ok := groupOf(o); ok {
			return []reconcile.Request{{NamespacedName: k}}
		}
		return nil
	})
	if err := builder.ControllerManagedBy(mgr).
		Named(Name).
		For(&schedulingv1beta1.PodGroup{}).
		Watches(&corev1.Pod{}, toGroup).
		Complete(r); err != nil {
		return fmt.Errorf("building the %s controller: %w", Name, err)
	}
	return nil
}

// groupOf is the native PodGroup a member belongs to or a seat holds capacity for.
func groupOf(o client.Object) (types.NamespacedName, bool) {
	if v := o.GetAnnotations()[berthv1alpha1.SeatForNativeGroupAnnotation]; v != "" {
		ns, name, ok := strings.Cut(v, "/")
		return types.NamespacedName{Namespace: ns, Name: name}, ok
	}
	if p, ok := o.(*corev1.Pod); ok && p.Spec.SchedulingGroup != nil && p.Spec.SchedulingGroup.PodGroupName != nil {
		return types.NamespacedName{Namespace: p.Namespace, Name: *p.Spec.SchedulingGroup.PodGroupName}, true
	}
	return types.NamespacedName{}, false
}

// Reconcile observes one native gang, decides and acts.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pg schedulingv1beta1.PodGroup
	if err := r.client.Get(ctx, req.NamespacedName, &pg); err != nil {
		if apierrors.IsNotFound(err) {
			r.mu.Lock()
			delete(r.notRequested, req.NamespacedName)
			r.mu.Unlock()
			return reconcile.Result{}, r.removeSeats(ctx, req.NamespacedName, "")
		}
		return reconcile.Result{}, fmt.Errorf("reading PodGroup %s: %w", req.NamespacedName, err)
	}
	// A PodGroup deleted and created again under its name before this controller saw it gone
	// (a restart, a leader change, a queue that caught up late) left the seats of the one
	// before: nothing else deletes them, and they hold nodes (do-not-disrupt), keep Karpenter
	// launching and count in the ledger as promised room.
	stale := r.removeSeats(ctx, req.NamespacedName, pg.UID)
	if pg.Spec.SchedulingPolicy.Gang == nil {
		return reconcile.Result{}, stale
	}
	s, members, seats, err := r.observe(ctx, &pg)
	if err != nil {
		return reconcile.Result{}, errors.Join(stale, err)
	}
	var claims claimPlan
	if pending := pendingOf(s, members); usesClaims(pending) {
		if claims, err = r.planClaims(ctx, &pg, pending); err != nil {
			return reconcile.Result{}, errors.Join(stale, err)
		}
		s.claimsBlocked = claims.blocked
	}
	p := decide(s)
	if len(p.seatsFor) > 0 || p.watch {
		// Asking again hinges on berth's annotations: the cache may not have the hand-over
		// written a moment ago (the seats' deletion can arrive first), so read them live.
		var live schedulingv1beta1.PodGroup
		if err := r.apiReader.Get(ctx, req.NamespacedName, &live); err != nil {
			return reconcile.Result{}, errors.Join(stale, fmt.Errorf("reading PodGroup %s: %w", req.NamespacedName, client.IgnoreNotFound(err)))
		}
		readAnnotations(&s, &live)
		p = decide(s)
	}
	return reconcile.Result{RequeueAfter: p.requeue}, errors.Join(stale, r.act(ctx, &pg, p, members, seats, claims))
}

// pendingOf are the gang's pending members, in the order seats are ordered for them.
func pendingOf(s state, members map[string]*corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(s.pending))
	for _, name := range s.pending {
		if m := members[name]; m != nil {
			out = append(out, m)
		}
	}
	return out
}

// observe reads the gang's members, seats and the seats' nodes.
func (r *Reconciler) observe(ctx context.Context, pg *schedulingv1beta1.PodGroup) (state, map[string]*corev1.Pod, []*corev1.Pod, error) {
	s := state{now: r.clock.Now(), minCount: int(pg.Spec.SchedulingPolicy.Gang.MinCount),
		protect: pg.Spec.DisruptionMode != nil && pg.Spec.DisruptionMode.All != nil,
		timeout: r.opts.ProvisioningTimeout, retryAfter: r.opts.RetryAfter}
	if c := meta.FindStatusCondition(pg.Status.Conditions, podGroupInitiallyScheduled); c != nil {
		s.unplaced, s.placed = c.Status == metav1.ConditionFalse, c.Status == metav1.ConditionTrue
		s.unplacedReason = c.Reason
	}
	readAnnotations(&s, pg)
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(pg.Namespace), client.MatchingFields{index.NativeGroupMembers: pg.Name}); err != nil {
		return s, nil, nil, fmt.Errorf("listing the members of %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	members := map[string]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if k, ok := groupOf(p); !ok || k.Name != pg.Name || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		members[p.Name] = p
		if p.Spec.NodeName == "" {
			s.pending = append(s.pending, p.Name)
			continue
		}
		s.bound = append(s.bound, p.Name)
		if p.Annotations[karpv1.DoNotDisruptAnnotationKey] != "true" {
			s.unprotected = append(s.unprotected, p.Name)
		}
	}
	var seatList corev1.PodList
	if err := r.client.List(ctx, &seatList, client.InNamespace(r.opts.SeatNamespace), client.MatchingLabels{berthv1alpha1.SeatForNativeGroupLabel: string(pg.UID)}); err != nil {
		return s, nil, nil, fmt.Errorf("listing the seats of %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	var seats []*corev1.Pod
	for i := range seatList.Items {
		st := &seatList.Items[i]
		if st.DeletionTimestamp != nil {
			continue
		}
		seats = append(seats, st)
		if st.Spec.NodeName != "" {
			s.seatsLaunched++
			continue
		}
		claims, err := seat.Nominated(ctx, r.apiReader, st)
		if err != nil {
			return s, nil, nil, err
		}
		if len(claims) > 0 {
			s.seatsLaunched++
		}
	}
	s.seats = len(seats)
	// In name order: a batch's seats are numbered in it, and which seat carries a claim the
	// gang shares must not change between reconciles.
	slices.Sort(s.pending)
	return s, members, seats, nil
}

// act carries a plan out.
func (r *Reconciler) act(ctx context.Context, pg *schedulingv1beta1.PodGroup, p plan, members map[string]*corev1.Pod, seats []*corev1.Pod, claims claimPlan) error {
	var errs []error
	if p.reclaim {
		// The seats, or once they gave way the pending members Karpenter nominated instead.
		held := seats
		if len(held) == 0 {
			for _, m := range members {
				if m.Spec.NodeName == "" {
					held = append(held, m)
				}
			}
		}
		names, err := seat.Reclaim(ctx, r.client, r.apiReader, held, Name)
		errs = append(errs, err)
		if len(names) > 0 {
			p.eventNote += fmt.Sprintf("; the NodeClaim(s) launched for it that no pod uses were deleted (%s)", strings.Join(names, ", "))
		}
		errs = append(errs, r.annotate(ctx, pg, berthv1alpha1.NativeCapacityRetryAtAnnotation, p.retryAt))
	}
	if p.handOver {
		// Recorded before the seats go: a reconcile their deletion triggers must see it.
		if err := r.annotate(ctx, pg, berthv1alpha1.NativeCapacityHandedOverAnnotation, r.clock.Now()); err != nil {
			return err
		}
		// The room the seats held on nodes stays the gang's in the ledger until its members
		// are placed: kube-scheduler places them there, and admission must not promise it to a
		// PodGroup gang in between.
		r.opts.Ledger.Hold(pg.UID, heldRoom(seats, members), p.holdUntil)
	}
	if p.release {
		r.opts.Ledger.Release(pg.UID)
	}
	if p.handOver || p.clear || p.reclaim {
		errs = append(errs, r.deleteSeats(ctx, seats))
	}
	if len(p.seatsFor) > 0 || p.watch {
		if err := r.annotate(ctx, pg, berthv1alpha1.NativeCapacityRequestedAtAnnotation, r.clock.Now()); err != nil {
			return err
		}
	}
	if p.watch { // launched by Karpenter for the members themselves
		if err := r.annotate(ctx, pg, berthv1alpha1.NativeCapacityHandedOverAnnotation, r.clock.Now()); err != nil {
			return err
		}
	}
	errs = append(errs, r.createSeats(ctx, pg, p, members, seats, claims))
	for _, name := range p.protect {
		m := members[name]
		if m == nil {
			continue
		}
		patch := client.MergeFrom(m.DeepCopy())
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[karpv1.DoNotDisruptAnnotationKey] = "true"
		if err := r.client.Patch(ctx, m, patch); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("marking member %s/%s do-not-disrupt: %w", m.Namespace, m.Name, err))
		}
	}
	r.record(pg, p)
	return errors.Join(errs...)
}

// createSeats creates the seats of p.seatsFor, one batch, each carrying its member's claims
// (claims), and the template copies of seats not on a node yet.
func (r *Reconciler) createSeats(ctx context.Context, pg *schedulingv1beta1.PodGroup, p plan, members map[string]*corev1.Pod, seats []*corev1.Pod, claims claimPlan) error {
	var errs []error
	index := make(map[string]int, len(p.seatsFor))
	for i, name := range p.seatsFor {
		index[name] = i
	}
	var made []*corev1.Pod
	for i, name := range p.seatsFor {
		m := members[name]
		if m == nil {
			continue
		}
		s := r.seatPod(pg, m, i)
		if claims.carry != nil {
			withClaims(s, pg, name, claims, index)
		}
		if err := r.client.Create(ctx, s); err != nil {
			errs = append(errs, client.IgnoreAlreadyExists(err))
			continue
		}
		made = append(made, s)
	}
	if claims.carry != nil && !p.handOver && !p.clear && !p.reclaim {
		// The copies of the seats just made (Create gave them their UIDs), and of earlier ones
		// not on a node yet whose copies are missing.
		errs = append(errs, r.ensureCopies(ctx, pg, append(made, seats...), claims))
	}
	return errors.Join(errs...)
}

// record records the plan's Event on the PodGroup; CapacityNotRequested once per reason.
func (r *Reconciler) record(pg *schedulingv1beta1.PodGroup, p plan) {
	if p.eventReason == events.ReasonCapacityNotRequested {
		// Said once per reason: the gang is looked at on every member's change and each minute.
		r.mu.Lock()
		key := client.ObjectKeyFromObject(pg)
		said := r.notRequested[key] == p.eventNote
		r.notRequested[key] = p.eventNote
		r.mu.Unlock()
		if said {
			p.eventReason = ""
		}
	} else if len(p.seatsFor) > 0 || p.placedOrGone() {
		r.mu.Lock()
		delete(r.notRequested, client.ObjectKeyFromObject(pg))
		r.mu.Unlock()
	}
	if p.eventReason != "" {
		if p.warn {
			r.recorder.Warning(pg, p.eventReason, p.eventNote)
		} else {
			r.recorder.Normal(pg, p.eventReason, p.eventNote)
		}
	}
}

// heldRoom is the room seats bound to nodes hold. A seat holds it as a copy of the member it
// stands for, under the seat's UID: the member asks for what its seat asked for, and its device
// claims — not the seat's template copies, which go with the seat — are what the ledger must
// keep free there (admission replays them). The seat's UID, because the ledger counts a held
// pod only while the cache does not show it (the seat is deleted next; the member, pending,
// stays in the cache), and a copy, because the member object is the cache's and changes. A seat
// whose member is gone holds its own shape.
func heldRoom(seats []*corev1.Pod, members map[string]*corev1.Pod) []scheduling.PodOnNode {
	var out []scheduling.PodOnNode
	for _, s := range seats {
		if s.Spec.NodeName == "" {
			continue
		}
		p := s
		if m := members[s.Annotations[berthv1alpha1.SeatForMemberAnnotation]]; m != nil {
			p = m.DeepCopy()
			p.UID = s.UID
		} else if len(s.Spec.ResourceClaims) > 0 {
			p = s.DeepCopy()
			p.Spec.ResourceClaims = nil // its copies go with it
		}
		out = append(out, scheduling.PodOnNode{Pod: p, Node: s.Spec.NodeName})
	}
	return out
}

// seatPod is the seat for member m of pg, in berth's namespace, named after the group's UID.
func (r *Reconciler) seatPod(pg *schedulingv1beta1.PodGroup, m *corev1.Pod, i int) *corev1.Pod {
	base := pg.Name
	if len(base) > 200 {
		base = base[:200]
	}
	p := seat.Pod(m, r.opts.SeatNamespace, fmt.Sprintf("%s-%s-%d", base, string(pg.UID)[:min(8, len(pg.UID))], i), r.opts.SeatImage)
	p.Labels[berthv1alpha1.SeatForNativeGroupLabel] = string(pg.UID)
	p.Annotations[berthv1alpha1.SeatForNativeGroupAnnotation] = pg.Namespace + "/" + pg.Name
	p.Annotations[berthv1alpha1.SeatForMemberAnnotation] = m.Name
	if a := m.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: a.NodeAffinity.DeepCopy()}
	}
	// The gang's topology constraints (one zone, one placement group…): the seats keep together
	// by each key, so Karpenter launches the batch where the whole gang can be placed.
	if sc := pg.Spec.SchedulingConstraints; sc != nil && len(sc.Topology) > 0 {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{}
		for _, tc := range sc.Topology {
			p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{berthv1alpha1.SeatForNativeGroupLabel: string(pg.UID)}},
				TopologyKey:   tc.Key,
			})
		}
	}
	return p
}

// deleteSeats deletes seats, each at its UID.
func (r *Reconciler) deleteSeats(ctx context.Context, seats []*corev1.Pod) error {
	var errs []error
	for _, s := range seats {
		if err := r.client.Delete(ctx, s, client.Preconditions{UID: &s.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting seat %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	return errors.Join(errs...)
}

// removeSeats deletes the seats made for PodGroups named key other than the one with UID keep
// (all of them when keep is empty: the PodGroup no longer exists).
func (r *Reconciler) removeSeats(ctx context.Context, key types.NamespacedName, keep types.UID) error {
	var list corev1.PodList
	if err := r.client.List(ctx, &list, client.InNamespace(r.opts.SeatNamespace), client.HasLabels{berthv1alpha1.SeatForNativeGroupLabel}); err != nil {
		return fmt.Errorf("listing native gangs' seats: %w", err)
	}
	var seats []*corev1.Pod
	for i := range list.Items {
		st := &list.Items[i]
		if k, ok := groupOf(st); ok && k == key && st.DeletionTimestamp == nil && (keep == "" || st.Labels[berthv1alpha1.SeatForNativeGroupLabel] != string(keep)) {
			seats = append(seats, &list.Items[i])
			// Room held for the old PodGroup's members goes with it.
			r.opts.Ledger.Release(types.UID(st.Labels[berthv1alpha1.SeatForNativeGroupLabel]))
		}
	}
	return r.deleteSeats(ctx, seats)
}

// annotate sets one of berth's time annotations on the PodGroup (a merge patch of that key
// only: kube-scheduler owns the rest).
func (r *Reconciler) annotate(ctx context.Context, pg *schedulingv1beta1.PodGroup, key string, t time.Time) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, t.UTC().Format(time.RFC3339))
	if err := r.client.Patch(ctx, pg, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("annotating PodGroup %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	return nil
}

// readAnnotations reads berth's annotations of the group into s.
func readAnnotations(s *state, pg *schedulingv1beta1.PodGroup) {
	s.requestedAt = annotationTime(pg, berthv1alpha1.NativeCapacityRequestedAtAnnotation)
	s.handedOver = annotationTime(pg, berthv1alpha1.NativeCapacityHandedOverAnnotation)
	s.retryAt = annotationTime(pg, berthv1alpha1.NativeCapacityRetryAtAnnotation)
}

// annotationTime parses one of berth's time annotations (zero when absent or malformed).
func annotationTime(o client.Object, key string) time.Time {
	t, err := time.Parse(time.RFC3339, o.GetAnnotations()[key])
	if err != nil {
		return time.Time{}
	}
	return t
}
