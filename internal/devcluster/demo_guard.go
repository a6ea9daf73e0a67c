package devcluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/internal/rig"
)

// Scene 4: the consolidation guard. Two GPU NodePools are created the way Karpenter's defaults
// make them: consolidationPolicy WhenEmptyOrUnderutilized, consolidateAfter 0s, on-demand only
// (so a cheaper on-demand replacement exists). berth adds a budget blocking Underutilized
// consolidation to one (enforce, berth controller's default); the other is annotated audit and
// only reported. On each pool's 8-GPU node a filler pod runs beside GPU workloads: on the
// guarded pool a protected gang and a one-replica Deployment berth does not mark, on the audit
// pool a two-replica Deployment. When the fillers end, both nodes are underutilized: the demo
// watches Karpenter leave the guarded one alone and replace the other, evicting its pods.
//
// (A gang admitted by berth is pinned to its nodes by a node label a replacement node would
// not have, so Karpenter does not consolidate its node even without the guard; the audit pool
// therefore runs a Deployment, whose pods Karpenter can move.)
const (
	// guardedPool is the NodePool berth guards; auditPool the one it only reports.
	guardedPool = "gpu-guarded"
	auditPool   = "gpu-audit"
	// guardWatchFor is how long the demo watches the underutilized nodes at least: Karpenter's
	// disruption loop runs every 10 s, and consolidation waits 15 s before it acts.
	guardWatchFor = 60 * time.Second
	// guardWatchMax is how long it waits at most for Karpenter to consolidate the audit
	// pool's node.
	guardWatchMax = 100 * time.Second
	// guardReport is how often the watch says the guarded node is untouched.
	guardReport = 15 * time.Second
	// guardTimeout bounds scene 4, the watch included.
	guardTimeout = 2*time.Minute + guardWatchMax
)

// lane is one NodePool of scene 4 with what runs on its node.
type lane struct {
	// pool is the NodePool, created from the rig's pool for product; audit annotates it so
	// that berth only reports it.
	pool, product string
	audit         bool
	// fillerGPUs is the filler's share of the node's 8 GPUs; the workloads take the rest.
	fillerGPUs int64
	// gang is a protected 2-member PodGroup of 1-GPU members; none when empty.
	gang string
	// deploy is a Deployment of replicas 1-GPU pods that berth does not mark.
	deploy   string
	replicas int32
	// np, filler and pods (gang members and Deployment pods) are the objects once created and
	// running; node is where they run, claim its NodeClaim.
	np     *karpv1.NodePool
	filler *corev1.Pod
	pods   []corev1.Pod
	node   string
	claim  *karpv1.NodeClaim
}

// guardScene runs scene 4 and removes what it created.
func guardScene(ctx context.Context, d *demo) error {
	c, p := d.c, d.p
	guarded := &lane{pool: guardedPool, product: "l40s", fillerGPUs: 5, gang: "guarded", deploy: "infer-l40s", replicas: 1}
	audited := &lane{pool: auditPool, product: "a10g", audit: true, fillerGPUs: 6, deploy: "infer-a10g", replicas: 2}
	lanes := []*lane{guarded, audited}
	if err := createDemoPools(ctx, c, p, guarded, audited); err != nil {
		return err
	}
	for _, l := range lanes {
		if err := showGuard(ctx, c, p, l); err != nil {
			return err
		}
	}
	if err := runFillers(ctx, c, p, lanes); err != nil {
		return err
	}
	if err := runWorkloads(ctx, c, p, lanes); err != nil {
		return err
	}
	for _, l := range lanes {
		msg, err := underutilized(ctx, c, l)
		if err != nil {
			return err
		}
		if err := c.Delete(ctx, l.filler, client.GracePeriodSeconds(0)); err != nil {
			return fmt.Errorf("deleting %s: %w", l.filler.Name, err)
		}
		p.say("%s finishes: %s", l.filler.Name, msg)
	}
	if err := watchBoth(ctx, c, p, guarded, audited); err != nil {
		return err
	}
	for _, l := range lanes {
		if err := deleteLane(ctx, c, l); err != nil {
			return err
		}
	}
	p.say("removed the workloads and NodePools %s and %s; Karpenter removes their nodes", guardedPool, auditPool)
	return nil
}

