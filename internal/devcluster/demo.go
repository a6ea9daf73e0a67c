package devcluster

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/gpu"
	"github.com/berth-dev/berth/test/rig"
)

// DemoNamespace holds the demo's workloads.
const DemoNamespace = "berth-demo"

// Demo runs the scripted scenario against the dev cluster whose kubeconfig is given, printing
// what happens as it happens: a pending 8-GPU training pod makes Karpenter launch a p5 node,
// the node becomes Ready, kube-scheduler binds the pod and kwok runs it; then a 4-member gang
// is held at its gate while that node is busy, and released and bound whole once it frees.
func Demo(ctx context.Context, kubeconfig string, out io.Writer) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig %s: %w (is the dev cluster up? run 'berth dev up')", kubeconfig, err)
	}
	scheme, err := rig.NewScheme()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	p := &printer{out: out, start: time.Now()}
	p.say("scene 1: an 8-GPU training pod on a cluster with no GPU nodes")
	if err := resetNamespace(ctx, c); err != nil {
		return err
	}
	pod := demoTrainingPod("llm-train-0", "h100", 8)
	if err := c.Create(ctx, pod); err != nil {
		return fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	p.say("created pod %s/%s requesting 8 nvidia.com/gpu with nodeSelector %s=h100", pod.Namespace, pod.Name, gpu.LabelInstanceGPUName)
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	if err := p.follow(ctx, c, client.ObjectKeyFromObject(pod)); err != nil {
		return err
	}
	p.say("Karpenter provisioned a GPU node for the pending pod, which now runs.")

	p.say("scene 2: a 4-member gang (2 GPUs each) while the H100 node is busy")
	if err := gangScene(ctx, c, p, pod); err != nil {
		return err
	}
	p.say("done. Inspect with KUBECONFIG=%s; stop everything with 'berth dev down'", kubeconfig)
	return nil
}

// gangScene holds a gang at its gate while its GPUs are taken, then frees them and shows the
// whole gang released and bound together.
func gangScene(ctx context.Context, c client.Client, p *printer, busy *corev1.Pod) error {
	pg := &berthv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "ddp", Namespace: DemoNamespace},
		Spec:       berthv1alpha1.PodGroupSpec{MinMember: 4},
	}
	if err := c.Create(ctx, pg); err != nil {
		return fmt.Errorf("creating PodGroup: %w", err)
	}
	for i := range 4 {
		m := demoTrainingPod(fmt.Sprintf("ddp-%d", i), "h100", 2)
		m.Labels[berthv1alpha1.PodGroupLabel] = "ddp"
		if err := c.Create(ctx, m); err != nil {
			return fmt.Errorf("creating member %s: %w", m.Name, err)
		}
	}
	p.say("created PodGroup ddp (minMember 4) and 4 members; the webhook gated them")
	var cond string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && cond == "" {
		var got berthv1alpha1.PodGroup
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), &got); err != nil {
			return fmt.Errorf("reading PodGroup: %w", err)
		}
		if sc := meta.FindStatusCondition(got.Status.Conditions, berthv1alpha1.ConditionScheduled); sc != nil && sc.Reason != "WaitingForMembers" {
			cond = sc.Reason + ": " + sc.Message
		}
		time.Sleep(250 * time.Millisecond)
	}
	p.say("PodGroup ddp is held — %s", cond)
	if err := p.members(ctx, c, "held", 3*time.Second); err != nil {
		return err
	}
	p.say("the busy pod %s finishes; its 8 GPUs are free", busy.Name)
	if err := c.Delete(ctx, busy, client.GracePeriodSeconds(0)); err != nil {
		return fmt.Errorf("deleting %s: %w", busy.Name, err)
	}
	return p.members(ctx, c, "released", 60*time.Second)
}

// members prints each member's state (gated, released, bound, running) as it changes, until
// all run or the time is up (for phase "held": the whole time, failing if any is bound).
func (p *printer) members(ctx context.Context, c client.Client, phase string, d time.Duration) error {
	last := map[string]string{}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(DemoNamespace), client.MatchingLabels{berthv1alpha1.PodGroupLabel: "ddp"}); err != nil {
			return fmt.Errorf("listing members: %w", err)
		}
		running := 0
		for _, m := range pods.Items {
			st := "gated"
			switch {
			case m.Status.Phase == corev1.PodRunning:
				st, running = "running on "+m.Spec.NodeName, running+1
			case m.Spec.NodeName != "":
				st = "bound to " + m.Spec.NodeName
			case len(m.Spec.SchedulingGates) == 0:
				st = "released"
			}
			if last[m.Name] != st {
				last[m.Name] = st
				p.say("  member %s: %s", m.Name, st)
				if phase == "held" && st != "gated" {
					return fmt.Errorf("member %s left its gate while the gang could not fit", m.Name)
				}
			}
		}
		if phase == "released" && running == len(pods.Items) && running > 0 {
			p.say("all %d members of ddp run together", running)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if phase == "released" {
		return fmt.Errorf("the gang did not start within %s", d)
	}
	return nil
}

