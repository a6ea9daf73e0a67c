// Package provisioningrequest serves ProvisioningRequests (autoscaling.x-k8s.io/v1) with
// Karpenter capacity, as Cluster Autoscaler serves them with its node groups, so Kueue's
// provisioning admission check works on Karpenter clusters. Two classes:
// check-capacity.autoscaling.x-k8s.io (room on existing nodes: booked, nothing launched) and
// best-effort-atomic-scale-up.autoscaling.x-k8s.io (room for every pod, asked of Karpenter in
// one batch). Capacity is held by seat pods (internal/seat) in berth's namespace: pinned to the
// nodes that have room (Karpenter does not provision for pods that name a node), or free for
// Karpenter to launch nodes for. The request is Provisioned once every seat is on a Ready node;
// the seats then give way one by one as the consuming pods (annotation
// autoscaling.x-k8s.io/consume-provisioning-request) arrive, and the booking ends when they all
// run or after the booking time. Conditions and reasons are Cluster Autoscaler's.
package provisioningrequest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/internal/ledger"
	"github.com/berth-dev/berth/internal/seat"
	"github.com/berth-dev/berth/scheduling"
)

// Name is the controller's name in logs and metrics.
const Name = "provisioningrequest"

// Options configure the controller; the zero value takes the defaults.
type Options struct {
	// SeatNamespace is where seats live (berth's own namespace); seat.DefaultNamespace when empty.
	SeatNamespace string
	// SeatImage is the seats' container image; seat.DefaultImage when empty.
	SeatImage string
	// BookingTime is how long provisioned capacity is held for the consuming pods;
	// DefaultBookingTime when zero.
	BookingTime time.Duration
	// ProvisioningTimeout bounds one best-effort-atomic-scale-up attempt;
	// DefaultProvisioningTimeout when zero.
	ProvisioningTimeout time.Duration
	// Ledger is the account of promised room shared with gang admission: requests decide on
	// its view, under its lock, and record the seats they pin; a ledger of their own when nil.
	Ledger *ledger.Ledger
}

// Reconciler serves ProvisioningRequests of berth's two classes. Build it with New.
type Reconciler struct {
	client client.Client
	// apiReader reads what the cache may not have yet (a PodTemplate created just before its
	// request, as Kueue does).
	apiReader client.Reader
	clock     clock.PassiveClock
	recorder  *events.Recorder
	opts      Options
}

// New builds the controller.
func New(c client.Client, apiReader client.Reader, clk clock.PassiveClock, rec *events.Recorder, opts Options) *Reconciler {
	if opts.SeatNamespace == "" {
		opts.SeatNamespace = seat.DefaultNamespace
	}
	if opts.SeatImage == "" {
		opts.SeatImage = seat.DefaultImage
	}
	if opts.BookingTime <= 0 {
		opts.BookingTime = DefaultBookingTime
	}
	if opts.ProvisioningTimeout <= 0 {
		opts.ProvisioningTimeout = DefaultProvisioningTimeout
	}
	if opts.Ledger == nil {
		opts.Ledger = ledger.New(clk)
	}
	return &Reconciler{client: c, apiReader: apiReader, clock: clk, recorder: rec, opts: opts}
}

// +kubebuilder:rbac:groups=autoscaling.x-k8s.io,resources=provisioningrequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=autoscaling.x-k8s.io,resources=provisioningrequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=podtemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups,verbs=get;list;watch

// SetupWithManager watches requests, their seats and the pods that consume them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	toRequest := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if k, ok := requestOf(o); ok {
			return []reconcile.Request{{NamespacedName: k}}
		}
		return nil
	})
	relevant := predicate.NewPredicateFuncs(func(o client.Object) bool { _, ok := requestOf(o); return ok })
	if err := builder.ControllerManagedBy(mgr).
		Named(Name).
		For(&autoscalingv1.ProvisioningRequest{}).
		Watches(&corev1.Pod{}, toRequest, builder.WithPredicates(relevant)).
		Complete(r); err != nil {
		return fmt.Errorf("building the %s controller: %w", Name, err)
	}
	return nil
}

