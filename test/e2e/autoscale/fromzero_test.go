package autoscale_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestScaleFromZeroThroughTheEndpointPicker: a fleet at zero replicas has no pod to report a
// queue; an endpoint picker in front (llm-d's, with flow control, emulated by vllm-sim) holds
// the requests and a real Prometheus scrapes its queue. berth reads it through the trigger's
// demandPreset, so the ScaledObject activates, KEDA scales 0 → 1, the HPA 1 → N on the held
// backlog, the picker hands its queue to the replicas, and with the load gone the fleet returns
// to 0.
func TestScaleFromZeroThroughTheEndpointPicker(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	const app, pool = "qwen", "qwen-pool"
	// Each replica loads its model this long before it serves (shorter than vLLM's usual, to
	// keep the test short; long enough to tell from a replica that serves at once).
	const modelLoad = 20 * time.Second
	ns, picker, dep := ownFleet(t, "inference-zero", app, modelLoad,
		"--max-num-seqs=8", "--service-time=2s", "--kv-blocks=1000", "--kv-blocks-per-seq=110", "--inference-pool="+pool)
	adminURL, err := url.Parse(picker.Admin)
	if err != nil {
		t.Fatal(err)
	}
	prom := rigtest.StartPrometheus(t, time.Second, []rigtest.PrometheusTarget{{Address: adminURL.Host, Labels: map[string]string{"namespace": ns}}})
	so := vllmsim.ScaledObject(ns, app, vllmsim.ScaledObjectOptions{ScalerAddress: scalerProc.GRPCAddress,
		Min: 0, Max: 4, PollingInterval: 5, CooldownPeriod: 10, ScaleDownWindow: 10, MetricsPort: metricsPort,
		TargetQueueDepth: "4", Metadata: map[string]string{"demandPreset": "endpoint-picker", "inferencePool": pool, "prometheusAddress": prom}})
	if err := c.Create(ctx, so); err != nil {
		t.Fatal(err)
	}
	state := func(ctx context.Context) string {
		st, _ := picker.Status(ctx)
		return fmt.Sprintf("picker %+v; scaler: %s; %s", st, scalerSeries(ctx, "berth_scaler_signal_value", "berth_scaler_desired_replicas",
			"berth_scaler_active", "berth_scaler_evaluation_errors_total"), scaledObjectState(ctx, c, ns, app))
	}
	// No load: nothing waits at the picker, nothing runs: KEDA takes the fleet to zero.
	// KEDA sets the Deployment to zero (created at one, its pod may not even exist yet: no pod
	// alone proves nothing).
	rigtest.Eventually(t, 3*time.Minute, time.Second, "the idle fleet scales to zero", func(ctx context.Context) (bool, string, error) {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(dep), &d); err != nil {
			return false, "", err
		}
		_, total, err := replicasOf(ctx, c, ns, app)
		return d.Spec.Replicas != nil && *d.Spec.Replicas == 0 && total == 0, fmt.Sprintf("Deployment at %v, %d pods; %s", ptr.Deref(d.Spec.Replicas, 1), total, state(ctx)), err
	})
	// Load arrives with no replica: the picker holds it; berth sees the queue through Prometheus.
	start := time.Now()
	if err := picker.SetRate(ctx, 6); err != nil {
		t.Fatal(err)
	}
	var firstReady time.Duration
	rigtest.Eventually(t, 4*time.Minute, time.Second, "0 → 1: the held queue activates the ScaledObject", func(ctx context.Context) (bool, string, error) {
		ready, total, err := replicasOf(ctx, c, ns, app)
		if ready >= 1 && firstReady == 0 {
			firstReady = time.Since(start)
		}
		return ready >= 1, fmt.Sprintf("%d/%d ready; %s", ready, total, state(ctx)), err
	})
	rigtest.Eventually(t, 5*time.Minute, 2*time.Second, "1 → N: the backlog adds replicas, the picker's queue drains", func(ctx context.Context) (bool, string, error) {
		ready, total, err := replicasOf(ctx, c, ns, app)
		st, serr := picker.Status(ctx)
		return ready >= 2 && serr == nil && st.Held == 0, fmt.Sprintf("%d/%d ready; %s", ready, total, state(ctx)), err
	})
	t.Logf("0 → 1 ready replica %.1fs after the first request (model load %s)", firstReady.Seconds(), modelLoad)
	if firstReady < modelLoad {
		t.Errorf("the first replica was Ready %s after the first request, before its %s model load", firstReady, modelLoad)
	}
	if err := picker.SetRate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 4*time.Minute, 2*time.Second, "N → 0 once the load is gone", func(ctx context.Context) (bool, string, error) {
		_, total, err := replicasOf(ctx, c, ns, app)
		return total == 0, fmt.Sprintf("%d replicas; %s", total, state(ctx)), err
	})
	if !strings.Contains(scalerSeries(ctx, "berth_scaler_evaluation_errors_total"), app) {
		return
	}
	t.Logf("evaluation errors along the way: %s", scalerSeries(ctx, "berth_scaler_evaluation_errors_total"))
}
