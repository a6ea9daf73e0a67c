package guard_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/disruption"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// Karpenter's consolidation loop runs every 10 s and waits 15 s before it acts on an
// underutilized node; watching for a minute covers several of its cycles.
const (
	watchAtLeast = 60 * time.Second
	watchAtMost  = 150 * time.Second
)

// lane is one GPU NodePool's workload: a 2-member gang, a one-replica Deployment and a 4-GPU
// filler, 7 GPUs that Karpenter puts on one 8-GPU node. When the filler goes, the node is
// underutilized (3 GPUs on a node with 8), and a 4-GPU node would be cheaper: Karpenter
// consolidates it unless something holds it.
type lane struct {
	name, pool string
	// protect is what the gang's spec.disruption.protect and the Deployment's opt-in say.
	protect bool
	// pods are the lane's gang members and Deployment pod once running; claims their NodeClaims.
	pods   []corev1.Pod
	claims []karpv1.NodeClaim
}

func (l *lane) gang() string   { return "train-" + l.name }
func (l *lane) serve() string  { return "serve-" + l.name }
func (l *lane) filler() string { return "filler-" + l.name }

// TestConsolidationGuard: three GPU NodePools on WhenEmptyOrUnderutilized, consolidateAfter 0s
// and a 100% budget, so only berth stands between Karpenter and the GPU pods. Each mechanism is
// shown holding a node on its own:
//   - budget: the guard enforces an Underutilized budget on gpuPool; its workload is not
//     protected (no do-not-disrupt), and its underutilized node is never disrupted;
//   - protection: auditPool has no budget (the guard only reports it); its gang and opted-in
//     Deployment carry berth's do-not-disrupt, and their underutilized node is never disrupted;
//   - control: controlPool (guard off) runs the same workload unprotected, and Karpenter
//     consolidates its underutilized node in the same window.
//
// Then a disrupted GPU node is reported on its gang, and opting out removes berth's marks, after
// which Karpenter consolidates the node protection alone had held.
func TestConsolidationGuard(t *testing.T) {
	expectGuarded(t)
	ns := namespace(t)
	budget := &lane{name: "budget", pool: gpuPool, protect: false}
	dnd := &lane{name: "dnd", pool: auditPool, protect: true}
	control := &lane{name: "control", pool: controlPool, protect: false}
	lanes := []*lane{budget, dnd, control}
	for _, l := range lanes {
		startLane(t, ns, l)
	}
	waitRunning(t, ns, 4*len(lanes))
	for _, l := range lanes {
		settleLane(t, ns, l)
	}

	// The fillers go: every lane's node is now underutilized, with a cheaper replacement.
	for _, l := range lanes {
		deletePod(t, ns, l.filler())
	}
	start := time.Now()
	var controlConsolidated time.Duration
	for {
		elapsed := time.Since(start)
		for _, l := range []*lane{budget, dnd} {
			if err := expectUndisrupted(context.Background(), l, ns); err != nil {
				t.Fatalf("after %s, lane %s: %v", elapsed.Round(time.Second), l.name, err)
			}
		}
		if controlConsolidated == 0 && claimsGone(t, control.claims) {
			controlConsolidated = elapsed
			t.Logf("Karpenter consolidated the unguarded, unprotected GPU node after %s", elapsed.Round(time.Second))
		}
		if controlConsolidated > 0 && elapsed >= watchAtLeast && elapsed >= controlConsolidated+15*time.Second {
			break
		}
		if elapsed > watchAtMost {
			t.Fatalf("Karpenter did not consolidate the control lane's underutilized GPU node within %s: the scenario shows nothing", watchAtMost)
		}
		time.Sleep(time.Second)
	}
	t.Logf("budget-only and protection-only GPU nodes undisrupted for %s", time.Since(start).Round(time.Second))
	// Karpenter's real consolidation of the control lane's node is reported on its gang.
	expectDisruptedCondition(t, ns, control.gang(), "")

	expectDisruptionReported(t, ns, budget)
	expectOptOut(t, ns, dnd)
}

