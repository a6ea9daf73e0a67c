package admission

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/scheduling"
)

// cycle is one admission cycle's view of the cluster, built once from the informer cache at
// the start of Reconcile and passed to every step. Nothing in it outlives the cycle.
type cycle struct {
	// now is when the cycle started.
	now time.Time
	// groups are every PodGroup in the order gangs are admitted in: higher priority first, then
	// older first.
	groups []*berthv1alpha1.PodGroup
	// nodes are every node.
	nodes []*corev1.Node
	// snap is the placement snapshot: nodes with what counts against them (bound pods, and
	// members promised a node but not bound yet). Admissions in this cycle are assumed into it.
	snap *scheduling.Snapshot
	// members are the gangs' member pods by namespace/name, sorted by name.
	members map[string][]*corev1.Pod
	// oldKeys are members being deleted that still carry the key label, by namespace/name: a
	// terminating pod still counts for kube-scheduler's pod affinity, so a release closes them
	// too.
	oldKeys map[string][]*corev1.Pod
	// byUID and byKey find the cycle's PodGroups by UID and by namespace/name (groupByUID,
	// groupByKey): built once per cycle, on first use (the sweeps each built their own).
	byUID map[types.UID]*berthv1alpha1.PodGroup
	byKey map[string]*berthv1alpha1.PodGroup
	// seats are the seat pods by the UID of the gang they hold capacity for.
	seats map[types.UID][]*corev1.Pod
	// countsBooting are the gangs whose capacity request this cycle judged what they lack on the
	// booting snapshot (startAttempt, keepAttempt): the booting room it counted on is theirs to
	// keep from the gangs after them (reserveRoom).
	countsBooting map[types.UID]bool
	// reservedNow are the nodes a gang reserved in this cycle (reserve), by name: the sweep,
	// judging on the nodes as the cycle began, must not take berth's do-not-disrupt mark off them.
	reservedNow map[string]bool
	// pending are the seats not bound yet, by owner (holdUnboundSeats); onReady are those it
	// counted on a Ready node (in snap).
	pending []*seatOwner
	onReady map[*corev1.Pod]bool
	// booked are the seats of ProvisioningRequests (controllers/provisioningrequest), by the
	// request's namespace/name: the room they hold (bound, or counted where they will bind:
	// holdUnboundSeats) is booked for the pods that consume the request, which may be a gang's
	// members.
	booked map[string][]*corev1.Pod
	// volumeErr is what went wrong reading members' claims (those members are blocked).
	volumeErr error
	// dynamic are the cluster's dynamic resources, read when some member or pod on a node has
	// resource claims (nil otherwise); draErr is what went wrong reading or counting them.
	dynamic *scheduling.DynamicResources
	draErr  error
	// requests looks up pods' requests kept across cycles (the Reconciler's requestCache).
	requests scheduling.RequestLookup
	// layout is the resource order the cycle's snapshots share with the request cache.
	layout *scheduling.Layout
	// refreshAt is the soonest condition-message refresh this cycle put off (conditions.go).
	refreshAt time.Time
	// barriers are the nodes carrying each release barrier label, by label (barrierNodes).
	barriers map[string][]string
	// nodeClaims are Karpenter's NodeClaims, listed on first use (nodeClaimsOf); nil: not yet.
	nodeClaims []karpv1.NodeClaim

	// What the booting snapshot is built from, on first use.
	volumes     map[string]scheduling.VolumeTopology
	bootBudget  time.Duration
	onNodes     []scheduling.PodOnNode
	unavailable map[string]string
	booting     *scheduling.Snapshot
	// kept are the cycle's admissions and reservations, to replay on the booting snapshot.
	kept []func(*scheduling.Snapshot)
}

// gangView is one gang as a cycle sees it.
type gangView struct {
	group   *berthv1alpha1.PodGroup
	members []*corev1.Pod
	seats   []*corev1.Pod
	// oldKeys are the gang's members being deleted that still carry the key label.
	oldKeys []*corev1.Pod
	// booked are the seats of the ProvisioningRequests the gang's members consume (Kueue's
	// provisioning admission check): the room they hold is the gang's, like its own seats'.
	booked []*corev1.Pod
}

// holding are the pods whose room is the gang's to place into: its own seats and the seats
// booked for it by ProvisioningRequests its members consume.
func (gv gangView) holding() []*corev1.Pod {
	return append(slices.Clip(gv.seats), gv.booked...)
}

// keyHolders are every pod that may carry the gang's key label: its members and the terminating
// ones still labelled.
func (gv gangView) keyHolders() []*corev1.Pod {
	return append(slices.Clip(gv.members), gv.oldKeys...)
}

