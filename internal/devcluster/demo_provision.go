package devcluster

import (
	"context"
	"fmt"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
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
func provisionScene(ctx context.Context, c client.WithWatch, p *printer) error {
	ctx, cancel := context.WithTimeout(ctx, provisionTimeout)
	defer cancel()
	pg := &berthv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: provisionGroup, Namespace: DemoNamespace},
		Spec: berthv1alpha1.PodGroupSpec{
			MinMember: provisionMembers,
			Topology:  &berthv1alpha1.TopologySpec{RequiredKey: corev1.LabelTopologyZone},
		},
	}
	if err := c.Create(ctx, pg); err != nil {
		return fmt.Errorf("creating PodGroup %s: %w", pg.Name, err)
	}
	updates, stop, err := watchGroup(ctx, c, pg)
	if err != nil {
		return err
	}
	defer stop()
	binds, err := watchBinds(ctx, c, pg.Name)
	if err != nil {
		return err
	}
	defer binds.stop()
	for i := range provisionMembers {
		m := demoTrainingPod(fmt.Sprintf("%s-%d", provisionGroup, i), provisionProduct, 8)
		m.Labels[berthv1alpha1.PodGroupLabel] = provisionGroup
		if err := c.Create(ctx, m); err != nil {
			return fmt.Errorf("creating member %s: %w", m.Name, err)
		}
	}
	p.say("created PodGroup %s (minMember %d, topology.requiredKey %s) and %d members asking 8 nvidia.com/gpu each with %s=%s; no such node exists",
		pg.Name, provisionMembers, corev1.LabelTopologyZone, provisionMembers, awsv1.LabelInstanceGPUName, provisionProduct)
	v := &provisionView{p: p, pg: pg, updates: updates, pool: rig.GPUNodePoolName(provisionProduct), conds: map[string]string{}}
	for {
		done, err := v.step(ctx, c)
		if err != nil {
			return err
		}
		if done {
			return v.summarize(binds)
		}
		if err := pause(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("gang %s not running whole within %s (%s): %w", provisionGroup, provisionTimeout, v.state(), err)
		}
	}
}

// provisionView is what scene 3 has seen and printed so far.
type provisionView struct {
	p    *printer
	pg   *berthv1alpha1.PodGroup
	pool string
	// updates are the PodGroup's versions from a watch, so that a phase that lasts less than
	// a poll (Admitted) is seen; nil once the watch ended, and the PodGroup is polled.
	updates <-chan *berthv1alpha1.PodGroup
	// last is the PodGroup as last read.
	last berthv1alpha1.PodGroup
	// phase and conds are the phase and conditions (status/reason by type) last printed.
	phase string
	conds map[string]string
	// seats is how many seats exist now; maxSeats how many existed at once.
	seats, maxSeats int
	// claims are the NodePool's NodeClaims as last listed, nodeOf their nodes' names by
	// NodeClaim name, and ready counts their Ready nodes.
	claims []karpv1.NodeClaim
	nodeOf map[string]string
	ready  int
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
	if err := v.showClaims(ctx, c); err != nil {
		return false, err
	}
	if err := v.showMembers(ctx, c); err != nil {
		return false, err
	}
	return v.running == provisionMembers && v.seats == 0 && v.last.Status.Phase == berthv1alpha1.PodGroupRunning, nil
}

// readGroup prints every version of the PodGroup the watch delivered since the last step, or,
// once the watch has ended, the current one.
func (v *provisionView) readGroup(ctx context.Context, c client.Client) error {
	for {
		select {
		case g, ok := <-v.updates:
			if !ok {
				v.updates = nil
				continue
			}
			v.last = *g
			v.showGroup()
		default:
			if v.updates != nil {
				return nil
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(v.pg), &v.last); err != nil {
				return fmt.Errorf("reading PodGroup %s: %w", v.pg.Name, err)
			}
			v.showGroup()
			return nil
		}
	}
}