// startLane creates a lane's gang, Deployment and filler on its pool.
func startLane(t *testing.T, ns string, l *lane) {
	t.Helper()
	mustCreate(t, builders.PodGroup(l.gang(), ns).MinMember(2).Protect(l.protect).Obj())
	for i := range 2 {
		mustCreate(t, gpuPod(fmt.Sprintf("%s-%d", l.gang(), i), ns, l.pool, 1).Member(l.gang()).Obj())
	}
	mustCreate(t, deployment(l.serve(), ns, l.protect, gpuPod("", ns, l.pool, 1)))
	mustCreate(t, gpuPod(l.filler(), ns, l.pool, 4).Obj())
}

// waitRunning waits until n pods run in ns.
func waitRunning(t *testing.T, ns string, n int) {
	t.Helper()
	rigtest.Eventually(t, 2*time.Minute, 250*time.Millisecond, "every pod running", func(ctx context.Context) (bool, string, error) {
		pods, err := listPods(ctx, ns)
		if err != nil {
			return false, "", err
		}
		var states []string
		running := 0
		for _, p := range pods {
			states = append(states, fmt.Sprintf("%s=%s@%s", p.Name, p.Status.Phase, p.Spec.NodeName))
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == n && len(pods) == n, strings.Join(states, " "), nil
	})
}

// settleLane waits until berth marks exactly the lane's protected pods (all of them when the
// lane protects, none otherwise), the gang runs, and records the lane's pods and NodeClaims.
func settleLane(t *testing.T, ns string, l *lane) {
	t.Helper()
	c := rigtest.Current().Client
	rigtest.Eventually(t, 10*time.Second, 200*time.Millisecond, "protection settled on lane "+l.name, func(ctx context.Context) (bool, string, error) {
		pods, err := listPods(ctx, ns)
		if err != nil {
			return false, "", err
		}
		l.pods = nil
		var notes []string
		for _, p := range pods {
			ours := p.Labels[berthv1alpha1.PodGroupLabel] == l.gang() || p.Labels["app"] == l.serve()
			if p.Name == l.filler() || ours {
				if want := ours && l.protect; isProtected(&p) != want {
					notes = append(notes, fmt.Sprintf("%s protected=%v want %v", p.Name, isProtected(&p), want))
				}
			}
			if ours {
				l.pods = append(l.pods, p)
			}
		}
		return len(notes) == 0 && len(l.pods) == 3, strings.Join(notes, "; "), nil
	})
	rigtest.Eventually(t, 10*time.Second, 200*time.Millisecond, "PodGroup "+l.gang()+" Running", func(ctx context.Context) (bool, string, error) {
		var pg berthv1alpha1.PodGroup
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: l.gang()}, &pg); err != nil {
			return false, "", err
		}
		return pg.Status.Phase == berthv1alpha1.PodGroupRunning, "phase " + string(pg.Status.Phase), nil
	})
	nodes := map[string]bool{}
	for _, p := range l.pods {
		nodes[p.Spec.NodeName] = true
	}
	l.claims = claimsOf(t, nodes)
	for _, nc := range l.claims {
		t.Logf("lane %s: NodeClaim %s: %s in %s, node %s", l.name, nc.Name, nc.Labels[corev1.LabelInstanceTypeStable], nc.Labels[karpv1.NodePoolLabelKey], nc.Status.NodeName)
	}
}

