package devcluster

import (
	"context"
	"fmt"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
)

// DemoNamespace holds the demo's workloads.
const DemoNamespace = "berth-demo"

// Demo runs the scripted scenario against the dev cluster whose kubeconfig is given, printing
// what happens as it happens:
//
//  1. a pending 8-GPU training pod makes Karpenter launch a p5 node, the node becomes Ready,
//     kube-scheduler binds the pod and kwok runs it;
//  2. a 4-member gang is held at its gate while that node is busy, and released and bound whole
//     once it frees;
//  3. a 2-member gang of 8-GPU pods on a family with no nodes gets both nodes from Karpenter in
//     one batch through berth's seat pods, and is admitted and started whole (demo_provision.go);
//  4. on a GPU NodePool that lets Karpenter consolidate underutilized nodes, berth's
//     consolidation guard and pod protection keep a running gang's underutilized node from
//     being repacked (demo_guard.go);
//  5. a vLLM Deployment under a KEDA ScaledObject pointing at berth's scaler follows a load
//     ramp up and down while Karpenter adds and removes L4 nodes (demo_autoscale.go).
func Demo(ctx context.Context, kubeconfig string, out io.Writer) error {
	c, err := demoClient(kubeconfig)
	if err != nil {
		return err
	}
	p := &printer{out: out, start: time.Now()}
	if err := resetDemo(ctx, c, p); err != nil {
		return err
	}
	p.say("scene 1: an 8-GPU training pod on a cluster with no GPU nodes")
	pod, err := trainingScene(ctx, c, p)
	if err != nil {
		return fmt.Errorf("scene 1: %w", err)
	}
	p.say("scene 2: a 4-member gang (2 GPUs each) while the H100 node is busy")
	if err := gangScene(ctx, c, p, pod); err != nil {
		return fmt.Errorf("scene 2: %w", err)
	}
	p.say("scene 3: a 2-node gang (2 x 8 H200 GPUs, one zone) on a family with no nodes yet")
	if err := provisionScene(ctx, c, p); err != nil {
		return fmt.Errorf("scene 3: %w", err)
	}
	p.say("scene 4: the consolidation guard on a GPU NodePool that consolidates underutilized nodes")
	if err := guardScene(ctx, c, p); err != nil {
		return fmt.Errorf("scene 4: %w", err)
	}
	p.say("scene 5: a vLLM Deployment sized by KEDA and berth's scaler from queue depth and KV-cache usage")
	if err := autoscaleScene(ctx, c, p); err != nil {
		return fmt.Errorf("scene 5: %w", err)
	}
	p.say("done in %s. Inspect with KUBECONFIG=%s; stop everything with 'berth dev down'",
		time.Since(p.start).Round(time.Second), kubeconfig)
	return nil
}

// demoClient is a client (with watch) for the dev cluster's kubeconfig.
func demoClient(kubeconfig string) (client.WithWatch, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w (is the dev cluster up? run 'berth dev up')", kubeconfig, err)
	}
	scheme, err := rig.NewScheme()
	if err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return c, nil
}

// trainingScene creates one 8-GPU pod and follows it until it runs on the node Karpenter
// launched for it; the pod is returned, busy, for scene 2.
func trainingScene(ctx context.Context, c client.Client, p *printer) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	pod := demoTrainingPod("llm-train-0", "h100", 8)
	if err := c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	p.say("created pod %s/%s requesting 8 nvidia.com/gpu with nodeSelector %s=h100", pod.Namespace, pod.Name, awsv1.LabelInstanceGPUName)
	if err := p.follow(ctx, c, client.ObjectKeyFromObject(pod)); err != nil {
		return nil, err
	}
	p.say("Karpenter provisioned a GPU node for the pending pod, which now runs.")
	return pod, nil
}

// demoTrainingPod is a pod asking for gpus GPUs of one product.
func demoTrainingPod(name, product string, gpus int64) *corev1.Pod {
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DemoNamespace, Labels: map[string]string{"app": "llm-train"}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{awsv1.LabelInstanceGPUName: product},
			Containers: []corev1.Container{{
				Name: "trainer", Image: "nvcr.io/nvidia/pytorch:25.01-py3",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"), berthv1alpha1.GPUResource: q},
					Limits:   corev1.ResourceList{berthv1alpha1.GPUResource: q},
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

// say prints a line stamped with the time since the demo started.
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
					l[awsv1.LabelInstanceGPUCount], l[awsv1.LabelInstanceGPUName])
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
					p.once("node/ready/"+n.Name, "node %s is Ready with %s nvidia.com/gpu allocatable", n.Name, quantity(n.Status.Allocatable, berthv1alpha1.GPUResource))
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

// quantity prints a resource of a list, "0" when it is not there.
func quantity(l corev1.ResourceList, name corev1.ResourceName) string {
	q, ok := l[name]
	if !ok {
		return "0"
	}
	return q.String()
}

// shorten cuts a message to 160 characters for one line of output.
func shorten(s string) string {
	if len(s) > 160 {
		return s[:157] + "..."
	}
	return strings.TrimSpace(s)
}