// demoPool is a copy of the rig's NodePool for a lane's GPU product, renamed, on-demand only and
// consolidating underutilized nodes at once with a 100% budget; an audit lane's is annotated so.
func demoPool(l *lane) (*karpv1.NodePool, error) {
	np, err := rigPool(rig.GPUNodePoolName(l.product))
	if err != nil {
		return nil, err
	}
	np.Name = l.pool
	// No consolidation-guard annotation but the audit lane's: the guard's mode is berth
	// controller's default.
	np.Annotations = nil
	if l.audit {
		np.Annotations = map[string]string{berthv1alpha1.ConsolidationGuardAnnotation: berthv1alpha1.ConsolidationGuardAudit}
	}
	np.Spec.Disruption = karpv1.Disruption{
		ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized,
		ConsolidateAfter:    karpv1.MustParseNillableDuration("0s"),
		Budgets:             []karpv1.Budget{{Nodes: "100%"}},
	}
	// On-demand only: Karpenter replaces spot nodes with cheaper spot ones only behind a
	// feature gate, so on spot an underutilized node would stay for lack of a replacement.
	for i, req := range np.Spec.Template.Spec.Requirements {
		if req.Key == karpv1.CapacityTypeLabelKey {
			np.Spec.Template.Spec.Requirements[i].Values = []string{karpv1.CapacityTypeOnDemand}
		}
	}
	np.Spec.Limits = karpv1.Limits{berthv1alpha1.GPUResource: resource.MustParse("32")}
	return np, nil
}

// createDemoPools creates the guarded and the audit NodePool.
func createDemoPools(ctx context.Context, c client.Client, p *printer, guarded, audited *lane) error {
	for _, l := range []*lane{guarded, audited} {
		np, err := demoPool(l)
		if err != nil {
			return err
		}
		if err := c.Create(ctx, np); err != nil {
			return fmt.Errorf("creating NodePool %s: %w", np.Name, err)
		}
		l.np = np
	}
	p.say("created NodePools %s (L40S) and %s (A10G), labelled %s=true, on-demand: consolidationPolicy %s, consolidateAfter 0s, budgets %s",
		guarded.pool, audited.pool, berthv1alpha1.GPUPoolLabel, karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, budgetList(guarded.np.Spec.Disruption.Budgets))
	p.say("  as written, Karpenter repacks their underutilized GPU nodes at once, evicting what runs there; %s is annotated %s=%s",
		audited.pool, berthv1alpha1.ConsolidationGuardAnnotation, berthv1alpha1.ConsolidationGuardAudit)
	return nil
}

// budgetList prints disruption budgets as [nodes N for reasons] ...
func budgetList(budgets []karpv1.Budget) string {
	var out []string
	for _, b := range budgets {
		s := "nodes " + b.Nodes
		if len(b.Reasons) > 0 {
			var rs []string
			for _, r := range b.Reasons {
				rs = append(rs, string(r))
			}
			s += " for " + strings.Join(rs, ", ")
		}
		out = append(out, "["+s+"]")
	}
	return strings.Join(out, " ")
}

// showGuard waits for berth's verdict on a lane's NodePool — on the guarded pool its budget, on
// either its status annotation and its Event — and prints it.
func showGuard(ctx context.Context, c client.Client, p *printer, l *lane) error {
	status, reason, head := "enforced:", events.ReasonConsolidationGuarded, "berth guarded NodePool %s: budgets now %s"
	if l.audit {
		status, reason, head = "unsafe:", events.ReasonUnsafeConsolidation, "berth left NodePool %s as it is (budgets %s) and reported it:"
	}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: l.pool}}
	err := waitFor(ctx, c, np, 200*time.Millisecond, func(np *karpv1.NodePool) bool {
		return strings.HasPrefix(np.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation], status) && (l.audit || guardBudget(np.Spec.Disruption.Budgets))
	})
	if err != nil {
		return fmt.Errorf("berth did not act on NodePool %s (budgets %s, status %q): %w",
			l.pool, budgetList(np.Spec.Disruption.Budgets), np.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation], err)
	}
	ev, err := waitEvent(ctx, c, np.UID, reason)
	if err != nil {
		return fmt.Errorf("NodePool %s: %w", l.pool, err)
	}
	p.say(head, l.pool, budgetList(np.Spec.Disruption.Budgets))
	p.say("  %s: %s", berthv1alpha1.ConsolidationGuardStatusAnnotation, np.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation])
	p.say("  Event %s %s: %s", ev.Type, ev.Reason, shorten(ev.Note))
	return nil
}

