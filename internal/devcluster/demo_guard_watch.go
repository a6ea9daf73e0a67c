package devcluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/gpu"
)

// karpenterComponent is the name Karpenter records its Events under.
const karpenterComponent = "karpenter"

// disruptionReasons are the reasons of Karpenter's Events about disrupting nodes.
var disruptionReasons = []string{
	"DisruptionBlocked", "DisruptionLaunching", "DisruptionTerminating", "DisruptionWaitingReadiness",
	"Unconsolidatable", "ConsolidationCandidate", "ConsolidationRejected", "ConsolidationApproved",
	"Disrupted", "Evicted",
}

// transientNotes are Karpenter's DisruptionBlocked messages about nodes that are starting or
// about to take a pod: they say nothing about consolidation.
var transientNotes = []string{"Node is nominated for a pending pod", "Node isn't initialized nor registered"}

// underutilized says how little of a lane's node its gang uses once the filler is gone, and
// what cheaper instance would hold the gang: what WhenEmptyOrUnderutilized replaces it with.
func underutilized(ctx context.Context, c client.Client, l *lane) (string, error) {
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: l.node}, &n); err != nil {
		return "", fmt.Errorf("reading node %s: %w", l.node, err)
	}
	var gpus, cpu, mem resource.Quantity
	for _, m := range l.pods {
		r := m.Spec.Containers[0].Resources.Requests
		gpus.Add(r[berthv1alpha1.GPUResource])
		cpu.Add(r[corev1.ResourceCPU])
		mem.Add(r[corev1.ResourceMemory])
	}
	it := n.Labels[corev1.LabelInstanceTypeStable]
	total := n.Status.Allocatable[berthv1alpha1.GPUResource]
	msg := fmt.Sprintf("node %s (%s) runs %s of its %s GPUs, for %s", n.Name, it, gpus.String(), total.String(), podNames(l.pods))
	if cheaper, ok := cheapestFit(it, gpus.Value(), cpu.Value(), mem.Value()>>30); ok && cheaper != it {
		msg += fmt.Sprintf("; a %s would do (%s vs %s)", cheaper, price(cheaper), price(it))
	}
	return msg, nil
}

// instanceNote describes an instance type from berth's catalogue: GPUs and on-demand price.
func instanceNote(instanceType string) string {
	s, ok := catalogSize(instanceType)
	if !ok {
		return instanceType
	}
	return fmt.Sprintf("%s, %d GPUs, %s on-demand", instanceType, s.GPUs, price(instanceType))
}

// price is an instance type's on-demand price per hour from berth's catalogue.
func price(instanceType string) string {
	s, ok := catalogSize(instanceType)
	if !ok {
		return "unknown price"
	}
	return fmt.Sprintf("$%.2f/h", s.OnDemandUSD)
}

// catalogSize finds an instance type ("g6e.48xlarge") in berth's catalogue.
func catalogSize(instanceType string) (gpu.Size, bool) {
	family, size, _ := strings.Cut(instanceType, ".")
	for _, f := range gpu.Families() {
		if f.Name != family {
			continue
		}
		for _, s := range f.Sizes {
			if s.Name == size {
				return s, true
			}
		}
	}
	return gpu.Size{}, false
}

// podNames lists pods' names.
func podNames(pods []corev1.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return strings.Join(out, ", ")
}

// cheapestFit is the cheapest instance type of instanceType's family with room for the given
// GPUs, vCPUs and GiB of memory.
func cheapestFit(instanceType string, gpus, cpu, memGiB int64) (string, bool) {
	family, _, _ := strings.Cut(instanceType, ".")
	best, found := gpu.Size{}, false
	for _, f := range gpu.Families() {
		if f.Name != family {
			continue
		}
		for _, s := range f.Sizes {
			if s.GPUs >= gpus && s.VCPU > cpu && s.MemoryGiB > memGiB && (!found || s.OnDemandUSD < best.OnDemandUSD) {
				best, found = s, true
			}
		}
	}
	return family + "." + best.Name, found
}