// requestOf is the request a seat books for or a consuming pod consumes.
func requestOf(o client.Object) (types.NamespacedName, bool) {
	if v := o.GetAnnotations()[berthv1alpha1.SeatForProvisioningRequestAnnotation]; v != "" {
		ns, name, ok := cutKey(v)
		return types.NamespacedName{Namespace: ns, Name: name}, ok
	}
	if v := o.GetAnnotations()[autoscalingv1.ProvisioningRequestPodAnnotationKey]; v != "" {
		return types.NamespacedName{Namespace: o.GetNamespace(), Name: v}, true
	}
	return types.NamespacedName{}, false
}

// Reconcile observes one request, decides and acts.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pr autoscalingv1.ProvisioningRequest
	if err := r.client.Get(ctx, req.NamespacedName, &pr); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, r.sweep(ctx, req.NamespacedName, "")
		}
		return reconcile.Result{}, fmt.Errorf("reading ProvisioningRequest %s: %w", req.NamespacedName, err)
	}
	// A request deleted and created again under its name before this controller saw it gone
	// left the seats of the one before: they go now (they hold nodes nobody asked for, and gang
	// admission reads seats by the request's name).
	stale := r.sweep(ctx, req.NamespacedName, pr.UID)
	switch pr.Spec.ProvisioningClassName {
	case autoscalingv1.ProvisioningClassCheckCapacity, autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp:
	default:
		return reconcile.Result{}, stale // another provisioner's class
	}
	// The request decides on the ledger's view and records the seats it pins before gang
	// admission (or another request) decides again: no GPU is promised twice.
	r.opts.Ledger.Lock()
	defer r.opts.Ledger.Unlock()
	o, err := r.observe(ctx, &pr)
	if errors.Is(err, errTemplateNotYet) {
		return reconcile.Result{RequeueAfter: time.Second}, stale
	}
	if err != nil {
		return reconcile.Result{}, errors.Join(stale, err)
	}
	p := decide(o, timing{booking: r.opts.BookingTime, expiration: DefaultExpiration, provisioning: r.opts.ProvisioningTimeout})
	err = r.act(ctx, &pr, p)
	if errors.Is(err, errStale) {
		return reconcile.Result{RequeueAfter: time.Second}, stale
	}
	if err := errors.Join(stale, err); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: p.requeue}, nil
}

