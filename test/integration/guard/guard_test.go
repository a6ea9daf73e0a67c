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

// TestConsolidationGuard: with a GPU NodePool and a CPU NodePool both on
// WhenEmptyOrUnderutilized, consolidateAfter 0s and a 100% budget,
//   - the guard adds an Underutilized budget to the GPU pool (enforce, the default), reports the
//     audit pool (Warning Event, metric) and leaves the CPU pool alone;
//   - a running gang and an opted-in Deployment on a GPU node left underutilized are marked
//     do-not-disrupt and never disrupted, while Karpenter consolidates the underutilized CPU
//     node in the same window;
//   - a disrupted GPU node is reported on the gang (condition, Event, metric);
//   - opting out removes berth's do-not-disrupt.
func TestConsolidationGuard(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client

	// 1. The guard acts on the NodePools as soon as it runs.
	expectGuarded(t)

	// 2. A gang and an opted-in Deployment share a GPU node with a filler; two Deployment pods
	// are shown to Karpenter together with a CPU filler, so each filler's node is left
	// underutilized when it goes.
	ns := namespace(t)
	mustCreate(t, builders.PodGroup("train", ns).MinMember(2).Obj())
	for i := range 2 {
		mustCreate(t, gpuPod(fmt.Sprintf("train-%d", i), ns, 1).Member("train").Obj())
	}
	mustCreate(t, deployment("serve", ns, true, gpuPod("", ns, 1)))
	mustCreate(t, gpuPod("gpu-filler", ns, 4).Obj())
	mustCreate(t, cpuPod("cpu-filler", ns).Request(corev1.ResourceCPU, "12").Obj())
	mustCreate(t, deployment("web", ns, false, cpuPod("", ns)))

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
		return running == 6 && len(pods) == 6, strings.Join(states, " "), nil
	})

	// 3. berth marks the gang's members and the opted-in Deployment's pod, and nothing else.
	var protected []corev1.Pod
	var web corev1.Pod
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "running gang and opted-in pods protected", func(ctx context.Context) (bool, string, error) {
		pods, err := listPods(ctx, ns)
		if err != nil {
			return false, "", err
		}
		protected = nil
		var notes []string
		for _, p := range pods {
			want := p.Labels[berthv1alpha1.PodGroupLabel] != "" || p.Labels["app"] == "serve"
			if p.Labels["app"] == "web" {
				web = p
			}
			if isProtected(&p) != want {
				notes = append(notes, fmt.Sprintf("%s protected=%v want %v", p.Name, isProtected(&p), want))
			}
			if want {
				protected = append(protected, p)
			}
		}
		return len(notes) == 0, strings.Join(notes, "; "), nil
	})
	// The status controller reports Running on its own schedule (members can be protected
	// first): wait for it rather than read it once.
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "PodGroup Running", func(ctx context.Context) (bool, string, error) {
		var pg berthv1alpha1.PodGroup
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "train"}, &pg); err != nil {
			return false, "", err
		}
		return pg.Status.Phase == berthv1alpha1.PodGroupRunning, "phase " + string(pg.Status.Phase), nil
	})
	gpuNodes := map[string]bool{}
	for _, p := range protected {
		gpuNodes[p.Spec.NodeName] = true
	}
	gpuClaims := claimsOf(t, gpuNodes)
	cpuClaims := claimsOf(t, map[string]bool{web.Spec.NodeName: true})
	for _, nc := range append(slices.Clone(gpuClaims), cpuClaims...) {
		t.Logf("NodeClaim %s: %s in %s, node %s", nc.Name, nc.Labels[corev1.LabelInstanceTypeStable], nc.Labels[karpv1.NodePoolLabelKey], nc.Status.NodeName)
	}

	// 4. The fillers go: both nodes are now underutilized, with cheaper replacements.
	for _, name := range []string{"gpu-filler", "cpu-filler"} {
		if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	var cpuConsolidated time.Duration
	for {
		elapsed := time.Since(start)
		if err := expectUndisrupted(ctx, protected, gpuClaims, ns); err != nil {
			t.Fatalf("after %s: %v", elapsed.Round(time.Second), err)
		}
		if cpuConsolidated == 0 {
			gone, err := claimsGone(ctx, cpuClaims)
			if err != nil {
				t.Fatal(err)
			}
			if gone {
				cpuConsolidated = elapsed
				t.Logf("Karpenter consolidated the underutilized CPU node %s after %s", web.Spec.NodeName, elapsed.Round(time.Second))
			}
		}
		if cpuConsolidated > 0 && elapsed >= watchAtLeast && elapsed >= cpuConsolidated+15*time.Second {
			break
		}
		if elapsed > watchAtMost {
			t.Fatalf("Karpenter did not consolidate the underutilized CPU node %s within %s", web.Spec.NodeName, watchAtMost)
		}
		time.Sleep(time.Second)
	}
	t.Logf("GPU pods and nodes undisrupted for %s", time.Since(start).Round(time.Second))

	// 5. A disrupted GPU node is reported on the gang.
	member := protected[0]
	for _, p := range protected {
		if p.Labels[berthv1alpha1.PodGroupLabel] != "" {
			member = p
			break
		}
	}
	taintNode(t, member.Spec.NodeName)
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "gang reports the disrupted node", func(ctx context.Context) (bool, string, error) {
		var got berthv1alpha1.PodGroup
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "train"}, &got); err != nil {
			return false, "", err
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, berthv1alpha1.ConditionDisrupted)
		return cond != nil && cond.Status == metav1.ConditionTrue && strings.Contains(cond.Message, member.Spec.NodeName),
			fmt.Sprintf("conditions %+v", got.Status.Conditions), nil
	})
	rigtest.WaitEvent(t, ns, "train", events.ReasonGangMemberDisrupted)
	if v, ok := metricValue("berth_podgroup_disruptions_total", map[string]string{"reason": "disrupted_taint"}); !ok || v < 1 {
		t.Errorf("berth_podgroup_disruptions_total{reason=disrupted_taint} = %v (found %v), want >= 1", v, ok)
	}

	// 6. Opting out removes berth's marks.
	patchAnnotation(t, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "serve"}}, berthv1alpha1.ProtectAnnotation, "false")
	pgPatch := []byte(`{"spec":{"disruption":{"protect":false}}}`)
	if err := c.Patch(ctx, &berthv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "train"}}, client.RawPatch(types.MergePatchType, pgPatch)); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "protection removed after opting out", func(ctx context.Context) (bool, string, error) {
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
}

