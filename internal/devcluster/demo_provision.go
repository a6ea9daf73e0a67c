package devcluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
)

// Scene 3: whole-gang provisioning. A gang of two 8-GPU members on a family with no nodes does
// not fit, so berth creates one seat pod per member; Karpenter launches a node for each seat in
// one batch; once both seats are on Ready nodes, berth admits the gang onto them, deletes the
// seats and releases the members together.
const (
	// provisionGroup is scene 3's PodGroup.
	provisionGroup = "llm-h200"
	// provisionProduct is the GPU its members ask for: H200, family p5e, 8 GPUs a node.
	provisionProduct = "h200"
	// provisionMembers is the gang's size; with 8 GPUs each, one node per member.
	provisionMembers = 2
	// provisionTimeout bounds scene 3.
	provisionTimeout = 3 * time.Minute
)

// provisionScene creates the gang and prints, as they happen, the seats, the NodeClaims, the
// nodes, the admission and the members, then what the PodGroup records. It fails when the gang
// does not run within provisionTimeout, or did not get its capacity through seats.
func provisionScene(ctx context.Context, d *demo) error {
	c, p := d.c, d.p
	pg := demoGroup(provisionGroup, provisionMembers)
	pg.Spec.Topology = &berthv1alpha1.TopologySpec{RequiredKey: corev1.LabelTopologyZone}
	v := &provisionView{p: p, pg: pg, pool: rig.GPUNodePoolName(provisionProduct), members: provisionMembers, boundAt: map[string]time.Time{}}
	stop, err := v.watch(ctx, c)
	if err != nil {
		return err
	}
	defer stop()
	if err := createGang(ctx, c, pg, func(name string) *corev1.Pod { return demoTrainingPod(name, provisionProduct, 8) }); err != nil {
		return err
	}
	p.say("created PodGroup %s (minMember %d, topology.requiredKey %s) and %d members asking 8 nvidia.com/gpu each with %s=%s; no such node exists",
		pg.Name, provisionMembers, corev1.LabelTopologyZone, provisionMembers, awsv1.LabelInstanceGPUName, provisionProduct)
	if err := poll(ctx, 200*time.Millisecond, 0, func(ctx context.Context) (bool, error) { return v.step(ctx, c) }); err != nil {
		return fmt.Errorf("gang %s not running whole within %s (%s): %w", provisionGroup, provisionTimeout, v.state(), err)
	}
	return v.summarize()
}

// provisionView is what scene 3 has seen so far.
type provisionView struct {
	p    *printer
	pg   *berthv1alpha1.PodGroup
	pool string
	// members is the gang's size.
	members int
	// mu guards what the watches record: the PodGroup's versions not printed yet, so that a
	// phase that lasts less than a poll (Admitted) is seen, and when each member was first seen
	// bound, to the millisecond, where a poll would round the spread of bind times to its
	// interval.
	mu       sync.Mutex
	versions []berthv1alpha1.PodGroup
	boundAt  map[string]time.Time
	// last is the PodGroup as last read.
	last berthv1alpha1.PodGroup
	// seats is how many seats exist now; maxSeats how many existed at once.
	seats, maxSeats int
	// claims are the NodePool's NodeClaims as last seen.
	claims claimView
	// running counts the members that run.
	running int
}

// step reads and prints what changed; done is true once every member runs, no seat is left
// and the PodGroup is Running.
func (v *provisionView) step(ctx context.Context, c client.Client) (bool, error) {
	if err := v.readGroup(ctx, c); err != nil {
		return false, err
	}
	if err := v.showSeats(ctx, c); err != nil {
		return false, err
	}
	claims, err := v.p.showClaims(ctx, c, v.pool)
	if err != nil {
		return false, err
	}
	v.claims = claims
	v.showBatch()
	states, err := v.p.showMembers(ctx, c, v.pg.Name)
	if err != nil {
		return false, err
	}
	v.running = runningMembers(states)
	return v.running == v.members && v.seats == 0 && v.last.Status.Phase == berthv1alpha1.PodGroupRunning, nil
}

// watch starts recording the PodGroup's versions and its members' first binds, until stop.
func (v *provisionView) watch(ctx context.Context, c client.WithWatch) (stop func(), err error) {
	stopGroup, err := watchEach(ctx, c, &berthv1alpha1.PodGroupList{}, func(g *berthv1alpha1.PodGroup) {
		v.mu.Lock()
		defer v.mu.Unlock()
		v.versions = append(v.versions, *g)
	}, client.InNamespace(DemoNamespace), client.MatchingFields{"metadata.name": v.pg.Name})
	if err != nil {
		return nil, fmt.Errorf("watching PodGroup %s: %w", v.pg.Name, err)
	}
	stopPods, err := watchEach(ctx, c, &corev1.PodList{}, func(pod *corev1.Pod) {
		v.mu.Lock()
		defer v.mu.Unlock()
		if _, seen := v.boundAt[pod.Name]; !seen && pod.Spec.NodeName != "" {
			v.boundAt[pod.Name] = time.Now()
		}
	}, client.InNamespace(DemoNamespace), client.MatchingLabels{berthv1alpha1.PodGroupLabel: v.pg.Name})
	if err != nil {
		stopGroup()
		return nil, fmt.Errorf("watching the members of %s: %w", v.pg.Name, err)
	}
	return func() { stopGroup(); stopPods() }, nil
}