// expectDisruptionReported taints a node under the lane's running gang as Karpenter does before
// it drains one, and checks that the gang reports it: condition, Event, exactly one count.
func expectDisruptionReported(t *testing.T, ns string, l *lane) {
	t.Helper()
	var member corev1.Pod
	for _, p := range l.pods {
		if p.Labels[berthv1alpha1.PodGroupLabel] == l.gang() {
			member = p
			break
		}
	}
	taintBefore, totalBefore := disruptionCounts()
	taintNode(t, member.Spec.NodeName)
	expectDisruptedCondition(t, ns, l.gang(), member.Spec.NodeName)
	rigtest.WaitEvent(t, ns, l.gang(), events.ReasonGangMemberDisrupted)
	// Once per node per gang: one gang, one tainted node, one count, and no other cause.
	if taint, total := disruptionCounts(); taint-taintBefore != 1 || total-totalBefore != 1 {
		t.Errorf("berth_podgroup_disruptions_total rose by %v for disrupted_taint and %v in all; want exactly 1 each", taint-taintBefore, total-totalBefore)
	}
}

// expectDisruptedCondition waits for a gang's Disrupted=True condition naming node (any node
// when empty).
func expectDisruptedCondition(t *testing.T, ns, gang, node string) {
	t.Helper()
	rigtest.Eventually(t, 10*time.Second, 200*time.Millisecond, "gang "+gang+" reports the disrupted node", func(ctx context.Context) (bool, string, error) {
		var got berthv1alpha1.PodGroup
		if err := rigtest.Current().Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: gang}, &got); err != nil {
			return false, "", err
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, berthv1alpha1.ConditionDisrupted)
		return cond != nil && cond.Status == metav1.ConditionTrue && strings.Contains(cond.Message, node),
			fmt.Sprintf("conditions %+v", got.Status.Conditions), nil
	})
}

// disruptionCounts reads berth_podgroup_disruptions_total for disrupted_taint and over every
// cause.
func disruptionCounts() (taint, total float64) {
	for _, cause := range disruption.Causes {
		v, _ := metricValue("berth_podgroup_disruptions_total", map[string]string{"reason": cause})
		total += v
		if cause == disruption.CauseDisruptedTaint {
			taint = v
		}
	}
	return taint, total
}

// expectOptOut opts the protected lane out (Deployment annotation false, gang protect false):
// berth removes every mark it added, and with neither a budget nor do-not-disrupt left,
// Karpenter consolidates the node protection alone had held.
func expectOptOut(t *testing.T, ns string, l *lane) {
	t.Helper()
	ctx := context.Background()
	c := rigtest.Current().Client
	patchAnnotation(t, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: l.serve()}}, berthv1alpha1.ProtectAnnotation, "false")
	pgPatch := []byte(`{"spec":{"disruption":{"protect":false}}}`)
	if err := c.Patch(ctx, &berthv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: l.gang()}}, client.RawPatch(types.MergePatchType, pgPatch)); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 10*time.Second, 200*time.Millisecond, "protection removed after opting out", func(ctx context.Context) (bool, string, error) {
		pods, err := listPods(ctx, ns)
		if err != nil {
			return false, "", err
		}
		var still []string
		for _, p := range pods {
			if p.Annotations[karpv1.DoNotDisruptAnnotationKey] != "" || p.Annotations[berthv1alpha1.ProtectedByAnnotation] != "" {
				still = append(still, p.Name)
			}
		}
		return len(still) == 0, fmt.Sprintf("still marked: %v", still), nil
	})
	rigtest.Eventually(t, watchAtMost, time.Second, "Karpenter consolidates the node once protection is gone", func(context.Context) (bool, string, error) {
		return claimsGone(t, l.claims), "NodeClaims still there", nil
	})
}