// observe reads what decide needs.
func (r *Reconciler) observe(ctx context.Context, pr *autoscalingv1.ProvisioningRequest) (observation, error) {
	o := observation{pr: pr, now: r.clock.Now()}
	o.pods, o.podsErr = r.requestedPods(ctx, pr, o.now)
	if errors.Is(o.podsErr, errTemplateNotYet) || (o.podsErr != nil && o.pods == nil && !errors.Is(o.podsErr, errCannotBuild)) {
		return o, o.podsErr
	}
	var seats corev1.PodList
	if err := r.client.List(ctx, &seats, client.InNamespace(r.opts.SeatNamespace), client.MatchingLabels{berthv1alpha1.SeatForProvisioningRequestLabel: string(pr.UID)}); err != nil {
		return o, fmt.Errorf("listing the seats of %s/%s: %w", pr.Namespace, pr.Name, err)
	}
	for i := range seats.Items {
		switch s := &seats.Items[i]; {
		case s.DeletionTimestamp != nil:
		case s.Status.Phase == corev1.PodFailed || s.Status.Phase == corev1.PodSucceeded:
			o.dead = append(o.dead, s)
		default:
			o.seats = append(o.seats, s)
		}
	}
	sort.Slice(o.seats, func(i, j int) bool { return o.seats[i].Name < o.seats[j].Name })
	// The cluster-wide lists share the cache's objects (nothing here modifies a pod, node or
	// PodGroup; writes start from copies): a deep copy of every pod and node per reconcile was
	// most of its cost.
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
		return o, fmt.Errorf("listing pods: %w", err)
	}
	var nodes corev1.NodeList
	if err := r.client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return o, fmt.Errorf("listing nodes: %w", err)
	}
	ready := map[string]bool{}
	ns := make([]*corev1.Node, 0, len(nodes.Items))
	unavailable := map[string]string{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		ns = append(ns, n)
		ready[n.Name] = nodeReady(n)
		if !ready[n.Name] || n.Spec.Unschedulable {
			unavailable[n.Name] = "not Ready or cordoned"
		}
	}
	o.ready = func(n string) bool { return ready[n] }
	o.held = r.opts.Ledger.Held(pr.UID)
	var groups berthv1alpha1.PodGroupList
	if err := r.client.List(ctx, &groups, client.UnsafeDisableDeepCopy); err != nil {
		return o, fmt.Errorf("listing PodGroups: %w", err)
	}
	all := make([]*corev1.Pod, 0, len(pods.Items))
	for i := range pods.Items {
		p := &pods.Items[i]
		all = append(all, p)
		if p.Namespace == pr.Namespace && p.Annotations[autoscalingv1.ProvisioningRequestPodAnnotationKey] == pr.Name {
			o.consuming = append(o.consuming, p)
		}
	}
	gs := make([]*berthv1alpha1.PodGroup, 0, len(groups.Items))
	for i := range groups.Items {
		gs = append(gs, &groups.Items[i])
	}
	// What is promised, by anyone — bound pods, gang members pinned or promised a node, other
	// requests' seats pinned to a node, seats created that the cache does not show yet — less
	// this request's own seats (its room).
	r.opts.Ledger.CatchUp(all, gs)
	var onNodes []scheduling.PodOnNode
	key := pr.Namespace + "/" + pr.Name
	for _, pn := range r.opts.Ledger.Promised(all, gs) {
		// Its own seats are its room; so are the seats of a request of its name before it,
		// swept in this reconcile (counted, they made it ask for room being freed).
		if uid, ok := pn.Pod.Labels[berthv1alpha1.SeatForProvisioningRequestLabel]; !ok || (uid != string(pr.UID) && pn.Pod.Annotations[berthv1alpha1.SeatForProvisioningRequestAnnotation] != key) {
			onNodes = append(onNodes, pn)
		}
	}
	if o.podsErr == nil && len(o.seats) == 0 && !meta.IsStatusConditionTrue(pr.Status.Conditions, autoscalingv1.Provisioned) {
		o.fit = scheduling.Place(scheduling.NewSnapshot(ns, onNodes, unavailable), scheduling.Gang{Members: o.pods})
	}
	return o, nil
}

// templateGrace is how long a request's PodTemplate may be missing before the request fails:
// whoever creates a request creates its templates first, but a template created a moment
// before may still be on its way to the API server's watch.
const templateGrace = 30 * time.Second

// errTemplateNotYet: a PodTemplate is missing but the request is younger than templateGrace.
var errTemplateNotYet = errors.New("a PodTemplate of the request is not there yet")

// errStale: the request changed since it was read; decide again on the new one.
var errStale = errors.New("the ProvisioningRequest changed since it was read")

// errCannotBuild: the request's pods cannot be built (a PodTemplate missing past
// templateGrace, no pods asked for) — the request fails (FailedToCreatePods). Any other error
// building them is a retry.
var errCannotBuild = errors.New("cannot build the requested pods")