// watchBoth watches both underutilized nodes for at least guardWatchFor, and at most
// guardWatchMax while Karpenter has not finished consolidating the audited one: it fails as
// soon as the guarded lane is disrupted, says every guardReport that it is not, and prints
// what Karpenter does on the audited lane.
func watchBoth(ctx context.Context, c client.Client, p *printer, gw *guardWatch, aw *auditWatch) error {
	p.say("watching both nodes for %s or more; Karpenter's disruption loop looks at them every 10s", guardWatchFor)
	start := time.Now()
	report := guardReport
	for {
		elapsed := time.Since(start)
		if err := gw.check(ctx, c); err != nil {
			return fmt.Errorf("%s into the watch: %w", elapsed.Round(time.Second), err)
		}
		if err := gw.showKarpenter(ctx, c, p, start); err != nil {
			return err
		}
		if err := aw.step(ctx, c, p, start); err != nil {
			return err
		}
		if elapsed >= guardWatchMax || (elapsed >= guardWatchFor && aw.done) {
			break
		}
		if elapsed >= report {
			p.say("  %s: %s: NodeClaim %s still there, node not tainted %s, %s running where they started",
				report, guardedPool, gw.claim.Name, karpv1.DisruptedTaintKey, podNames(gw.lane.pods))
			report += guardReport
		}
		if err := pause(ctx, time.Second); err != nil {
			return fmt.Errorf("watching the nodes: %w", err)
		}
	}
	p.say("for %s Karpenter left %s's underutilized GPU node alone: no NodeClaim deleted, no taint, no eviction",
		time.Since(start).Round(time.Second), guardedPool)
	aw.conclude(p)
	return nil
}

// guardWatch watches the guarded lane: it fails as soon as its node, NodeClaim or a member is
// being disrupted.
type guardWatch struct {
	lane  *lane
	claim *karpv1.NodeClaim
	node  *corev1.Node
	// said are the Karpenter Events printed, by reason and message.
	said map[string]bool
}

// newGuardWatch reads the node the guarded lane runs on and its NodeClaim.
func newGuardWatch(ctx context.Context, c client.Client, l *lane) (*guardWatch, error) {
	nc, err := claimOfNode(ctx, c, l.node)
	if err != nil {
		return nil, err
	}
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: l.node}, &n); err != nil {
		return nil, fmt.Errorf("reading node %s: %w", l.node, err)
	}
	return &guardWatch{lane: l, claim: nc, node: &n, said: map[string]bool{}}, nil
}

// check fails when the NodeClaim is being deleted, the node is tainted disrupted, a member was
// evicted, moved or marked a disruption target, or the gang reports a disruption.
func (w *guardWatch) check(ctx context.Context, c client.Client) error {
	var nc karpv1.NodeClaim
	if err := c.Get(ctx, client.ObjectKeyFromObject(w.claim), &nc); apierrors.IsNotFound(err) || (err == nil && nc.DeletionTimestamp != nil) {
		return fmt.Errorf("karpenter is deleting NodeClaim %s", w.claim.Name)
	} else if err != nil {
		return fmt.Errorf("reading NodeClaim %s: %w", w.claim.Name, err)
	}
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKeyFromObject(w.node), &n); err != nil {
		return fmt.Errorf("reading node %s: %w", w.node.Name, err)
	}
	if disruptedTaint(&n) {
		return fmt.Errorf("node %s is tainted %s", n.Name, karpv1.DisruptedTaintKey)
	}
	for _, want := range w.lane.pods {
		if err := checkPod(ctx, c, want); err != nil {
			return err
		}
	}
	if w.lane.gang == "" {
		return nil
	}
	if cond, err := gangDisrupted(ctx, c, w.lane.gang); err != nil || cond != nil {
		if err == nil {
			err = fmt.Errorf("gang %s reports a disruption: %s", w.lane.gang, cond.Message)
		}
		return err
	}
	return nil
}

