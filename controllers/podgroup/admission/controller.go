// Package admission admits gangs: it holds a PodGroup's members at their scheduling gate until
// every member fits, then pins each to the node placement chose and releases them together.
//
// One scheduling cycle runs at a time (all events map to one work item), over a snapshot of the
// informer cache:
//
//  1. Snapshot nodes and every pod that uses them, including members promised a node by an
//     earlier admission (PodGroup status.assignments) but not bound yet.
//  2. Finish releases that were started (after a restart, or a failed patch): pin and ungate
//     the remaining members of admitted gangs; place late members individually.
//  3. For each waiting gang, oldest first: place it on the snapshot (package scheduling).
//  4. If it fits: assume it in the snapshot, write the assignments to the PodGroup's status
//     (the durable promise), then pin every member and remove every gate in one burst.
//     If the status write fails, nothing was released and the next cycle starts over.
package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/controllers/podgroup/status"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/internal/ledger"
	"github.com/berth-dev/berth/scheduling"
)

// Name is the controller's name in logs and metrics.
const Name = "podgroup.admission"

// DefaultResync bounds how long a cycle waits without events: a safety net for missed events.
// Time-outs and provisioning deadlines requeue at their exact time, not on this.
const DefaultResync = 30 * time.Second

// cycleKey is the single work item every event maps to.
var cycleKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "cycle"}}

// Options configure admission.
type Options struct {
	// Provisioning configures whole-gang provisioning through Karpenter (seat pods).
	Provisioning ProvisioningOptions
	// Resync is the longest a cycle waits without events; DefaultResync when zero. Tests set it
	// long, so only event triggers and exact deadlines can make them pass.
	Resync time.Duration
	// StrandedAfter is how long a released member may be unschedulable on its node before it
	// is replaced; DefaultStrandedAfter when zero.
	StrandedAfter time.Duration
	// NodeReadyBudget is how long a new node that is not Ready yet counts as capacity on its
	// way; DefaultNodeReadyBudget when zero.
	NodeReadyBudget time.Duration
	// Fence, when set, is checked before every promise and release (replicas under leader
	// election: LeaseFence).
	Fence Fence
	// Ledger is the account of promised room shared with the other controllers that promise it
	// (ProvisioningRequests); a ledger of its own when nil.
	Ledger *ledger.Ledger
}

// Reconciler runs gang admission cycles. Build it with New.
type Reconciler struct {
	client client.Client
	// apiReader reads around the cache where staleness matters.
	apiReader client.Reader
	clock     clock.PassiveClock
	recorder  *events.Recorder
	opts      Options

	// What outlives a cycle, guarded by mu (cycles never overlap, but tests and metrics read).
	mu sync.Mutex
	// ledger is the account of promised room (this process's assumed admissions in it); a
	// cycle decides holding its lock.
	ledger *ledger.Ledger
	// boundSeen marks gangs whose all-bound latency was observed, by UID.
	boundSeen map[string]bool
	// orphansSeen marks gated members without a PodGroup that were already reported, by UID.
	orphansSeen map[types.UID]bool
	// unschedulableSeen is when each released member was first seen unschedulable, by UID.
	unschedulableSeen map[types.UID]time.Time
	// strandedOn are the nodes a gang's member was stranded on, with when, by the PodGroup's
	// namespace/name — a group LeaderWorkerSet restarts whole is a new PodGroup of the same
	// name: the gang's members are placed elsewhere for a while (stranded.go).
	strandedOn map[string]map[string]time.Time
	// requests are pods' requests by version, kept across cycles.
	requests requestCache
	// reader is where cycles read the cluster: stores kept by informer events once set up with
	// a manager, the client otherwise.
	reader clusterReader
	// lastWritten is when this process last wrote each gang's conditions that refresh their
	// messages at most once per messageRefresh.
	lastWritten map[refreshKey]time.Time
	// promised is the last cycle's list of what counts against nodes, refilled by the next.
	promised []scheduling.PodOnNode
	// jobs are members' Jobs read around the cache, each reused for a second (jobs.go).
	jobs jobReads
	// failures are the runs of failed steps of gangs (by UID) and of the sweeps, each backing
	// off alone (failing.go).
	failures map[types.UID]failure
	// selections are which devices each DeviceClass selects, by slice and class version, kept
	// across cycles (scheduling.SelectionCache).
	selections *scheduling.SelectionCache
	// draWatch triggers cycles on dynamic resources' changes once a cycle reads them (nil
	// without a manager).
	draWatch *dynamicWatch
}