// newCycle reads PodGroups, pods and nodes (r.reader) and builds the cycle's view. The objects
// are shared with the cache: nothing in a cycle may modify a listed pod or node, or anything a
// PodGroup points to. Every write starts from a DeepCopy, and no API response is decoded into a
// read object.
func (r *Reconciler) newCycle(ctx context.Context) (*cycle, error) {
	groups, pods, nodes, err := r.reader.read(ctx)
	if err != nil {
		return nil, err
	}
	cy := &cycle{now: r.clock.Now(), groups: groups, nodes: nodes, bootBudget: r.opts.NodeReadyBudget, requests: r.requests.lookup}
	cy.members, cy.oldKeys = membersByGroup(pods), terminatingKeys(pods)
	// Which pods exist, for pruning what is remembered of pods — built only when something is
	// (a map of every pod's UID per cycle was garbage on every cycle of a large cluster).
	var uids map[types.UID]bool
	if r.remembersPods() {
		uids = make(map[types.UID]bool, len(pods))
		for _, p := range pods {
			uids[p.UID] = true
		}
	}
	r.forgetUnschedulable(func(uid types.UID) bool { return uids[uid] })
	cy.index()
	r.forgetGone(cy.byUID, uids)
	cy.seats, cy.booked = seatsByGroup(pods), bookedSeats(pods)
	prio := make(map[*berthv1alpha1.PodGroup]int32, len(cy.groups))
	for _, g := range cy.groups {
		prio[g] = gangPriority(cy.members[g.Namespace+"/"+g.Name])
	}
	sort.Slice(cy.groups, func(i, j int) bool {
		a, b := cy.groups[i], cy.groups[j]
		if prio[a] != prio[b] {
			return prio[a] > prio[b]
		}
		return older(a, b)
	})
	r.ledger.CatchUp(pods, cy.groups)
	// The last cycle's list is reused: cycles run one at a time and none keeps its list.
	clear(r.promised)
	cy.onNodes = r.ledger.AppendPromised(r.promised[:0], pods, cy.groups)
	r.promised = cy.onNodes
	r.mu.Lock()
	r.requests.update(pods)
	cy.layout = r.requests.layout
	r.mu.Unlock()
	cy.unavailable = unavailableNodes(cy.nodes)
	// A member whose claims could not be read is blocked (never placed) and the error returned
	// after the cycle; the other gangs go on.
	cy.pending = cy.unboundSeats(pods)
	cy.volumes, cy.volumeErr = volumeTopologies(ctx, cacheVolumes{r.client}, cy.members)
	cy.snap = scheduling.NewSnapshotWithRequests(cy.nodes, cy.onNodes, cy.unavailable, cy.requests, cy.layout)
	cy.snap.SetVolumes(cy.volumes)
	cy.draErr = cy.setDynamicResources(ctx, r.client, r.selections, cy.snap)
	if cy.dynamic != nil && r.draWatch != nil {
		if err := r.draWatch.start(ctx); err != nil {
			log.FromContext(ctx).Error(err, "gangs waiting for devices are looked at again at each resync only, until a cycle sets the watch up")
		}
	}
	cy.holdUnboundSeats()
	return cy, nil
}

// index builds byUID and byKey from groups, once.
func (cy *cycle) index() {
	if cy.byUID != nil {
		return
	}
	cy.byUID, cy.byKey = make(map[types.UID]*berthv1alpha1.PodGroup, len(cy.groups)), make(map[string]*berthv1alpha1.PodGroup, len(cy.groups))
	for _, g := range cy.groups {
		cy.byUID[g.UID], cy.byKey[g.Namespace+"/"+g.Name] = g, g
	}
}

// groupByUID is the cycle's PodGroup of that UID, or nil.
func (cy *cycle) groupByUID(uid types.UID) *berthv1alpha1.PodGroup {
	cy.index()
	return cy.byUID[uid]
}

// groupByKey is the cycle's PodGroup of that namespace/name, or nil.
func (cy *cycle) groupByKey(key string) *berthv1alpha1.PodGroup {
	cy.index()
	return cy.byKey[key]
}

// gang is the cycle's view of one PodGroup.
func (cy *cycle) gang(g *berthv1alpha1.PodGroup) gangView {
	k := g.Namespace + "/" + g.Name
	gv := gangView{group: g, members: cy.members[k], seats: cy.seats[g.UID], oldKeys: cy.oldKeys[k]}
	if len(cy.booked) > 0 {
		seen := map[string]bool{}
		for _, m := range gv.members {
			req := m.Annotations[autoscalingv1.ProvisioningRequestPodAnnotationKey]
			if req == "" || seen[req] {
				continue
			}
			seen[req] = true
			gv.booked = append(gv.booked, cy.booked[g.Namespace+"/"+req]...)
		}
	}
	return gv
}

// bookedSeats indexes the seats of ProvisioningRequests by the request's namespace/name.
func bookedSeats(pods []*corev1.Pod) map[string][]*corev1.Pod {
	var out map[string][]*corev1.Pod
	for _, p := range pods {
		if _, ok := p.Labels[berthv1alpha1.SeatForProvisioningRequestLabel]; !ok || p.DeletionTimestamp != nil {
			continue
		}
		if out == nil {
			out = map[string][]*corev1.Pod{}
		}
		k := p.Annotations[berthv1alpha1.SeatForProvisioningRequestAnnotation]
		out[k] = append(out[k], p)
	}
	return out
}