// expectGuarded checks what the guard did to the NodePools.
func expectGuarded(t *testing.T) {
	t.Helper()
	c := rigtest.Current().Client
	guard := karpv1.Budget{Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonUnderutilized}}
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "guard on "+gpuPool, func(ctx context.Context) (bool, string, error) {
		var np karpv1.NodePool
		if err := c.Get(ctx, client.ObjectKey{Name: gpuPool}, &np); err != nil {
			return false, "", err
		}
		status := np.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation]
		ok := strings.HasPrefix(status, "enforced:") && slices.ContainsFunc(np.Spec.Disruption.Budgets, func(b karpv1.Budget) bool {
			return b.Nodes == guard.Nodes && slices.Equal(b.Reasons, guard.Reasons)
		})
		return ok, fmt.Sprintf("status %q, budgets %+v", status, np.Spec.Disruption.Budgets), nil
	})
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "audit of "+auditPool, func(ctx context.Context) (bool, string, error) {
		var np karpv1.NodePool
		if err := c.Get(ctx, client.ObjectKey{Name: auditPool}, &np); err != nil {
			return false, "", err
		}
		status := np.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation]
		if len(np.Spec.Disruption.Budgets) != 1 || np.Spec.Disruption.ConsolidationPolicy != karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized {
			return false, "", fmt.Errorf("audit changed the NodePool's disruption settings: %+v", np.Spec.Disruption)
		}
		return strings.HasPrefix(status, "unsafe:"), fmt.Sprintf("status %q", status), nil
	})
	rigtest.WaitEvent(t, metav1.NamespaceDefault, gpuPool, events.ReasonConsolidationGuarded)
	rigtest.WaitEvent(t, metav1.NamespaceDefault, auditPool, events.ReasonUnsafeConsolidation)
	for pool, want := range map[string]float64{auditPool: 1, gpuPool: 0} {
		if v, ok := metricValue("berth_nodepool_unsafe_consolidation", map[string]string{"nodepool": pool}); !ok || v != want {
			t.Errorf("berth_nodepool_unsafe_consolidation{nodepool=%s} = %v (found %v), want %v", pool, v, ok, want)
		}
	}
	if _, ok := metricValue("berth_nodepool_unsafe_consolidation", map[string]string{"nodepool": cpuPool}); ok {
		t.Errorf("berth_nodepool_unsafe_consolidation has a series for the CPU pool")
	}
	var cpu karpv1.NodePool
	if err := c.Get(context.Background(), client.ObjectKey{Name: cpuPool}, &cpu); err != nil {
		t.Fatal(err)
	}
	if s, ok := cpu.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation]; ok || len(cpu.Spec.Disruption.Budgets) != 1 {
		t.Errorf("the guard touched the CPU pool: status %q, budgets %+v", s, cpu.Spec.Disruption.Budgets)
	}
}

// expectUndisrupted fails when a pod of the lane was evicted, moved or marked for disruption,
// a NodeClaim or node under them is being disrupted, or the lane's gang reports a disruption.
func expectUndisrupted(ctx context.Context, l *lane, ns string) error {
	c := rigtest.Current().Client
	for _, want := range l.pods {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(&want), &p); err != nil {
			return fmt.Errorf("pod %s: %w", want.Name, err)
		}
		if p.UID != want.UID || p.DeletionTimestamp != nil || p.Spec.NodeName != want.Spec.NodeName {
			return fmt.Errorf("pod %s was disrupted (uid %s→%s, deleting %v, node %s→%s)",
				p.Name, want.UID, p.UID, p.DeletionTimestamp != nil, want.Spec.NodeName, p.Spec.NodeName)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.DisruptionTarget && cond.Status == corev1.ConditionTrue {
				return fmt.Errorf("pod %s is a disruption target: %s", p.Name, cond.Message)
			}
		}
	}
	for _, want := range l.claims {
		var nc karpv1.NodeClaim
		if err := c.Get(ctx, client.ObjectKeyFromObject(&want), &nc); err != nil {
			return fmt.Errorf("GPU NodeClaim %s: %w", want.Name, err)
		}
		if nc.DeletionTimestamp != nil {
			return fmt.Errorf("GPU NodeClaim %s is being deleted", nc.Name)
		}
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, &n); err != nil {
			return fmt.Errorf("GPU node %s: %w", nc.Status.NodeName, err)
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == karpv1.DisruptedTaintKey {
				return fmt.Errorf("GPU node %s is tainted %s", n.Name, taint.Key)
			}
		}
	}
	var pg berthv1alpha1.PodGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: l.gang()}, &pg); err != nil {
		return err
	}
	if cond := meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionDisrupted); cond != nil {
		return fmt.Errorf("gang reports a disruption: %s", cond.Message)
	}
	return nil
}