// disruptedTaint reports whether Karpenter tainted a node for disruption.
func disruptedTaint(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == karpv1.DisruptedTaintKey })
}

// gangDisrupted is a PodGroup's Disrupted condition, nil when it has none.
func gangDisrupted(ctx context.Context, c client.Client, gang string) (*metav1.Condition, error) {
	var pg berthv1alpha1.PodGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: gang}, &pg); err != nil {
		return nil, fmt.Errorf("reading PodGroup %s: %w", gang, err)
	}
	return meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionDisrupted), nil
}

// checkPod fails when a pod is not the pod it was, on the node it was, running.
func checkPod(ctx context.Context, c client.Client, want corev1.Pod) error {
	var m corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(&want), &m); err != nil {
		return fmt.Errorf("pod %s: %w", want.Name, err)
	}
	if m.UID != want.UID || m.DeletionTimestamp != nil || m.Spec.NodeName != want.Spec.NodeName || m.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("pod %s was disrupted (deleting %v, node %s, phase %s)", m.Name, m.DeletionTimestamp != nil, m.Spec.NodeName, m.Status.Phase)
	}
	if cond := podCondition(&m, corev1.DisruptionTarget); cond != nil && cond.Status == corev1.ConditionTrue {
		return fmt.Errorf("pod %s is a disruption target: %s", m.Name, cond.Message)
	}
	return nil
}

// podCondition is a pod's condition of a type, nil when it has none.
func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// showKarpenter prints, once each, the disruption Events Karpenter recorded since the watch
// started about the guarded pool, NodeClaim and node.
func (w *guardWatch) showKarpenter(ctx context.Context, c client.Client, p *printer, since time.Time) error {
	evs, err := eventsAbout(ctx, c, w.lane.np.UID, w.claim.UID, w.node.UID)
	if err != nil {
		return err
	}
	sayKarpenter(p, evs, since, w.said)
	return nil
}

// sayKarpenter prints Karpenter's disruption Events seen since a time, each reason and message
// once.
func sayKarpenter(p *printer, evs []eventsv1.Event, since time.Time, said map[string]bool) {
	for _, e := range evs {
		if !fromKarpenter(e) || !slices.Contains(disruptionReasons, e.Reason) || slices.Contains(transientNotes, e.Note) ||
			eventTime(e).Before(since.Truncate(time.Second)) {
			continue
		}
		key := e.Reason + "/" + e.Note
		if said[key] {
			continue
		}
		said[key] = true
		p.say("  Karpenter, Event on %s %s: %s: %s", e.Regarding.Kind, e.Regarding.Name, e.Reason, shorten(e.Note))
	}
}

// fromKarpenter reports whether Karpenter recorded an Event.
func fromKarpenter(e eventsv1.Event) bool {
	return e.ReportingController == karpenterComponent || e.DeprecatedSource.Component == karpenterComponent
}

// auditWatch follows the audited lane and prints what happens to it: Karpenter's Events about
// the pool's NodeClaims and nodes, the disrupted taint, evicted pods and their replacements,
// and the NodeClaim going.
type auditWatch struct {
	lane  *lane
	claim *karpv1.NodeClaim
	said  map[string]bool
	// evicted counts the original pods gone; moved the Deployment's pods running elsewhere.
	evicted, moved int
	// consolidated is set once the NodeClaim goes; done once the pods run elsewhere, too.
	consolidated, done bool
}

// newAuditWatch reads the NodeClaim the audited lane's node belongs to.
func newAuditWatch(ctx context.Context, c client.Client, l *lane) (*auditWatch, error) {
	nc, err := claimOfNode(ctx, c, l.node)
	if err != nil {
		return nil, err
	}
	return &auditWatch{lane: l, claim: nc, said: map[string]bool{}}, nil
}

