package autoscale_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/scaler/modelstore"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestARestartedScalerKeepsWhatItLearned: a fleet sized on its SLO teaches the scaler what a
// replica carries (one replica swamped at twice its rate); the scaler, stopped as a rollout
// stops it and started again, sizes the fleet on that capacity from its first evaluation — the
// model written to its namespace at the stop and read back — where a scaler without it would
// hold the fleet to learn again.
func TestARestartedScalerKeepsWhatItLearned(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	startAtMinimum(t, vllmsim.ScaledObjectOptions{ScalerAddress: scalerProc.GRPCAddress,
		Min: 1, Max: 3, PollingInterval: 5, CooldownPeriod: 10, ScaleDownWindow: 10, MetricsPort: metricsPort,
		Metadata: map[string]string{"ttftSLOSeconds": "1", "coldStartSeconds": "30"}}, "berth-slo")
	// 8 requests/s on a replica that serves 4: a queue through the window, first tokens late —
	// the replica at its limit, the capacity's first lesson.
	if err := sim.SetRate(ctx, 8); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 3*time.Minute, 2*time.Second, "the scaler learns what a replica carries", func(ctx context.Context) (bool, string, error) {
		c := capacityGauge(ctx)
		return c > 0, fmt.Sprintf("capacity %v; scaler: %s", c, scalerState(ctx)), nil
	})
	// No load: no window teaches anything more, so the capacity stays what it is.
	if err := sim.SetRate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(70 * time.Second)
	learned := capacityGauge(ctx)
	if learned <= 0 {
		t.Fatalf("capacity %v once the load stopped; scaler: %s", learned, scalerState(ctx))
	}
	if err := scalerProc.Restart(ctx, r, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rig.BerthNamespace, Name: modelstore.Name(namespace, appLabel)}, &cm); err != nil {
		t.Fatalf("the model's ConfigMap after the stop: %v", err)
	}
	rigtest.Eventually(t, time.Minute, time.Second, "the restarted scaler sizes on the capacity learned before", func(ctx context.Context) (bool, string, error) {
		c := capacityGauge(ctx)
		restored := scalerSeries(ctx, `berth_scaler_models_restored_total{outcome="restored"}`)
		return c == learned && strings.HasSuffix(restored, " 1"), fmt.Sprintf("capacity %v (learned %v); %s; scaler: %s", c, learned, restored, scalerState(ctx)), nil
	})
}

// capacityGauge is the scaler's berth_scaler_replica_capacity_requests_per_second for the
// fleet under test (0 when it exports none).
func capacityGauge(ctx context.Context) float64 {
	line := scalerSeries(ctx, "berth_scaler_replica_capacity_requests_per_second{")
	if i := strings.LastIndexByte(line, ' '); i >= 0 && strings.Contains(line, `scaled_object="`+appLabel+`"`) {
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			return v
		}
	}
	return 0
}