// claimsOf are the NodeClaims of the named nodes.
func claimsOf(t *testing.T, nodes map[string]bool) []karpv1.NodeClaim {
	t.Helper()
	var list karpv1.NodeClaimList
	if err := rigtest.Current().Client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var out []karpv1.NodeClaim
	for _, nc := range list.Items {
		if nodes[nc.Status.NodeName] {
			out = append(out, nc)
		}
	}
	if len(out) != len(nodes) {
		t.Fatalf("found %d NodeClaims for nodes %v", len(out), nodes)
	}
	return out
}

// claimsGone reports whether every NodeClaim is deleted or being deleted.
func claimsGone(t *testing.T, claims []karpv1.NodeClaim) bool {
	t.Helper()
	for _, want := range claims {
		var nc karpv1.NodeClaim
		err := rigtest.Current().Client.Get(context.Background(), client.ObjectKeyFromObject(&want), &nc)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if nc.DeletionTimestamp == nil {
			return false
		}
	}
	return len(claims) > 0
}

// deletePod deletes a pod at once.
func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := rigtest.Current().Client.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
}

// isProtected reports whether a pod carries berth's do-not-disrupt.
func isProtected(p *corev1.Pod) bool {
	return p.Annotations[karpv1.DoNotDisruptAnnotationKey] == "true" && p.Annotations[berthv1alpha1.ProtectedByAnnotation] == berthv1alpha1.ProtectedByBerth
}

// gpuPod is a pod for a GPU pool requesting gpus nvidia.com/gpu.
func gpuPod(name, ns, pool string, gpus int) *builders.PodBuilder {
	return builders.Pod(name, ns).GPU(gpus).Tolerate(berthv1alpha1.GPUTaintKey, "", corev1.TaintEffectNoSchedule).
		NodeSelector(karpv1.NodePoolLabelKey, pool)
}

// deployment is a one-replica Deployment of pod, opted in to protection when protect.
func deployment(name, ns string, protect bool, pod *builders.PodBuilder) *appsv1.Deployment {
	tmpl := pod.Label("app", name).Obj()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmpl.Labels}, Spec: tmpl.Spec},
		},
	}
	if protect {
		d.Annotations = map[string]string{berthv1alpha1.ProtectAnnotation: "true"}
	}
	return d
}

// namespace creates a fresh namespace for the test.
func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "guard-"}}
	mustCreate(t, ns)
	return ns.Name
}

func mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := rigtest.Current().Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func listPods(ctx context.Context, ns string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := rigtest.Current().Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// taintNode adds Karpenter's disrupted taint to a node, as Karpenter does before it drains it.
func taintNode(t *testing.T, name string) {
	t.Helper()
	c := rigtest.Current().Client
	var n corev1.Node
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	stored := n.DeepCopy()
	n.Spec.Taints = append(n.Spec.Taints, karpv1.DisruptedNoScheduleTaint)
	if err := c.Patch(context.Background(), &n, client.MergeFrom(stored)); err != nil {
		t.Fatalf("tainting node %s: %v", name, err)
	}
}

// patchAnnotation sets one annotation on obj with a merge patch.
func patchAnnotation(t *testing.T, obj client.Object, key, value string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, value)
	if err := rigtest.Current().Client.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("annotating %s: %v", obj.GetName(), err)
	}
}

// metricValue reads a gauge or counter from controller-runtime's registry, where the
// in-process manager registers berth's metrics: the sum over the series with labels (a subset
// of theirs).
func metricValue(name string, labels map[string]string) (float64, bool) {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0, false
	}
	sum, found := 0.0, false
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			found = true
			if m.GetGauge() != nil {
				sum += m.GetGauge().GetValue()
			} else {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum, found
}