// step prints what changed on the audited lane.
func (w *auditWatch) step(ctx context.Context, c client.Client, p *printer, since time.Time) error {
	if err := w.showKarpenter(ctx, c, p, since); err != nil {
		return err
	}
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: w.lane.node}, &n); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading node %s: %w", w.lane.node, err)
	} else if err == nil && disruptedTaint(&n) {
		p.once("audit/taint/"+n.Name, "  %s: Karpenter tainted node %s %s and drains it", auditPool, n.Name, karpv1.DisruptedTaintKey)
	}
	if err := w.showPods(ctx, c, p); err != nil {
		return err
	}
	var nc karpv1.NodeClaim
	err := c.Get(ctx, client.ObjectKeyFromObject(w.claim), &nc)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading NodeClaim %s: %w", w.claim.Name, err)
	}
	if apierrors.IsNotFound(err) || nc.DeletionTimestamp != nil {
		w.consolidated = true
		p.once("audit/claim/"+w.claim.Name, "  %s: Karpenter deletes NodeClaim %s", auditPool, w.claim.Name)
	}
	w.done = w.consolidated && w.moved == int(w.lane.replicas)
	return nil
}

// showKarpenter prints Karpenter's disruption Events about the audit pool, its NodeClaims and
// their nodes (a replacement NodeClaim included).
func (w *auditWatch) showKarpenter(ctx context.Context, c client.Client, p *printer, since time.Time) error {
	claims, err := claimsOf(ctx, c, auditPool)
	if err != nil {
		return err
	}
	uids := []types.UID{w.lane.np.UID, w.claim.UID}
	for _, nc := range claims {
		uids = append(uids, nc.UID)
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.MatchingLabels{karpv1.NodePoolLabelKey: auditPool}); err != nil {
		return fmt.Errorf("listing nodes of %s: %w", auditPool, err)
	}
	for _, n := range nodes.Items {
		uids = append(uids, n.UID)
	}
	evs, err := eventsAbout(ctx, c, uids...)
	if err != nil {
		return err
	}
	sayKarpenter(p, evs, since, w.said)
	return nil
}

// showPods prints the original pods as they are evicted and the Deployment's pods that run on
// another node.
func (w *auditWatch) showPods(ctx context.Context, c client.Client, p *printer) error {
	w.evicted = 0
	for _, want := range w.lane.pods {
		var m corev1.Pod
		err := c.Get(ctx, client.ObjectKeyFromObject(&want), &m)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && m.UID != want.UID):
			w.evicted++
			p.once("audit/gone/"+want.Name, "  %s: pod %s was evicted", auditPool, want.Name)
		case err != nil:
			return fmt.Errorf("reading pod %s: %w", want.Name, err)
		case m.DeletionTimestamp != nil:
			p.once("audit/deleting/"+want.Name, "  %s: pod %s is being evicted", auditPool, want.Name)
		}
	}
	pods, err := lanePods(ctx, c, w.lane)
	if err != nil {
		return err
	}
	w.moved = 0
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName == w.lane.node {
			continue
		}
		w.moved++
		if key := "audit/moved/" + pod.Name; !p.seen[key] {
			var n corev1.Node
			if err := c.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, &n); err != nil {
				return fmt.Errorf("reading node %s: %w", pod.Spec.NodeName, err)
			}
			p.once(key, "  %s: the Deployment's new pod %s Running on node %s (%s)", auditPool, pod.Name, n.Name, n.Labels[corev1.LabelInstanceTypeStable])
		}
	}
	return nil
}

// conclude sums up the audited lane.
func (w *auditWatch) conclude(p *printer) {
	if w.consolidated {
		p.say("meanwhile on %s, which berth only audits, Karpenter consolidated the underutilized GPU node: %d GPU pod(s) evicted and restarted elsewhere", auditPool, w.evicted)
		return
	}
	p.say("on %s, which berth only audits, Karpenter had not consolidated the node within %s; nothing keeps it from doing so", auditPool, guardWatchMax)
}
