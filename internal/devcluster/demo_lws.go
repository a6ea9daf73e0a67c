package devcluster

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/vllmsim"
)

// Scene 7: multi-node inference. A model too large for one node is served by a
// LeaderWorkerSet: groups of a leader and a worker, 8 A100s each, on a family with no nodes.
// Each group is one gang (berth's lws adapter: no PodGroup written by hand), its two nodes
// launched by Karpenter in one batch; a KEDA ScaledObject on the LeaderWorkerSet points at
// berth's scaler, which reads each group's leader (the dev cluster's vLLM emulator serves the
// leaders) and counts a group once all of it is ready. The demo ramps the load from one group's
// worth to three and back, printing groups, signals and nodes. On a dev cluster without the
// LeaderWorkerSet controller the scene says so and skips.
const (
	lwsName    = "llama-405b"
	lwsProduct = "a100"
	lwsSize    = 2
	lwsMax     = 3
	// lwsStep bounds each phase of the ramp: a group's two nodes launch and boot.
	lwsStep = 4 * time.Minute
	// lwsTimeout bounds scene 7.
	lwsTimeout = 2*time.Minute + 4*lwsStep + 2*time.Minute
)

// lwsScene plays scene 7 (see above).
func lwsScene(ctx context.Context, d *demo) error {
	c, p := d.c, d.p
	probe := &unstructured.UnstructuredList{}
	probe.SetGroupVersionKind(vllmsim.LeaderWorkerSetGVK.GroupVersion().WithKind(vllmsim.LeaderWorkerSetGVK.Kind + "List"))
	if err := c.List(ctx, probe, client.InNamespace(DemoNamespace), client.Limit(1)); meta.IsNoMatchError(err) {
		p.say("skipped: this dev cluster runs without the LeaderWorkerSet controller (build it with 'hack/build-tools.sh lws-controller', then 'berth dev down && berth dev up')")
		return nil
	} else if err != nil {
		return fmt.Errorf("listing LeaderWorkerSets: %w", err)
	}
	if err := waitForKEDA(ctx, d); err != nil {
		return err
	}
	// The emulator spreads its load over every replica it serves: scene 5's vLLM Deployment
	// would take a share of the groups' load.
	if err := removeAutoscaleScene(ctx, c); err != nil {
		return err
	}
	var eps corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: EndpointsConfigMap}, &eps); err != nil {
		return fmt.Errorf("reading the dev cluster's endpoints (ConfigMap kube-system/%s; restart with 'berth dev down && berth dev up'): %w", EndpointsConfigMap, err)
	}
	lws := vllmsim.LeaderWorkerSet(DemoNamespace, lwsName, vllmsim.GroupOptions{Replicas: 1, Size: lwsSize, GPUs: 8,
		Pool: rig.GPUNodePoolName(lwsProduct), Port: VLLMSimPort, LeaderLabels: map[string]string{berthv1alpha1.VLLMSimLabel: "true"}})
	if err := c.Create(ctx, lws); err != nil {
		return fmt.Errorf("creating LeaderWorkerSet %s: %w", lwsName, err)
	}
	p.say("created LeaderWorkerSet %s/%s: 1 group of %d pods (a leader and a worker, 8 A100s each: one model across two nodes; one group serves %.0f requests/s)",
		DemoNamespace, lwsName, lwsSize, perReplicaRate)
	w := &autoscaleWatch{c: c, p: p, metricsURL: eps.Data["scaler-metrics"], loadURL: eps.Data["vllm-sim-admin"], scaledObject: lwsName,
		pods: client.MatchingLabels{berthv1alpha1.LWSNameLabel: lwsName}, product: lwsProduct, groupSize: lwsSize, nodes: map[string]bool{}}
	if err := w.until(ctx, lwsStep, func(s autoscaleSnap) bool { return s.ready == 1 }); err != nil {
		return fmt.Errorf("first group: %w", err)
	}
	var pg berthv1alpha1.PodGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: lwsName + "-0"}, &pg); err == nil {
		p.say("berth adopted the group as PodGroup %s (minMember %d, one zone, owned by the leader pod): its two nodes came in one batch and it was released whole", pg.Name, pg.Spec.MinMember)
	}
	so := vllmsim.ScaledObject(DemoNamespace, lwsName, vllmsim.ScaledObjectOptions{ScalerAddress: eps.Data["scaler-grpc"],
		Min: 1, Max: lwsMax, PollingInterval: 5, CooldownPeriod: 30, ScaleDownWindow: 15, MetricsPort: VLLMSimPort,
		TargetQueueDepth: "4", TargetKVCache: "0.8"})
	vllmsim.TargetLeaderWorkerSet(so)
	if err := c.Create(ctx, so); err != nil {
		return fmt.Errorf("creating ScaledObject %s: %w", lwsName, err)
	}
	p.say("created ScaledObject %s on the LeaderWorkerSet: external-push trigger → berth scaler, 1–%d groups", lwsName, lwsMax)
	if err := w.ramp(ctx, lwsStep, []rampPhase{
		{2, "load: 2 requests/s — one group copes", func(s autoscaleSnap) bool { return s.elapsed > 20*time.Second }},
		{12, "load: 12 requests/s — three groups' worth", func(s autoscaleSnap) bool { return s.ready >= lwsMax }},
		{0, "load stops", func(s autoscaleSnap) bool { return s.total == 1 }},
	}); err != nil {
		return err
	}
	p.say("the LeaderWorkerSet followed its load in whole groups: up to %d groups on %d A100 nodes, back to 1", w.peakReplicas, w.peakNodes)
	return nil
}

// removeAutoscaleScene deletes scene 5's ScaledObject and vLLM Deployment, if they are there.
func removeAutoscaleScene(ctx context.Context, c client.Client) error {
	so := vllmsim.ScaledObject(DemoNamespace, inferenceName, vllmsim.ScaledObjectOptions{})
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: DemoNamespace, Name: inferenceName}}
	for _, o := range []client.Object{so, dep} {
		if err := c.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationForeground)); client.IgnoreNotFound(err) != nil && !meta.IsNoMatchError(err) {
			return fmt.Errorf("removing scene 5's %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, inferenceName, err)
		}
	}
	return poll(ctx, time.Second, time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := demoPods(ctx, c, client.MatchingLabels{appLabel: inferenceName})
		return len(pods) == 0, err
	})
}