func resetNamespace(ctx context.Context, c client.Client) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DemoNamespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", DemoNamespace, err)
	}
	if err := c.DeleteAllOf(ctx, &berthv1alpha1.PodGroup{}, client.InNamespace(DemoNamespace)); err != nil {
		return fmt.Errorf("removing earlier demo PodGroups: %w", err)
	}
	if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(DemoNamespace), client.GracePeriodSeconds(0)); err != nil {
		return fmt.Errorf("removing earlier demo pods: %w", err)
	}
	for {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(DemoNamespace)); err != nil {
			return fmt.Errorf("listing demo pods: %w", err)
		}
		if len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// demoTrainingPod is a pod asking for gpus GPUs of one product.
func demoTrainingPod(name, product string, gpus int64) *corev1.Pod {
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DemoNamespace, Labels: map[string]string{"app": "llm-train"}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{gpu.LabelInstanceGPUName: product},
			Containers: []corev1.Container{{
				Name: "trainer", Image: "nvcr.io/nvidia/pytorch:25.01-py3",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"), gpu.ResourceGPU: q},
					Limits:   corev1.ResourceList{gpu.ResourceGPU: q},
				},
			}},
		},
	}
}

// printer prints timestamped lines, each change once.
type printer struct {
	out   io.Writer
	start time.Time
	seen  map[string]bool
}

func (p *printer) say(format string, args ...any) {
	fmt.Fprintf(p.out, "[%6.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// once prints a line the first time its key is seen.
func (p *printer) once(key, format string, args ...any) {
	if p.seen == nil {
		p.seen = map[string]bool{}
	}
	if p.seen[key] {
		return
	}
	p.seen[key] = true
	p.say(format, args...)
}

// follow prints NodeClaims, nodes and the pod as they change, until the pod runs.
func (p *printer) follow(ctx context.Context, c client.Client, key client.ObjectKey) error {
	for {
		var pod corev1.Pod
		if err := c.Get(ctx, key, &pod); err != nil {
			return fmt.Errorf("reading pod %s: %w", key, err)
		}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				p.once("unschedulable", "pod %s is Pending: %s", pod.Name, shorten(cond.Message))
			}
		}
		var claims karpv1.NodeClaimList
		if err := c.List(ctx, &claims); err != nil {
			return fmt.Errorf("listing NodeClaims: %w", err)
		}
		sort.Slice(claims.Items, func(i, j int) bool { return claims.Items[i].Name < claims.Items[j].Name })
		for _, nc := range claims.Items {
			l := nc.Labels
			p.once("nc/"+nc.Name, "Karpenter created NodeClaim %s (NodePool %s)", nc.Name, l[karpv1.NodePoolLabelKey])
			if cond := nc.StatusConditions().Get(karpv1.ConditionTypeLaunched); cond != nil && cond.IsTrue() {
				p.once("nc/launched/"+nc.Name, "NodeClaim %s launched: %s %s in %s, %s GPUs (%s)", nc.Name,
					l[corev1.LabelInstanceTypeStable], l[karpv1.CapacityTypeLabelKey], l[corev1.LabelTopologyZone],
					l[gpu.LabelInstanceGPUCount], l[gpu.LabelInstanceGPUName])
			}
			if cond := nc.StatusConditions().Get(karpv1.ConditionTypeRegistered); cond != nil && cond.IsTrue() {
				p.once("nc/registered/"+nc.Name, "NodeClaim %s registered node %s", nc.Name, nc.Status.NodeName)
			}
			if cond := nc.StatusConditions().Get(karpv1.ConditionTypeInitialized); cond != nil && cond.IsTrue() {
				p.once("nc/initialized/"+nc.Name, "NodeClaim %s initialized", nc.Name)
			}
		}
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes); err != nil {
			return fmt.Errorf("listing nodes: %w", err)
		}
		for _, n := range nodes.Items {
			p.once("node/"+n.Name, "node %s joined (%s)", n.Name, n.Labels[corev1.LabelInstanceTypeStable])
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					p.once("node/ready/"+n.Name, "node %s is Ready with %s nvidia.com/gpu allocatable", n.Name, quantity(n.Status.Allocatable, gpu.ResourceGPU))
				}
			}
		}
		if pod.Spec.NodeName != "" {
			p.once("bound", "kube-scheduler bound pod %s to node %s", pod.Name, pod.Spec.NodeName)
		}
		if pod.Status.Phase == corev1.PodRunning {
			p.once("running", "pod %s is Running with IP %s", pod.Name, pod.Status.PodIP)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s did not start in time (phase %s): %w", pod.Name, pod.Status.Phase, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func quantity(l corev1.ResourceList, name corev1.ResourceName) string {
	q, ok := l[name]
	if !ok {
		return "0"
	}
	return q.String()
}

func shorten(s string) string {
	if len(s) > 160 {
		return s[:157] + "..."
	}
	return strings.TrimSpace(s)
}