// bootingSnapshot is the snapshot in which nodes that are coming up count as available: what
// capacity a gang lacks is judged counting capacity already on its way. Built on first use, at
// most once per cycle, with what the cycle already promised and kept in cy.snap (its
// admissions and reservations, replayed): without them a gang after one admitted or holding
// room in this cycle counted that room as its own and asked for too few seats.
func (cy *cycle) bootingSnapshot() *scheduling.Snapshot {
	if cy.booting == nil {
		cy.booting = scheduling.NewSnapshotWithRequests(cy.nodes, cy.onNodes, withoutBooting(cy.unavailable, cy.nodes, cy.now, cy.bootBudget), cy.requests, cy.layout)
		cy.booting.SetVolumes(cy.volumes)
		if cy.dynamic != nil {
			_ = cy.booting.SetDynamicResources(*cy.dynamic) // its errors are cy.snap's, returned once
		}
		for _, kept := range cy.kept {
			kept(cy.booting)
		}
	}
	return cy.booting
}

// keep applies a promise or a reservation to the cycle's snapshot and, now or when it is built,
// to the booting one.
func (cy *cycle) keep(apply func(*scheduling.Snapshot) error) error {
	if err := apply(cy.snap); err != nil {
		return err
	}
	replay := func(s *scheduling.Snapshot) { _ = apply(s) } // what fits in cy.snap fits where more is available
	cy.kept = append(cy.kept, replay)
	if cy.booting != nil {
		replay(cy.booting)
	}
	return nil
}

// keepBooting applies a reservation to the booting snapshot alone, now or when it is built.
func (cy *cycle) keepBooting(apply func(*scheduling.Snapshot)) {
	cy.kept = append(cy.kept, apply)
	if cy.booting != nil {
		apply(cy.booting)
	}
}

// assume counts members admitted in this cycle (placement res) against their nodes.
func (cy *cycle) assume(members []*corev1.Pod, res scheduling.Result) error {
	return cy.keep(func(s *scheduling.Snapshot) error { return s.Assume(members, res) })
}

// reservePlaced keeps the room gang could already use (placement res, which does not fit) from
// the gangs after it in this cycle.
func (cy *cycle) reservePlaced(gang scheduling.Gang, res scheduling.Result) {
	_ = cy.keep(func(s *scheduling.Snapshot) error { s.ReservePlaced(gang, res); return nil })
}

// reportOrphans tells, once per pod, gated members whose PodGroup does not exist that they
// wait for one: without it they would stay gated with no explanation.
func (r *Reconciler) reportOrphans(cy *cycle) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, ms := range cy.members {
		if cy.groupByKey(key) != nil {
			continue
		}
		for _, m := range gatedOnly(ms) {
			if r.orphansSeen[m.UID] || isAdapted(m) {
				continue // adapted gangs get their PodGroup from the adapter, which reports itself
			}
			r.orphansSeen[m.UID] = true
			r.recorder.Warning(m, events.ReasonPodGroupMissing, fmt.Sprintf(
				"pod is a member of gang %q (label %s) but no PodGroup of that name exists in namespace %s; it stays gated until one is created",
				m.Labels[berthv1alpha1.PodGroupLabel], berthv1alpha1.PodGroupLabel, m.Namespace))
		}
	}
}

// isAdapted reports whether the webhook adopted the pod from another gang scheduler.
func isAdapted(p *corev1.Pod) bool {
	s := p.Annotations[berthv1alpha1.SourceAnnotation]
	return s != "" && s != gate.SourceBerth.Name
}

// membersByGroup indexes pods carrying the pod-group label by namespace/group, sorted by name,
// leaving out pods being deleted.
func membersByGroup(pods []*corev1.Pod) map[string][]*corev1.Pod {
	out := map[string][]*corev1.Pod{}
	for _, p := range pods {
		name := p.Labels[berthv1alpha1.PodGroupLabel]
		if name == "" || p.DeletionTimestamp != nil {
			continue
		}
		k := p.Namespace + "/" + name
		out[k] = append(out[k], p)
	}
	for _, ms := range out {
		sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	}
	return out
}

// terminatingKeys indexes pods being deleted that still carry the key label by namespace/group.
func terminatingKeys(pods []*corev1.Pod) map[string][]*corev1.Pod {
	out := map[string][]*corev1.Pod{}
	for _, p := range pods {
		name := p.Labels[berthv1alpha1.PodGroupLabel]
		if name == "" || p.DeletionTimestamp == nil || p.Labels[berthv1alpha1.ReleaseLabel] != name {
			continue
		}
		k := p.Namespace + "/" + name
		out[k] = append(out[k], p)
	}
	return out
}

// gatedOnly are the pods that still carry berth's gate and have not finished.
func gatedOnly(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if gateIndex(p) >= 0 && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// gangPriority is a gang's scheduling priority: the highest of its members' (their
// PriorityClass, as the API server resolved it into spec.priority).
func gangPriority(members []*corev1.Pod) int32 {
	var p int32
	for i, m := range members {
		if m.Spec.Priority != nil && (i == 0 || *m.Spec.Priority > p) {
			p = *m.Spec.Priority
		}
	}
	return p
}

// older orders gangs of one priority first come, first served.
func older(a, b *berthv1alpha1.PodGroup) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