// guardBudget reports whether budgets hold berth's {nodes: "0", reasons: [Underutilized]}.
func guardBudget(budgets []karpv1.Budget) bool {
	return slices.ContainsFunc(budgets, func(b karpv1.Budget) bool {
		return b.Nodes == "0" && b.Schedule == nil && slices.Equal(b.Reasons, []karpv1.DisruptionReason{karpv1.DisruptionReasonUnderutilized})
	})
}

// lanePod is a pod asking for gpus GPUs of a lane's product from its NodePool.
func lanePod(l *lane, name string, gpus int64) *corev1.Pod {
	pod := demoTrainingPod(name, l.product, gpus)
	pod.Spec.NodeSelector[karpv1.NodePoolLabelKey] = l.pool
	return pod
}

// runFillers creates a filler per lane and waits until each runs on the node Karpenter
// launches for it.
func runFillers(ctx context.Context, c client.Client, p *printer, lanes []*lane) error {
	for _, l := range lanes {
		l.filler = lanePod(l, "filler-"+l.product, l.fillerGPUs)
		if err := c.Create(ctx, l.filler); err != nil {
			return fmt.Errorf("creating pod %s: %w", l.filler.Name, err)
		}
		p.say("created pod %s asking %d GPUs from NodePool %s", l.filler.Name, l.fillerGPUs, l.pool)
	}
	for _, l := range lanes {
		if err := waitRunning(ctx, c, l.filler); err != nil {
			return err
		}
		l.node = l.filler.Spec.NodeName
		nc, err := claimOfNode(ctx, c, l.node)
		if err != nil {
			return err
		}
		l.claim = nc
		p.say("Karpenter launched NodeClaim %s (%s); %s runs on its node %s", nc.Name, instanceNote(nc.Labels[corev1.LabelInstanceTypeStable]), l.filler.Name, l.node)
	}
	return nil
}

// claimOfNode finds the NodeClaim of a node, by provider ID: the NodeClaim may not name its
// node yet.
func claimOfNode(ctx context.Context, c client.Client, node string) (*karpv1.NodeClaim, error) {
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
		return nil, fmt.Errorf("reading node %s: %w", node, err)
	}
	var list karpv1.NodeClaimList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing NodeClaims: %w", err)
	}
	for i := range list.Items {
		if nc := &list.Items[i]; nc.Status.NodeName == node || (n.Spec.ProviderID != "" && nc.Status.ProviderID == n.Spec.ProviderID) {
			return nc, nil
		}
	}
	return nil, fmt.Errorf("node %s has no NodeClaim", node)
}

// runWorkloads creates each lane's gang and Deployment and waits until their pods run on the
// filler's node, the gang's members marked by berth.
func runWorkloads(ctx context.Context, c client.Client, p *printer, lanes []*lane) error {
	for _, l := range lanes {
		if l.gang != "" {
			if err := createGang(ctx, c, demoGroup(l.gang, 2), func(name string) *corev1.Pod { return lanePod(l, name, 1) }); err != nil {
				return err
			}
			p.say("created PodGroup %s (minMember 2; spec.disruption.protect defaults to true) and 2 members asking 1 GPU each from %s", l.gang, l.pool)
		}
		if err := c.Create(ctx, laneDeployment(l)); err != nil {
			return fmt.Errorf("creating Deployment %s: %w", l.deploy, err)
		}
		p.say("created Deployment %s: %d replica(s) asking 1 GPU each from %s, not opted in to protection", l.deploy, l.replicas, l.pool)
	}
	for _, l := range lanes {
		if err := waitWorkloads(ctx, c, l); err != nil {
			return err
		}
		showPods(p, l.pods)
	}
	return nil
}

// laneDeployment is a lane's Deployment of 1-GPU pods labelled app=<name>.
func laneDeployment(l *lane) *appsv1.Deployment {
	pod := lanePod(l, "", 1)
	pod.Labels[appLabel] = l.deploy
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: l.deploy, Namespace: DemoNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(l.replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{appLabel: l.deploy}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels}, Spec: pod.Spec},
		},
	}
}

