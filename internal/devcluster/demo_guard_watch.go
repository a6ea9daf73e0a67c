package devcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// disruptionReasons are the reasons of Karpenter's Events about disrupting nodes.
var disruptionReasons = []string{
	"DisruptionBlocked", "DisruptionLaunching", "DisruptionTerminating", "DisruptionWaitingReadiness",
	"Unconsolidatable", "ConsolidationCandidate", "ConsolidationRejected", "ConsolidationApproved",
	"Disrupted", "Evicted",
}

// transientNotes are Karpenter's DisruptionBlocked messages about nodes that are starting or
// about to take a pod: they say nothing about consolidation.
var transientNotes = []string{"Node is nominated for a pending pod", "Node isn't initialized nor registered"}

// underutilized says how little of a lane's node its workloads use once the filler is gone, and
// what cheaper instance would hold them: what WhenEmptyOrUnderutilized replaces it with.
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
	msg := fmt.Sprintf("node %s (%s) runs %s of its %s GPUs, for %s", n.Name, it, gpus.String(), quantity(n.Status.Allocatable, berthv1alpha1.GPUResource), podNames(l.pods))
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
	for _, f := range gpu.Families() {
		for _, s := range f.Sizes {
			if f.InstanceType(s) == instanceType {
				return s, true
			}
		}
	}
	return gpu.Size{}, false
}

// cheapestFit is the cheapest instance type of instanceType's family with room for the given
// GPUs, vCPUs and GiB of memory.
func cheapestFit(instanceType string, gpus, cpu, memGiB int64) (string, bool) {
	best, bestUSD := "", 0.0
	for _, f := range gpu.Families() {
		if !strings.HasPrefix(instanceType, f.Name+".") {
			continue
		}
		for _, s := range f.Sizes {
			if s.GPUs >= gpus && s.VCPU > cpu && s.MemoryGiB > memGiB && (best == "" || s.OnDemandUSD < bestUSD) {
				best, bestUSD = f.InstanceType(s), s.OnDemandUSD
			}
		}
	}
	return best, best != ""
}

// watchBoth watches both underutilized nodes for at least guardWatchFor, and at most
// guardWatchMax while Karpenter has not finished consolidating the audited one: it fails as
// soon as the guarded lane is disrupted, says every guardReport that it is not, and prints
// what Karpenter does on both lanes.
func watchBoth(ctx context.Context, c client.Client, p *printer, guarded, audited *lane) error {
	p.say("watching both nodes for %s or more; Karpenter's disruption loop looks at them every 10s", guardWatchFor)
	start, report := time.Now(), guardReport
	var audit laneState
	err := poll(ctx, time.Second, 0, func(ctx context.Context) (bool, error) {
		elapsed := time.Since(start)
		guard, err := disruptions(ctx, c, guarded)
		if err == nil && len(guard.notes) > 0 {
			err = errors.New(guard.notes[0])
		}
		if err != nil {
			return false, fmt.Errorf("%s into the watch: %w", elapsed.Round(time.Second), err)
		}
		for _, l := range []*lane{guarded, audited} {
			if err := showKarpenter(ctx, c, p, l, start); err != nil {
				return false, err
			}
		}
		if audit, err = disruptions(ctx, c, audited); err != nil {
			return false, err
		}
		for _, note := range audit.notes {
			p.once("audit/"+note, "  %s: %s", auditPool, note)
		}
		if elapsed >= guardWatchMax || (elapsed >= guardWatchFor && audit.claimGone && audit.moved == int(audited.replicas)) {
			return true, nil
		}
		if elapsed >= report {
			p.say("  %s: %s: NodeClaim %s still there, node not tainted %s, %s running where they started",
				report, guardedPool, guarded.claim.Name, karpv1.DisruptedTaintKey, podNames(guarded.pods))
			report += guardReport
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("watching the nodes: %w", err)
	}
	p.say("for %s Karpenter left %s's underutilized GPU node alone: no NodeClaim deleted, no taint, no eviction",
		time.Since(start).Round(time.Second), guardedPool)
	if audit.claimGone {
		p.say("meanwhile on %s, which berth only audits, Karpenter consolidated the underutilized GPU node: %d GPU pod(s) evicted and restarted elsewhere", auditPool, audit.evicted)
	} else {
		p.say("on %s, which berth only audits, Karpenter had not consolidated the node within %s; nothing keeps it from doing so", auditPool, guardWatchMax)
	}
	return nil
}

// laneState is what Karpenter did to a lane so far: each disruption in a few words, whether
// its NodeClaim is going, how many of its pods were evicted and how many of its Deployment's
// pods run on another node.
type laneState struct {
	notes          []string
	claimGone      bool
	evicted, moved int
}

// disruptions reads what Karpenter did to a lane: its NodeClaim deleted, its node tainted
// disrupted, its pods evicted, moved or marked disruption targets, its gang disrupted.
func disruptions(ctx context.Context, c client.Client, l *lane) (laneState, error) {
	var s laneState
	var err error
	if s.claimGone, err = claimGone(ctx, c, l.claim); err != nil {
		return s, err
	}
	if s.claimGone {
		s.notes = append(s.notes, "Karpenter deletes NodeClaim "+l.claim.Name)
	}
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: l.node}, &n); client.IgnoreNotFound(err) != nil {
		return s, fmt.Errorf("reading node %s: %w", l.node, err)
	} else if err == nil && disruptedTaint(&n) {
		s.notes = append(s.notes, fmt.Sprintf("Karpenter tainted node %s %s and drains it", n.Name, karpv1.DisruptedTaintKey))
	}
	for _, want := range l.pods {
		fate, err := podFate(ctx, c, want)
		if err != nil {
			return s, err
		}
		if fate == evicted {
			s.evicted++
		}
		if fate != "" {
			s.notes = append(s.notes, "pod "+want.Name+" "+fate)
		}
	}
	pods, err := lanePods(ctx, c, l)
	if err != nil {
		return s, err
	}
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName == l.node {
			continue
		}
		s.moved++
		if err := c.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, &n); err != nil {
			return s, fmt.Errorf("reading node %s: %w", pod.Spec.NodeName, err)
		}
		s.notes = append(s.notes, fmt.Sprintf("the Deployment's new pod %s Running on node %s (%s)", pod.Name, n.Name, n.Labels[corev1.LabelInstanceTypeStable]))
	}
	if l.gang == "" {
		return s, nil
	}
	var pg berthv1alpha1.PodGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: l.gang}, &pg); err != nil {
		return s, fmt.Errorf("reading PodGroup %s: %w", l.gang, err)
	}
	if cond := meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionDisrupted); cond != nil {
		s.notes = append(s.notes, fmt.Sprintf("gang %s reports a disruption: %s", l.gang, cond.Message))
	}
	return s, nil
}