// expectGuarded checks what the guard did to the three NodePools.
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

// expectUndisrupted fails when a protected pod was evicted, moved or marked for disruption, or
// a NodeClaim or node under them is being disrupted, or the gang reports a disruption.
func expectUndisrupted(ctx context.Context, protected []corev1.Pod, claims []karpv1.NodeClaim, ns string) error {
	c := rigtest.Current().Client
	for _, want := range protected {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(&want), &p); err != nil {
			return fmt.Errorf("protected pod %s: %w", want.Name, err)
		}
		if p.UID != want.UID || p.DeletionTimestamp != nil || p.Spec.NodeName != want.Spec.NodeName {
			return fmt.Errorf("protected pod %s was disrupted (uid %s→%s, deleting %v, node %s→%s)",
				p.Name, want.UID, p.UID, p.DeletionTimestamp != nil, want.Spec.NodeName, p.Spec.NodeName)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.DisruptionTarget && cond.Status == corev1.ConditionTrue {
				return fmt.Errorf("protected pod %s is a disruption target: %s", p.Name, cond.Message)
			}
		}
	}
	for _, want := range claims {
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
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "train"}, &pg); err != nil {
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
func claimsGone(ctx context.Context, claims []karpv1.NodeClaim) (bool, error) {
	for _, want := range claims {
		var nc karpv1.NodeClaim
		err := rigtest.Current().Client.Get(ctx, client.ObjectKeyFromObject(&want), &nc)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, err
		}
		if nc.DeletionTimestamp == nil {
			return false, nil
		}
	}
	return true, nil
}

// isProtected reports whether a pod carries berth's do-not-disrupt.
func isProtected(p *corev1.Pod) bool {
	return p.Annotations[karpv1.DoNotDisruptAnnotationKey] == "true" && p.Annotations[berthv1alpha1.ProtectedByAnnotation] == "berth"
}

// gpuPod is a pod for the GPU pool requesting gpus nvidia.com/gpu.
func gpuPod(name, ns string, gpus int) *builders.PodBuilder {
	return builders.Pod(name, ns).GPU(gpus).Tolerate(berthv1alpha1.GPUResource, "", corev1.TaintEffectNoSchedule).
		NodeSelector(karpv1.NodePoolLabelKey, gpuPool)
}

// cpuPod is a pod for the CPU pool.
func cpuPod(name, ns string) *builders.PodBuilder {
	return builders.Pod(name, ns).NodeSelector(karpv1.NodePoolLabelKey, cpuPool)
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
// in-process manager registers berth's metrics.
func metricValue(name string, labels map[string]string) (float64, bool) {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0, false
	}
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
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}