// lanePods lists a lane's gang members and Deployment pods that are not being deleted, sorted
// by name.
func lanePods(ctx context.Context, c client.Client, l *lane) ([]corev1.Pod, error) {
	out, err := demoPods(ctx, c, client.MatchingLabels{appLabel: l.deploy})
	if err != nil || l.gang == "" {
		return out, err
	}
	members, err := demoPods(ctx, c, client.MatchingLabels{berthv1alpha1.PodGroupLabel: l.gang})
	if err != nil {
		return nil, err
	}
	out = append(out, members...)
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// waitWorkloads waits until a lane's pods all run on its node, each gang member marked
// do-not-disrupt by berth, and keeps them in the lane.
func waitWorkloads(ctx context.Context, c client.Client, l *lane) error {
	want := int(l.replicas)
	if l.gang != "" {
		want += 2
	}
	err := poll(ctx, 200*time.Millisecond, 0, func(ctx context.Context) (bool, error) {
		var err error
		if l.pods, err = lanePods(ctx, c, l); err != nil || len(l.pods) != want {
			return false, err
		}
		for _, pod := range l.pods {
			// A pod elsewhere than on the filler's node would leave no underutilized node to show.
			if pod.Spec.NodeName != "" && pod.Spec.NodeName != l.node {
				return false, fmt.Errorf("pod %s was placed on node %s, not on the filler's node %s", pod.Name, pod.Spec.NodeName, l.node)
			}
			if member := pod.Labels[berthv1alpha1.PodGroupLabel] != ""; pod.Status.Phase != corev1.PodRunning || protected(&pod) != member {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("pods on %s not running as expected: %s: %w", l.pool, podStates(l.pods), err)
	}
	return nil
}

// protected reports whether a pod carries berth's do-not-disrupt.
func protected(p *corev1.Pod) bool {
	return p.Annotations[karpv1.DoNotDisruptAnnotationKey] == "true" && p.Annotations[berthv1alpha1.ProtectedByAnnotation] == berthv1alpha1.ProtectedByBerth
}

// showPods prints where pods run and berth's marks on them.
func showPods(p *printer, pods []corev1.Pod) {
	for _, pod := range pods {
		mark := "no " + karpv1.DoNotDisruptAnnotationKey
		if protected(&pod) {
			mark = fmt.Sprintf("berth set %s=%s (%s=%s)", karpv1.DoNotDisruptAnnotationKey, pod.Annotations[karpv1.DoNotDisruptAnnotationKey],
				berthv1alpha1.ProtectedByAnnotation, pod.Annotations[berthv1alpha1.ProtectedByAnnotation])
		}
		p.say("  pod %s Running on node %s; %s", pod.Name, pod.Spec.NodeName, mark)
	}
}

// podStates sums up pods for an error.
func podStates(pods []corev1.Pod) string {
	out := make([]string, len(pods))
	for i, pod := range pods {
		out[i] = fmt.Sprintf("%s %s on %q protected=%v", pod.Name, pod.Status.Phase, pod.Spec.NodeName, protected(&pod))
	}
	return orNone(out)
}

// deleteLane deletes a lane's gang, Deployment, their pods at once, and its NodePool; Karpenter
// then removes the node.
func deleteLane(ctx context.Context, c client.Client, l *lane) error {
	objs := []client.Object{&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: l.deploy, Namespace: DemoNamespace}}}
	pods := []client.MatchingLabels{{appLabel: l.deploy}}
	if l.gang != "" {
		objs = append(objs, demoGroup(l.gang, 2))
		pods = append(pods, client.MatchingLabels{berthv1alpha1.PodGroupLabel: l.gang})
	}
	for _, o := range objs {
		if err := c.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s: %w", o.GetName(), err)
		}
	}
	for _, sel := range pods {
		if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(DemoNamespace), sel, client.GracePeriodSeconds(0)); err != nil {
			return fmt.Errorf("deleting pods %v: %w", map[string]string(sel), err)
		}
	}
	if err := c.Delete(ctx, &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: l.pool}}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting NodePool %s: %w", l.pool, err)
	}
	return nil
}