// claimGone reports whether a NodeClaim is deleted or being deleted.
func claimGone(ctx context.Context, c client.Client, nc *karpv1.NodeClaim) (bool, error) {
	var now karpv1.NodeClaim
	if err := c.Get(ctx, client.ObjectKeyFromObject(nc), &now); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("reading NodeClaim %s: %w", nc.Name, err)
	}
	return now.DeletionTimestamp != nil, nil
}

// disruptedTaint reports whether Karpenter tainted a node for disruption.
func disruptedTaint(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == karpv1.DisruptedTaintKey })
}

// evicted is the fate of a pod that is gone.
const evicted = "was evicted"

// podFate says what became of a pod that ran: "" while it runs on as it was, else "was evicted"
// (gone, or replaced by a pod of its name), "is being evicted", or how else it was disrupted.
func podFate(ctx context.Context, c client.Client, want corev1.Pod) (string, error) {
	var m corev1.Pod
	err := c.Get(ctx, client.ObjectKeyFromObject(&want), &m)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && m.UID != want.UID):
		return evicted, nil
	case err != nil:
		return "", fmt.Errorf("reading pod %s: %w", want.Name, err)
	case m.DeletionTimestamp != nil:
		return "is being evicted", nil
	case m.Spec.NodeName != want.Spec.NodeName || m.Status.Phase != corev1.PodRunning:
		return fmt.Sprintf("was disrupted (node %q, phase %s)", m.Spec.NodeName, m.Status.Phase), nil
	}
	if cond := podCondition(&m, corev1.DisruptionTarget); cond != nil && cond.Status == corev1.ConditionTrue {
		return "is a disruption target: " + cond.Message, nil
	}
	return "", nil
}

// showKarpenter prints, once each reason and message, the disruption Events Karpenter recorded
// since a time about a lane's NodePool, its NodeClaims (a replacement included) and their nodes.
func showKarpenter(ctx context.Context, c client.Client, p *printer, l *lane, since time.Time) error {
	claims, err := claimsOf(ctx, c, l.pool)
	if err != nil {
		return err
	}
	uids := []types.UID{l.np.UID, l.claim.UID}
	for _, nc := range claims {
		uids = append(uids, nc.UID)
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.MatchingLabels{karpv1.NodePoolLabelKey: l.pool}); err != nil {
		return fmt.Errorf("listing nodes of %s: %w", l.pool, err)
	}
	for _, n := range nodes.Items {
		uids = append(uids, n.UID)
	}
	evs, err := eventsAbout(ctx, c, metav1.NamespaceDefault, uids...)
	if err != nil {
		return err
	}
	for _, e := range evs {
		if fromKarpenter(e) && slices.Contains(disruptionReasons, e.Reason) && !slices.Contains(transientNotes, e.Note) &&
			!eventTime(e).Before(since.Truncate(time.Second)) {
			p.once("karpenter/"+l.pool+"/"+e.Reason+"/"+e.Note, "  Karpenter, Event on %s %s: %s: %s", e.Regarding.Kind, e.Regarding.Name, e.Reason, shorten(e.Note))
		}
	}
	return nil
}