// readGroup prints every version of the PodGroup the watch delivered since the last step, then
// the current one.
func (v *provisionView) readGroup(ctx context.Context, c client.Client) error {
	v.mu.Lock()
	versions := v.versions
	v.versions = nil
	v.mu.Unlock()
	var now berthv1alpha1.PodGroup
	if err := c.Get(ctx, client.ObjectKeyFromObject(v.pg), &now); err != nil {
		return fmt.Errorf("reading PodGroup %s: %w", v.pg.Name, err)
	}
	for _, g := range append(versions, now) {
		v.last = g
		v.showGroup()
	}
	return nil
}

// bindSpread is the time between the first and the last bind the watch saw, and how many it saw.
func (v *provisionView) bindSpread() (time.Duration, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return spread(slices.Collect(maps.Values(v.boundAt))), len(v.boundAt)
}

// showGroup prints the PodGroup's phase and its CapacityProvisioned and Scheduled conditions
// when they change.
func (v *provisionView) showGroup() {
	g := &v.last
	if g.Status.Phase != "" {
		v.p.change("pg/"+g.Name, string(g.Status.Phase), "PodGroup %s: phase %s", g.Name, g.Status.Phase)
	}
	for _, t := range []string{berthv1alpha1.ConditionCapacityProvisioned, berthv1alpha1.ConditionScheduled} {
		if cond := meta.FindStatusCondition(g.Status.Conditions, t); cond != nil {
			v.p.change("pg/"+g.Name+"/"+t, string(cond.Status)+"/"+cond.Reason, "  condition %s=%s (%s): %s", t, cond.Status, cond.Reason, shorten(cond.Message))
		}
	}
}

// showSeats prints the seats when they appear, where they are scheduled, and when they go.
func (v *provisionView) showSeats(ctx context.Context, c client.Client) error {
	seats, err := seatPods(ctx, c, client.MatchingLabels{berthv1alpha1.SeatOfLabel: string(v.pg.UID)})
	if err != nil {
		return fmt.Errorf("reading the seats of %s: %w", v.pg.Name, err)
	}
	for _, s := range seats {
		if s.Spec.NodeName != "" {
			v.p.once("seat/bound/"+s.Name, "  seat %s scheduled onto node %s", s.Name, s.Spec.NodeName)
		}
	}
	v.seats = len(seats)
	// berth creates the seats in parallel: announce the set once it is complete (the request
	// recorded in status.provisioning.seats), not the first seat a poll happens to see.
	want := v.members
	if pr := v.last.Status.Provisioning; pr != nil && pr.Seats > 0 {
		want = int(pr.Seats)
	}
	if v.seats > 0 && v.seats >= want {
		v.p.once("seats/created/"+v.pg.Name, "berth created %d seat pods (%s): pause containers with the members' requests, PriorityClass %s%s",
			v.seats, podNames(seats), berthv1alpha1.SeatPriorityClassName, affinityNote(seats[0]))
	}
	v.maxSeats = max(v.maxSeats, v.seats)
	if v.seats == 0 && v.maxSeats > 0 {
		v.p.once("seats/gone/"+v.pg.Name, "the seats are deleted: the members take the capacity they held")
	}
	return nil
}

// affinityNote describes a seat's required pod affinity among the gang's seats, if any.
func affinityNote(seat corev1.Pod) string {
	a := seat.Spec.Affinity
	if a == nil || a.PodAffinity == nil || len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		return ""
	}
	return ", required pod affinity among the seats on " + a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey
}

// showBatch says, once there is a NodeClaim per member, whether they came in one batch; and, if
// Karpenter launched them in different zones, that a seat will need another node.
func (v *provisionView) showBatch() {
	if claims := v.claims.claims; len(claims) >= v.members {
		v.p.once("batch/"+v.pool, "Karpenter created %d NodeClaims for the %d seats %s", len(claims), v.members, batchNote(claims))
	}
	if zones := v.claims.zones; len(zones) > 1 {
		v.p.once("zones/"+v.pool, "  the NodeClaims were launched in %d zones (%s) though the seats must share one (pod affinity):"+
			" Karpenter left a NodeClaim's zone open; the seat that cannot join the others gets one more node", len(zones), strings.Join(sortedKeys(zones), ", "))
	}
}

