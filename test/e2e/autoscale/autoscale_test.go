package autoscale_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/test/rigtest"
)

func TestLoadScalesVLLMUpAndDown(t *testing.T) {
	r := rigtest.Current()
	ctx := context.Background()
	c := r.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, vllmsim.Deployment(namespace, appLabel, rig.GPUNodePoolName("l4"), metricsPort, nil)); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 3*time.Minute, time.Second, "the first replica runs on a GPU node Karpenter launched", func(ctx context.Context) (bool, string, error) {
		ready, total, err := replicas(ctx, c)
		return ready == 1, fmt.Sprintf("%d/%d ready", ready, total), err
	})
	nodesBefore := gpuNodes(ctx, t, c)
	// What a user writes, with an HPA that may scale down after 10 s (default 5 min) to keep the
	// test short.
	so := vllmsim.ScaledObject(namespace, appLabel, vllmsim.ScaledObjectOptions{ScalerAddress: scalerProc.GRPCAddress,
		Min: 1, Max: 5, PollingInterval: 5, CooldownPeriod: 10, ScaleDownWindow: 10, MetricsPort: metricsPort,
		TargetQueueDepth: "4", TargetKVCache: "0.8"})
	if err := c.Create(ctx, so); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 2*time.Minute, time.Second, "KEDA creates the HPA and it reads berth's metric", func(ctx context.Context) (bool, string, error) {
		var hpa autoscalingv2.HorizontalPodAutoscaler
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "keda-hpa-" + appLabel}, &hpa); err != nil {
			return false, err.Error(), nil
		}
		for _, m := range hpa.Status.CurrentMetrics {
			if m.External != nil && strings.Contains(m.External.Metric.Name, "berth-queue-depth") {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("conditions %v", hpa.Status.Conditions), nil
	})

	// Load: 14 requests/s, against 4/s per replica. The queue grows; the HPA adds replicas;
	// Karpenter launches GPU nodes for them; vllm-sim serves each new pod as it runs.
	if err := sim.SetRate(ctx, 14); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 5*time.Minute, 2*time.Second, "replicas rise to absorb the load", func(ctx context.Context) (bool, string, error) {
		ready, total, err := replicas(ctx, c)
		return ready >= 4, fmt.Sprintf("%d/%d ready; scaler: %s", ready, total, scalerState(ctx)), err
	})
	if after := gpuNodes(ctx, t, c); after <= nodesBefore {
		t.Errorf("GPU nodes %d → %d: Karpenter should have launched nodes for the new replicas", nodesBefore, after)
	}

	// Load stops: the queue drains, sequences finish, replicas fall back to minReplicaCount.
	if err := sim.SetRate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 4*time.Minute, 2*time.Second, "replicas fall back to the minimum", func(ctx context.Context) (bool, string, error) {
		_, total, err := replicas(ctx, c)
		return total == 1, fmt.Sprintf("%d replicas; scaler: %s", total, scalerState(ctx)), err
	})
}

// replicas counts the Deployment's ready and live pods.
func replicas(ctx context.Context, c client.Client) (ready, total int, err error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{"app": appLabel}); err != nil {
		return 0, 0, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		total++
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	return ready, total, nil
}

func gpuNodes(ctx context.Context, t *testing.T, c client.Client) int {
	t.Helper()
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.MatchingLabels{karpv1.NodePoolLabelKey: rig.GPUNodePoolName("l4")}); err != nil {
		t.Fatal(err)
	}
	return len(nodes.Items)
}

// scalerState is the scaler's own view (its berth_scaler_* series), for failure messages.
func scalerState(ctx context.Context) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, scalerProc.MetricsURL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var keep []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "berth_scaler_signal_value") || strings.HasPrefix(l, "berth_scaler_desired_replicas") ||
			strings.HasPrefix(l, "berth_scaler_current_replicas") || strings.HasPrefix(l, "berth_scaler_evaluation_errors_total") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "; ")
}
