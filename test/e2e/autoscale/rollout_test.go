package autoscale_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestRolloutDoesNotCreep: a fleet at its minimum of 2 replicas, idle, rolls out a revision
// whose replicas export nothing the scaler can read (a wrong metrics port, an image that
// exports other names). With maxSurge 1 and minReadySeconds each step of the rollout adds a
// ready replica that is not read next to the one it replaces, so the scaler holds (partial data:
// no scale-down). The hold keeps the HPA's 2 — the
// Deployment's spec.replicas, read for each evaluation. Held at the live replicas (2 and the
// surge pod), the HPA wrote 3, the rollout surged again on that, and the fleet crept up a
// replica a step. Run after another test's fleet shrank, the new revision's pods take the
// deleted replicas' IPs (kwok reuses them at once): the scaler's memory of an endpoint is its
// pod's, so they count as unread, not as sampled on the deleted pods' last pages.
func TestRolloutDoesNotCreep(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	c := r.Client
	ns := rigtest.Namespace(t, "rollout")
	const app = "llama-roll"
	// The new revision's pods carry "unread": the emulator serves none of them.
	if _, err := rigtest.StartVLLMSim(ctx, r, berthBin, ns, "app="+app+",!unread", metricsPort, "--max-num-seqs=8", "--service-time=2s"); err != nil {
		t.Fatal(err)
	}
	dep := vllmsim.Deployment(ns, app, rig.GPUNodePoolName("l4"), metricsPort, nil)
	vllmsim.SetModelLoad(dep, 0)
	dep.Spec.Replicas = ptr.To[int32](2)
	one, none := intstr.FromInt32(1), intstr.FromInt32(0)
	// A new replica counts as available 20 s after it is ready (vLLM fleets wait out a warm-up):
	// until then the old replica it replaces stays, and both are live.
	dep.Spec.MinReadySeconds = 20
	dep.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &none}}
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	so := vllmsim.ScaledObject(ns, app, vllmsim.ScaledObjectOptions{ScalerAddress: scalerProc.GRPCAddress,
		Min: 2, Max: 6, PollingInterval: 5, CooldownPeriod: 10, ScaleDownWindow: 10, MetricsPort: metricsPort, TargetQueueDepth: "4"})
	if err := c.Create(ctx, so); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 4*time.Minute, time.Second, "2 replicas ready, the HPA reading berth", func(ctx context.Context) (bool, string, error) {
		ready, total, err := replicasOf(ctx, c, ns, app)
		if err != nil {
			return false, "", err
		}
		var hpa autoscalingv2.HorizontalPodAutoscaler
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keda-hpa-" + app}, &hpa); err != nil {
			return false, fmt.Sprintf("%d/%d ready; HPA: %v", ready, total, err), nil
		}
		reads := false
		for _, m := range hpa.Status.CurrentMetrics {
			reads = reads || (m.External != nil && strings.Contains(m.External.Metric.Name, "berth-queue-depth"))
		}
		return ready == 2 && total == 2 && reads, fmt.Sprintf("%d/%d ready; HPA conditions %v", ready, total, hpa.Status.Conditions), nil
	})

	// The rollout.
	if err := c.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	dep.Spec.Template.Labels["unread"] = "true"
	if err := c.Update(ctx, dep); err != nil {
		t.Fatal(err)
	}
	highest, heldPartial := int32(2), false
	var done time.Time
	for end := time.Now().Add(5 * time.Minute); time.Now().Before(end); time.Sleep(time.Second) {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(dep), &d); err != nil {
			t.Fatal(err)
		}
		highest = max(highest, ptr.Deref(d.Spec.Replicas, 0))
		heldPartial = heldPartial || strings.Contains(scalerSeries(ctx, "berth_scaler_held{"), fmt.Sprintf(`namespace=%q,reason="partial",scaled_object=%q} 1`, ns, app))
		rolled := d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == ptr.Deref(d.Spec.Replicas, 0) &&
			d.Status.Replicas == d.Status.UpdatedReplicas && d.Status.AvailableReplicas == d.Status.UpdatedReplicas
		switch {
		case rolled && done.IsZero():
			done = time.Now()
		case !done.IsZero() && time.Since(done) > 30*time.Second: // and the HPA's next look after it
			end = time.Now()
		}
	}
	if done.IsZero() {
		t.Fatalf("the rollout did not finish in 5 minutes; scaler: %s", scalerState(ctx))
	}
	if highest != 2 {
		t.Errorf("the Deployment went up to %d replicas during an idle rollout, want it held at 2; scaler: %s", highest, scalerState(ctx))
	}
	if !heldPartial {
		t.Errorf("the scaler never held on partial data during the rollout: the check above proved nothing; scaler: %s", scalerState(ctx))
	}
}