// requestedPods are the pods the request asks room for: each pod set's PodTemplate (in the
// request's namespace), count times. A template the cache does not have is read from the API
// server; one missing there too fails the request once it is templateGrace old.
func (r *Reconciler) requestedPods(ctx context.Context, pr *autoscalingv1.ProvisioningRequest, now time.Time) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	var errs []error
	for i, ps := range pr.Spec.PodSets {
		var tpl corev1.PodTemplate
		key := client.ObjectKey{Namespace: pr.Namespace, Name: ps.PodTemplateRef.Name}
		err := r.client.Get(ctx, key, &tpl)
		if apierrors.IsNotFound(err) {
			err = r.apiReader.Get(ctx, key, &tpl)
		}
		if apierrors.IsNotFound(err) && now.Sub(pr.CreationTimestamp.Time) < templateGrace {
			return nil, errTemplateNotYet
		}
		if err != nil && !apierrors.IsNotFound(err) {
			// The API server did not answer (a timeout, throttling): a retry, never a
			// failed request — Kueue evicts a workload whose request fails.
			return nil, fmt.Errorf("reading PodTemplate %s/%s of pod set %d: %w", pr.Namespace, ps.PodTemplateRef.Name, i, err)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("pod set %d: PodTemplate %s/%s: %w", i, pr.Namespace, ps.PodTemplateRef.Name, err))
			continue
		}
		for j := range int(ps.Count) {
			out = append(out, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: pr.Name + "-" + strconv.Itoa(i) + "-" + strconv.Itoa(j), Namespace: pr.Namespace,
					Labels: tpl.Template.Labels, Annotations: tpl.Template.Annotations},
				Spec: *tpl.Template.Spec.DeepCopy(),
			})
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", errCannotBuild, errors.Join(errs...))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: the request asks for no pods", errCannotBuild)
	}
	return out, nil
}

// act carries a plan out: seats created and removed, status written, the Event recorded.
func (r *Reconciler) act(ctx context.Context, pr *autoscalingv1.ProvisioningRequest, p plan) error {
	if len(p.create) > 0 {
		// Seats launch nodes: they are created only on the request as it is. The cache can
		// lag this controller's own status write — an attempt that just failed (its seats
		// deleted, the events of their deletion here before the status's) read as no attempt
		// yet, and the seats came back at once, with no backoff.
		var live autoscalingv1.ProvisioningRequest
		if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(pr), &live); err != nil {
			return fmt.Errorf("reading ProvisioningRequest %s/%s before creating its seats: %w", pr.Namespace, pr.Name, err)
		}
		if live.ResourceVersion != pr.ResourceVersion {
			return errStale
		}
	}
	var errs []error
	class := pr.Spec.ProvisioningClassName
	if p.reclaim {
		names, err := seat.Reclaim(ctx, r.client, r.apiReader, p.remove, "provisioningrequest")
		errs = append(errs, err)
		if len(names) > 0 {
			p.eventNote += fmt.Sprintf("; the %d NodeClaim(s) launched for it that no pod uses were deleted (%s)", len(names), strings.Join(names, ", "))
		}
	}
	var refused []error
	for _, s := range p.create {
		seat := seatPod(pr, s, r.opts.SeatNamespace, r.opts.SeatImage)
		switch err := r.client.Create(ctx, seat); {
		case err == nil:
			r.opts.Ledger.AssumePod(seat, s.node) // its room is booked before the cache shows it
			seatsChanged.WithLabelValues(pr.Namespace, class, "created").Inc()
		case !apierrors.IsAlreadyExists(err):
			refused = append(refused, fmt.Errorf("creating seat %s for %s/%s: %w", seat.Name, pr.Namespace, pr.Name, err))
		}
	}
	if len(refused) > 0 {
		// Said where the request's owner looks (a quota or a webhook in berth's namespace
		// refusing seats left the request Accepted and nothing else for its whole week).
		errs = append(errs, refused...)
		p.event(corev1.EventTypeWarning, events.ReasonCapacityNotRequested, fmt.Sprintf("%d of %d seat(s) could not be created, retrying: %v", len(refused), len(p.create), refused[0]))
	}
	if p.setHold {
		// Before the seats go: no cycle may see their room free before their pods bind.
		if len(p.hold) > 0 {
			r.opts.Ledger.Hold(pr.UID, p.hold, p.holdUntil)
		} else {
			r.opts.Ledger.Release(pr.UID)
		}
	}
	for _, s := range p.remove {
		switch err := r.client.Delete(ctx, s, client.Preconditions{UID: &s.UID}); {
		case err == nil:
			seatsChanged.WithLabelValues(pr.Namespace, class, "removed").Inc()
		case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
			errs = append(errs, fmt.Errorf("deleting seat %s of %s/%s: %w", s.Name, pr.Namespace, pr.Name, err))
		}
	}
	if len(p.conditions) > 0 || p.attempts >= 0 {
		updated := pr.DeepCopy()
		for _, c := range p.conditions {
			// Every write moves the transition time, as Cluster Autoscaler's does: the retry
			// backoff counts from the last attempt, not the first.
			meta.SetStatusCondition(&updated.Status.Conditions, c)
			meta.FindStatusCondition(updated.Status.Conditions, c.Type).LastTransitionTime = c.LastTransitionTime
		}
		if p.attempts >= 0 && p.attempts != failedAttempts(pr) {
			if updated.Status.ProvisioningClassDetails == nil {
				updated.Status.ProvisioningClassDetails = map[string]autoscalingv1.Detail{}
			}
			updated.Status.ProvisioningClassDetails[berthv1alpha1.ProvisioningAttemptsDetail] = autoscalingv1.Detail(strconv.Itoa(p.attempts))
		}
		if err := r.client.Status().Update(ctx, updated); err != nil {
			errs = append(errs, fmt.Errorf("updating the status of %s/%s: %w", pr.Namespace, pr.Name, err))
		} else {
			for _, c := range p.conditions {
				conditionsSet.WithLabelValues(pr.Namespace, class, c.Type+"="+string(c.Status), c.Reason).Inc()
				log.FromContext(ctx).Info("provisioning request condition", "request", client.ObjectKeyFromObject(pr), "type", c.Type, "status", c.Status, "reason", c.Reason)
			}
		}
	}
	if p.eventReason != "" {
		if p.eventType == corev1.EventTypeWarning {
			r.recorder.Warning(pr, p.eventReason, p.eventNote)
		} else {
			r.recorder.Normal(pr, p.eventReason, p.eventNote)
		}
	}
	return errors.Join(errs...)
}