// New builds the admission controller.
func New(c client.Client, apiReader client.Reader, clk clock.PassiveClock, rec *events.Recorder, opts Options) *Reconciler {
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	if opts.StrandedAfter <= 0 {
		opts.StrandedAfter = DefaultStrandedAfter
	}
	if opts.NodeReadyBudget <= 0 {
		opts.NodeReadyBudget = DefaultNodeReadyBudget
	}
	if opts.Ledger == nil {
		opts.Ledger = ledger.New(clk)
	}
	return &Reconciler{
		client: c, apiReader: apiReader, clock: clk, recorder: rec, opts: opts,
		ledger:      opts.Ledger,
		boundSeen:   map[string]bool{},
		orphansSeen: map[types.UID]bool{}, unschedulableSeen: map[types.UID]time.Time{},
		strandedOn: map[string]map[string]time.Time{},
		reader:     listReader{c}, lastWritten: map[refreshKey]time.Time{},
		failures: map[types.UID]failure{}, selections: scheduling.NewSelectionCache(),
	}
}

// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.berth.dev,resources=podgroups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=list
// +kubebuilder:rbac:groups=karpenter.sh,resources=nodeclaims,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch

// SetupWithManager registers the cycle. PodGroups, pods and nodes are kept in stores from the
// informers' events, and a change that can alter a decision triggers a cycle once its store has
// it (see filter.go for what can); a claim bound, created or deleted triggers one too.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	t := &trigger{}
	stores, err := newStoreReader(context.Background(), mgr.GetCache(), t)
	if err != nil {
		return fmt.Errorf("setting up the admission stores: %w", err)
	}
	r.reader = stores
	r.draWatch = &dynamicWatch{informers: mgr.GetCache(), fire: t.fire}
	toCycle := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{cycleKey}
	})
	return builder.ControllerManagedBy(mgr).
		Named(Name).
		WatchesRawSource(t).
		// A claim bound, created (an ephemeral volume's) or deleted changes where members fit.
		Watches(&corev1.PersistentVolumeClaim{}, toCycle).
		Complete(r)
}

// Reconcile runs one admission cycle over the whole cluster:
//
//  1. Build the cycle's view (snapshot of nodes and what counts against them, members and
//     seats by gang) from the informer cache.
//  2. Move each gang forward, oldest first, on that one snapshot (admit).
//  3. Sweep what no gang needs any more: seats, reservation labels, release barriers and keys.
//
// Every error of the cycle is returned, joined; the soonest deadline a gang asked for (or the
// resync) requeues the next cycle.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	// The cycle decides on the ledger's view and records its promises in it: no other
	// controller promises room meanwhile.
	r.ledger.Lock()
	defer r.ledger.Unlock()
	cy, err := r.newCycle(ctx)
	if errors.Is(err, errNotSynced) {
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	defer r.endCycle()
	r.forgetJobs(cy.now)
	recordPhases(cy.groups)
	r.reportOrphans(cy)
	recordGangHealth(cy.groups, cy.members, cy.now)
	recordMarkedNodes(cy.nodes)
	recordGangSeries(gangStates(cy.groups, cy.members, cy.seats), cy.onNodes, cy.nodes, cy.now)
	next := r.opts.Resync
	soonest := func(wait time.Duration) {
		if wait > 0 && wait < next {
			next = wait
		}
	}
	var fenced error
	for _, g := range cy.groups {
		if wait, ok := r.backingOff(g.UID, cy.now); ok {
			soonest(wait) // its step failed a moment ago: it waits alone
			continue
		}
		wait, err := r.admit(ctx, cy, cy.gang(g))
		switch {
		case err == nil:
			r.recovered(g.UID)
		case errors.Is(err, ErrFenced):
			// This replica may not promise now: not the gang's fault, and no other gang can
			// be admitted either; the cycle fails as a whole.
			fenced = err
		case lostRace(err):
			// Another writer changed the PodGroup or a pod first (the status controller
			// counting members, a user), or the gang went away: decide again on fresh state.
			wait = retryAfterRace
		default:
			wait = r.gangFailed(ctx, g, fmt.Errorf("PodGroup %s/%s: %w", g.Namespace, g.Name, err), cy.now)
		}
		soonest(wait)
	}
	soonest(r.refreshWait(cy))
	soonest(r.sweep(ctx, cy))
	cycleDuration.Observe(r.clock.Since(cy.now).Seconds())
	if fenced != nil {
		return reconcile.Result{}, fenced
	}
	lastCycle.Set(float64(r.clock.Now().UnixMilli()) / 1e3)
	return reconcile.Result{RequeueAfter: next}, nil
}

// endCycle drops what the buffers a cycle refills point to, so that no replaced pod version
// outlives the cycle that read it.
func (r *Reconciler) endCycle() {
	clear(r.promised)
	if b, ok := r.reader.(interface{ release() }); ok {
		b.release()
	}
}