// watchGroup delivers each version of a PodGroup until stop is called or the watch ends.
func watchGroup(ctx context.Context, c client.WithWatch, pg *berthv1alpha1.PodGroup) (<-chan *berthv1alpha1.PodGroup, func(), error) {
	w, err := c.Watch(ctx, &berthv1alpha1.PodGroupList{}, client.InNamespace(pg.Namespace), client.MatchingFields{"metadata.name": pg.Name})
	if err != nil {
		return nil, nil, fmt.Errorf("watching PodGroup %s: %w", pg.Name, err)
	}
	out := make(chan *berthv1alpha1.PodGroup, 64)
	done := make(chan struct{})
	go func() {
		defer close(out)
		for ev := range w.ResultChan() {
			g, ok := ev.Object.(*berthv1alpha1.PodGroup)
			if !ok {
				continue
			}
			select {
			case out <- g:
			case <-done:
				return
			}
		}
	}()
	return out, func() { close(done); w.Stop() }, nil
}

// showGroup prints the PodGroup's phase and its CapacityProvisioned and Scheduled conditions
// when they change.
func (v *provisionView) showGroup() {
	if phase := string(v.last.Status.Phase); phase != v.phase {
		v.phase = phase
		v.p.say("PodGroup %s: phase %s", v.pg.Name, phase)
	}
	for _, t := range []string{berthv1alpha1.ConditionCapacityProvisioned, berthv1alpha1.ConditionScheduled} {
		cond := meta.FindStatusCondition(v.last.Status.Conditions, t)
		if cond == nil {
			continue
		}
		if key := string(cond.Status) + "/" + cond.Reason; v.conds[t] != key {
			v.conds[t] = key
			v.p.say("  condition %s=%s (%s): %s", t, cond.Status, cond.Reason, shorten(cond.Message))
		}
	}
}