// sweep deletes the seats that name request key but not its UID current (every seat of key
// when current is empty: the request no longer exists).
func (r *Reconciler) sweep(ctx context.Context, key types.NamespacedName, current types.UID) error {
	var seats corev1.PodList
	if err := r.client.List(ctx, &seats, client.InNamespace(r.opts.SeatNamespace), client.HasLabels{berthv1alpha1.SeatForProvisioningRequestLabel}); err != nil {
		return fmt.Errorf("listing seats of ProvisioningRequests: %w", err)
	}
	var gone []*corev1.Pod
	for i := range seats.Items {
		s := &seats.Items[i]
		if s.Annotations[berthv1alpha1.SeatForProvisioningRequestAnnotation] != key.String() || s.DeletionTimestamp != nil ||
			(current != "" && s.Labels[berthv1alpha1.SeatForProvisioningRequestLabel] == string(current)) {
			continue
		}
		gone = append(gone, s)
	}
	if len(gone) == 0 {
		return nil
	}
	for _, s := range gone {
		// Room held for the old request's consuming pods goes with it.
		r.opts.Ledger.Release(types.UID(s.Labels[berthv1alpha1.SeatForProvisioningRequestLabel]))
	}
	// The nodes launched for them that no pod uses go first (a request deleted mid-attempt —
	// Kueue retrying, a workload deleted — left them empty and billed until consolidation).
	_, err := seat.Reclaim(ctx, r.client, r.apiReader, gone, "provisioningrequest")
	errs := []error{err}
	for _, s := range gone {
		if err := r.client.Delete(ctx, s, client.Preconditions{UID: &s.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting seat %s of a deleted ProvisioningRequest %s: %w", s.Name, key, err))
		}
	}
	return errors.Join(errs...)
}

// nodeReady reports whether a node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// cutKey splits namespace/name.
func cutKey(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == '/' {
			return s[:i], s[i+1:], i > 0 && i < len(s)-1
		}
	}
	return "", "", false
}