// sweep runs the cluster-wide clean-ups (seats, reservations, barriers, keys whose gangs are
// gone); failing, they back off alone like a gang. It returns how soon they want to run again
// (0: with the next cycle).
func (r *Reconciler) sweep(ctx context.Context, cy *cycle) time.Duration {
	if wait, ok := r.backingOff(sweepsKey, cy.now); ok {
		return wait
	}
	err := errors.Join(cy.volumeErr, cy.draErr, r.sweepSeats(ctx, cy), r.sweepReservations(ctx, cy), r.sweepBarriers(ctx, cy), r.sweepKeys(ctx, cy))
	switch {
	case err == nil:
		r.recovered(sweepsKey)
		return 0
	case lostRace(err):
		// A node changed since the cycle read it (berth's mark is removed only from the node as
		// read): judged again on the fresh node a second later, not whenever the next event
		// comes (and not at once: a node that changes every moment would spin the cycle).
		r.recovered(sweepsKey)
		return time.Second
	}
	wait, _ := r.fail(sweepsKey, err, cy.now)
	admissionErrors.WithLabelValues("", "").Inc()
	log.FromContext(ctx).Error(err, "admission clean-up failed; it backs off alone", "retryIn", wait)
	return wait
}

// admit moves one gang forward and says how soon it wants another look (0: only on events): a
// gang with an admitted generation is tended (members released, lost, replaced, the next
// generation), any other waits to be admitted whole. A gang that timed out for good is left
// alone. Members berth is recreating are created first (recreate.go), whatever the gang's state.
func (r *Reconciler) admit(ctx context.Context, cy *cycle, gv gangView) (time.Duration, error) {
	if err := r.tendRecreations(ctx, gv); err != nil {
		return 0, err
	}
	if status.TimedOutForGood(gv.group) || ofAnotherLeader(gv) {
		return 0, nil
	}
	gen := classify(gv.members, r.assignments(gv.group))
	if gen.admitted() {
		return r.tendAdmitted(ctx, cy, gv, gen)
	}
	return r.admitWhole(ctx, cy, gv, gen)
}

// ofAnotherLeader reports whether gv is the PodGroup of a LeaderWorkerSet group whose leader is
// gone while a new leader of its name is there: LeaderWorkerSet recreated the leader (a rolling
// update, a lost node) before the old PodGroup went with the old one. The new leader is no
// replacement member of the old group — released into it alone, its own group's PodGroup then
// waited for a whole group of gated pods it could never have — it waits for its own PodGroup,
// which the adapter makes once this one is gone.
func ofAnotherLeader(gv gangView) bool {
	g := gv.group
	if g.Labels[berthv1alpha1.AdaptedFromLabel] != gate.SourceLWS.Name || !slices.ContainsFunc(g.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "Pod" }) {
		return false
	}
	for _, m := range gv.members {
		if m.Name != g.Name {
			continue
		}
		for _, o := range g.OwnerReferences {
			if o.Kind == "Pod" && o.UID == m.UID {
				return false
			}
		}
		return true
	}
	return false
}

// assignments is a gang's assignments: from the cache, or from this process's own recent
// admission when the cache has not caught up with it yet.
func (r *Reconciler) assignments(g *berthv1alpha1.PodGroup) []berthv1alpha1.MemberAssignment {
	return r.ledger.Assignments(g)
}

// forget drops what this process assumed of a gang (its generation ended).
func (r *Reconciler) forget(g *berthv1alpha1.PodGroup) { r.ledger.ForgetAssignments(g.UID) }

// assume records assignments this process just wrote for a gang (g as the write returned it).
func (r *Reconciler) assume(g *berthv1alpha1.PodGroup, as []berthv1alpha1.MemberAssignment) {
	r.ledger.AssumeAssignments(g.UID, as, g.ResourceVersion)
}

// retryAfterRace is how soon a cycle runs again after losing an optimistic-lock race.
const retryAfterRace = 100 * time.Millisecond

// lostRace reports whether every error in err is an optimistic-lock conflict or an object
// that is gone: a race with another writer, not a failure to report.
func lostRace(err error) bool {
	switch e := err.(type) { //nolint:errorlint // walks the wrap tree itself, to judge every leaf error
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			if !lostRace(inner) {
				return false
			}
		}
		return true
	case interface{ Unwrap() error }:
		if inner := e.Unwrap(); inner != nil {
			return lostRace(inner)
		}
	}
	return apierrors.IsConflict(err) || apierrors.IsNotFound(err)
}

// minPositive is the smaller of two waits, where 0 means "no wait wanted".
func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