// showSeats prints the seats when they appear, where they are scheduled, and when they go.
func (v *provisionView) showSeats(ctx context.Context, c client.Client) error {
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(DemoNamespace), client.MatchingLabels{berthv1alpha1.SeatOfLabel: string(v.pg.UID)}); err != nil {
		return fmt.Errorf("listing seats of %s: %w", v.pg.Name, err)
	}
	var names []string
	for _, s := range list.Items {
		if s.DeletionTimestamp != nil {
			continue
		}
		names = append(names, s.Name)
		if s.Spec.NodeName != "" {
			v.p.once("seat/bound/"+s.Name, "  seat %s scheduled onto node %s", s.Name, s.Spec.NodeName)
		}
	}
	v.seats = len(names)
	// berth creates the seats in parallel: announce the set once it is complete (the request
	// recorded in status.provisioning.seats), not the first seat a poll happens to see.
	want := provisionMembers
	if pr := v.last.Status.Provisioning; pr != nil && pr.Seats > 0 {
		want = int(pr.Seats)
	}
	if v.seats > 0 && v.seats >= want {
		v.p.once("seats/created/"+v.pg.Name, "berth created %d seat pods (%s): pause containers with the members' requests, PriorityClass %s%s",
			v.seats, strings.Join(names, ", "), berthv1alpha1.SeatPriorityClassName, affinityNote(list.Items[0]))
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

// showClaims prints the NodePool's NodeClaims as Karpenter creates and launches them and their
// nodes as they become Ready; once there is one per member, whether they came in one batch;
// and, if Karpenter launched them in different zones, that a seat will need another node.
func (v *provisionView) showClaims(ctx context.Context, c client.Client) error {
	claims, err := claimsOf(ctx, c, v.pool)
	if err != nil {
		return err
	}
	sort.Slice(claims, func(i, j int) bool { return claims[i].Name < claims[j].Name })
	byProvider, err := nodesByProviderID(ctx, c)
	if err != nil {
		return err
	}
	v.claims, v.nodeOf, v.ready = claims, map[string]string{}, 0
	zones := map[string]bool{}
	for _, nc := range claims {
		l, node := nc.Labels, nodeNameOf(&nc, byProvider)
		v.nodeOf[nc.Name] = node
		v.p.once("nc/"+nc.Name, "Karpenter created NodeClaim %s (NodePool %s)", nc.Name, l[karpv1.NodePoolLabelKey])
		if cond := nc.StatusConditions().Get(karpv1.ConditionTypeLaunched); cond != nil && cond.IsTrue() {
			zones[l[corev1.LabelTopologyZone]] = true
			v.p.once("nc/launched/"+nc.Name, "  NodeClaim %s launched: %s %s in %s", nc.Name,
				l[corev1.LabelInstanceTypeStable], l[karpv1.CapacityTypeLabelKey], l[corev1.LabelTopologyZone])
		}
		ready, err := nodeReady(ctx, c, node)
		if err != nil {
			return err
		}
		if ready {
			v.ready++
			v.p.once("node/ready/"+node, "  node %s is Ready (%s, zone %s)", node,
				l[corev1.LabelInstanceTypeStable], l[corev1.LabelTopologyZone])
		}
	}
	if len(claims) >= provisionMembers {
		v.p.once("batch/"+v.pool, "Karpenter created %d NodeClaims for the %d seats %s", len(claims), provisionMembers, batchNote(claims))
	}
	if len(zones) > 1 {
		v.p.once("zones/"+v.pool, "  the NodeClaims were launched in %d zones (%s) though the seats must share one (pod affinity):"+
			" Karpenter left a NodeClaim's zone open; the seat that cannot join the others gets one more node", len(zones), strings.Join(sortedKeys(zones), ", "))
	}
	return nil
}

// batchNote says how far apart NodeClaims were created (creation times have whole seconds):
// Karpenter creates the NodeClaims of one provisioning batch together.
func batchNote(claims []karpv1.NodeClaim) string {
	first, last := claims[0].CreationTimestamp.Time, claims[0].CreationTimestamp.Time
	for _, nc := range claims[1:] {
		t := nc.CreationTimestamp.Time
		first, last = minTime(first, t), maxTime(last, t)
	}
	if last.Sub(first) <= time.Second {
		return "in one batch, at " + first.Format("15:04:05")
	}
	return fmt.Sprintf("over %s, from %s", last.Sub(first), first.Format("15:04:05"))
}

// sortedKeys are a set's members, sorted.
func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// minTime is the earlier of two times.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// maxTime is the later of two times.
func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// nodeReady reports whether a node exists and is Ready.
func nodeReady(ctx context.Context, c client.Client, name string) (bool, error) {
	if name == "" {
		return false, nil
	}
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue, nil
		}
	}
	return false, nil
}

// showMembers prints each member when it is bound and when it runs.
func (v *provisionView) showMembers(ctx context.Context, c client.Client) error {
	ms, err := membersOf(ctx, c, v.pg.Name)
	if err != nil {
		return err
	}
	v.running = 0
	for _, m := range ms {
		if m.Spec.NodeName != "" {
			v.p.once("member/bound/"+m.Name, "  member %s bound to node %s", m.Name, m.Spec.NodeName)
		}
		if m.Status.Phase == corev1.PodRunning {
			v.running++
			v.p.once("member/running/"+m.Name, "  member %s is Running", m.Name)
		}
	}
	return nil
}