// batchNote says how far apart NodeClaims were created (creation times have whole seconds):
// Karpenter creates the NodeClaims of one provisioning batch together.
func batchNote(claims []karpv1.NodeClaim) string {
	created := make([]time.Time, len(claims))
	for i, nc := range claims {
		created[i] = nc.CreationTimestamp.Time
	}
	first := slices.MinFunc(created, time.Time.Compare).Format("15:04:05")
	if d := spread(created); d > time.Second {
		return fmt.Sprintf("over %s, from %s", d, first)
	}
	return "in one batch, at " + first
}

// spread is the time between the earliest and the latest of some times, 0 for none.
func spread(ts []time.Time) time.Duration {
	if len(ts) == 0 {
		return 0
	}
	return slices.MaxFunc(ts, time.Time.Compare).Sub(slices.MinFunc(ts, time.Time.Compare))
}

// state sums up what scene 3 has seen, for a time-out error.
func (v *provisionView) state() string {
	return fmt.Sprintf("phase %q, %d seats now (%d at most), %d NodeClaims with %d Ready nodes, %d/%d members running, status.nodeClaims %v",
		v.last.Status.Phase, v.seats, v.maxSeats, len(v.claims.claims), v.claims.ready, v.running, v.members, v.last.Status.NodeClaims)
}

// summarize prints the bind-time spread, what the PodGroup records and which NodeClaims hold
// the gang, and fails when the capacity did not come through seats, or the gang's nodes are
// not in one zone.
func (v *provisionView) summarize() error {
	g := v.last
	if spread, n := v.bindSpread(); n == v.members {
		within := spread.Round(time.Millisecond).String()
		if spread < time.Millisecond {
			within = "less than a millisecond"
		}
		v.p.say("all %d members were bound within %s of each other", n, within)
	}
	v.p.say("PodGroup %s: phase %s; %s", g.Name, g.Status.Phase, conditionSummary(g.Status.Conditions))
	prov := g.Status.Provisioning
	if prov == nil || int(prov.Seats) != v.members || v.maxSeats == 0 {
		return fmt.Errorf("gang %s did not get its capacity through %d seats: status.provisioning %+v, %d seats seen", g.Name, v.members, prov, v.maxSeats)
	}
	took := "unfinished"
	if prov.StartedAt != nil && prov.FinishedAt != nil {
		took = prov.FinishedAt.Sub(prov.StartedAt.Time).String()
	}
	v.p.say("  status.provisioning: attempt %d, %d seats, from request to capacity in place: %s", prov.Attempt, prov.Seats, took)
	v.p.say("  status.nodes: %s", strings.Join(g.Status.Nodes, ", "))
	v.p.say("  status.nodeClaims: %s", orNone(g.Status.NodeClaims))
	return v.checkClaims(g)
}

// checkClaims prints the NodeClaims that hold no member and those status.nodeClaims does not
// name, and fails when the gang's nodes are not in one zone.
func (v *provisionView) checkClaims(g berthv1alpha1.PodGroup) error {
	zones := map[string]bool{}
	var spare, unnamed []string
	for _, nc := range v.claims.claims {
		zone := nc.Labels[corev1.LabelTopologyZone]
		switch {
		case !slices.Contains(g.Status.Nodes, v.claims.nodeOf[nc.Name]):
			spare = append(spare, fmt.Sprintf("%s (%s)", nc.Name, zone))
		case !slices.Contains(g.Status.NodeClaims, nc.Name):
			unnamed = append(unnamed, nc.Name)
			fallthrough
		default:
			zones[zone] = true
		}
	}
	if len(unnamed) > 0 {
		v.p.say("  (status.nodeClaims lacks %s: berth wrote it at admission, before Karpenter had recorded the node in the NodeClaim)", strings.Join(unnamed, ", "))
	}
	if len(spare) > 0 {
		v.p.say("  NodeClaim %s holds no member: Karpenter launched more NodeClaims than the gang needed"+
			" (see docs/gang-provisioning.md) and removes the empty node after consolidateAfter (30s)", strings.Join(spare, ", "))
	}
	if len(zones) != 1 {
		return fmt.Errorf("gang %s runs on nodes in zones %v, want one", g.Name, sortedKeys(zones))
	}
	if len(spare) == 0 {
		v.p.say("Karpenter provisioned the whole gang in one batch; it runs in %s and was started whole.", sortedKeys(zones)[0])
	} else {
		v.p.say("the gang runs in %s and was started whole.", sortedKeys(zones)[0])
	}
	return nil
}
