package autoscale_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/modelstore"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestARestartedScalerKeepsWhatItLearned: a fleet sized on its SLO teaches the scaler what a
// replica carries (one replica swamped at twice its rate); the scaler, stopped as a rollout
// stops it and started again, sizes the fleet on that capacity from its first evaluation — the
// model written to its namespace (each minute it learned, and at the stop) and read back —
// where a scaler without it would hold the fleet to learn again. (That the stop writes what
// the minute's write has not is scaler/server's TestOnlyAFedModelIsWritten.)
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
	// No load: the windows after the restart teach nothing, so the restarted scaler's
	// capacity is the one it read back.
	if err := sim.SetRate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := scalerProc.Restart(ctx, r, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	stored := storedCapacity(ctx, t)
	rigtest.Eventually(t, time.Minute, time.Second, "the restarted scaler sizes on the capacity learned before", func(ctx context.Context) (bool, string, error) {
		c := capacityGauge(ctx)
		restored := scalerSeries(ctx, `berth_scaler_models_restored_total{outcome="restored"}`)
		return c == stored && strings.HasSuffix(restored, " 1"), fmt.Sprintf("capacity %v (written %v); %s; scaler: %s", c, stored, restored, scalerState(ctx)), nil
	})
}

// storedCapacity is the capacity of the fleet model the scaler wrote to its namespace; the
// test fails if there is none.
func storedCapacity(ctx context.Context, t *testing.T) float64 {
	t.Helper()
	var list corev1.ConfigMapList
	if err := rigtest.Current().Client.List(ctx, &list, client.InNamespace(rig.BerthNamespace), client.MatchingLabels{
		berthv1alpha1.ComponentLabel: berthv1alpha1.FleetModelComponent}); err != nil {
		t.Fatal(err)
	}
	for _, cm := range list.Items {
		if cm.Data[modelstore.KeyScaledObject] != namespace+"/"+appLabel {
			continue
		}
		zr, err := gzip.NewReader(bytes.NewReader(cm.BinaryData[modelstore.KeyModel]))
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		var m scaler.FleetModel
		if err := m.UnmarshalBinary(data); err != nil {
			t.Fatal(err)
		}
		if m.Capacity <= 0 {
			t.Fatalf("the model written has no capacity")
		}
		return m.Capacity
	}
	t.Fatalf("no model of %s/%s written among %d", namespace, appLabel, len(list.Items))
	return 0
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