// membersOf lists a PodGroup's members in the demo namespace, sorted by name.
func membersOf(ctx context.Context, c client.Client, group string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(DemoNamespace), client.MatchingLabels{berthv1alpha1.PodGroupLabel: group}); err != nil {
		return nil, fmt.Errorf("listing members of %s: %w", group, err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

// state sums up what scene 3 has seen, for a time-out error.
func (v *provisionView) state() string {
	return fmt.Sprintf("phase %q, %d seats now (%d at most), %d NodeClaims with %d Ready nodes, %d/%d members running, status.nodeClaims %v",
		v.last.Status.Phase, v.seats, v.maxSeats, len(v.claims), v.ready, v.running, provisionMembers, v.last.Status.NodeClaims)
}

// summarize prints the bind-time spread, what the PodGroup records and which NodeClaims hold
// the gang, and fails when the capacity did not come through seats, or the gang's nodes are
// not in one zone.
func (v *provisionView) summarize(binds *bindClock) error {
	g := v.last
	if spread, n := binds.spread(); n == provisionMembers {
		within := spread.Round(time.Millisecond).String()
		if spread < time.Millisecond {
			within = "less than a millisecond"
		}
		v.p.say("all %d members were bound within %s of each other", n, within)
	}
	v.p.say("PodGroup %s: phase %s; %s", g.Name, g.Status.Phase, conditionSummary(g.Status.Conditions))
	prov := g.Status.Provisioning
	if prov == nil || prov.Seats != provisionMembers || v.maxSeats == 0 {
		return fmt.Errorf("gang %s did not get its capacity through %d seats: status.provisioning %+v, %d seats seen", g.Name, provisionMembers, prov, v.maxSeats)
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
	onGang := map[string]bool{}
	for _, n := range g.Status.Nodes {
		onGang[n] = true
	}
	zones := map[string]bool{}
	var spare, unnamed []string
	for _, nc := range v.claims {
		if !onGang[v.nodeOf[nc.Name]] {
			spare = append(spare, fmt.Sprintf("%s (%s)", nc.Name, nc.Labels[corev1.LabelTopologyZone]))
			continue
		}
		zones[nc.Labels[corev1.LabelTopologyZone]] = true
		if !slices.Contains(g.Status.NodeClaims, nc.Name) {
			unnamed = append(unnamed, nc.Name)
		}
	}
	if len(unnamed) > 0 {
		v.p.say("  (status.nodeClaims lacks %s: berth wrote it at admission, before Karpenter had recorded the node in the NodeClaim)", strings.Join(unnamed, ", "))
	}
	if len(spare) > 0 {
		v.p.say("  NodeClaim %s holds no member: Karpenter removes its empty node after consolidateAfter (30s)", strings.Join(spare, ", "))
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

// orNone joins names, or says there are none.
func orNone(names []string) string {
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

// conditionSummary lists conditions as Type=Status (Reason).
func conditionSummary(conds []metav1.Condition) string {
	var out []string
	for _, c := range conds {
		out = append(out, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
	}
	return strings.Join(out, ", ")
}

// bindClock records when each pod of a watch is first seen bound to a node: it measures the
// spread of a gang's bind times to the millisecond, where polling would round it to its
// interval.
type bindClock struct {
	stop func()
	mu   sync.Mutex
	at   map[string]time.Time
}

// watchBinds starts a bindClock on the members of a PodGroup in the demo namespace.
func watchBinds(ctx context.Context, c client.WithWatch, group string) (*bindClock, error) {
	w, err := c.Watch(ctx, &corev1.PodList{}, client.InNamespace(DemoNamespace), client.MatchingLabels{berthv1alpha1.PodGroupLabel: group})
	if err != nil {
		return nil, fmt.Errorf("watching the members of %s: %w", group, err)
	}
	b := &bindClock{stop: w.Stop, at: map[string]time.Time{}}
	go b.record(w.ResultChan())
	return b, nil
}

// record notes the first time each pod is seen with a node, until the watch ends.
func (b *bindClock) record(events <-chan watch.Event) {
	for ev := range events {
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok || pod.Spec.NodeName == "" {
			continue
		}
		b.mu.Lock()
		if _, seen := b.at[pod.Name]; !seen {
			b.at[pod.Name] = time.Now()
		}
		b.mu.Unlock()
	}
}

// spread is the time between the first and the last bind seen, and how many were seen.
func (b *bindClock) spread() (time.Duration, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var first, last time.Time
	for _, t := range b.at {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		last = maxTime(last, t)
	}
	return last.Sub(first), len(b.at)
}
