package server

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/berth-dev/berth/scaler"
)

// TestRecordExportsTheSLOModel: an evaluation of a trigger with an SLO exports what its model
// learned — the capacity and the share of first tokens no replica serves within the TTFT
// objective (berth_scaler_unattainable_ratio) — one without an SLO leaves both unset, and a
// ScaledObject KEDA stops asking about loses them.
func TestRecordExportsTheSLOModel(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &series{seen: map[[2]string]time.Time{}, heldSince: map[[2]string]time.Time{}}
	slo := &scaler.Trigger{SLO: scaler.SLO{TTFT: 1}}
	record("record-test", "llama", slo, scaler.Decision{Capacity: 0.7, MissFloor: 0.04}, scaler.Observation{}, 0, 0, now)
	s.touch("record-test", "llama", now)
	record("record-test", "queue-only", &scaler.Trigger{}, scaler.Decision{MissFloor: 0.5}, scaler.Observation{}, 0, 0, now)
	s.touch("record-test", "queue-only", now)
	if got := testutil.ToFloat64(unattainableRatio.WithLabelValues("record-test", "llama")); got != 0.04 {
		t.Errorf("berth_scaler_unattainable_ratio = %v, want 0.04", got)
	}
	if got := testutil.ToFloat64(replicaCapacity.WithLabelValues("record-test", "llama")); got != 0.7 {
		t.Errorf("berth_scaler_replica_capacity_requests_per_second = %v, want 0.7", got)
	}
	if unattainableRatio.DeleteLabelValues("record-test", "queue-only") {
		t.Error("a trigger without an SLO exported berth_scaler_unattainable_ratio")
	}
	s.expire(now.Add(time.Minute))
	if unattainableRatio.DeleteLabelValues("record-test", "llama") || replicaCapacity.DeleteLabelValues("record-test", "llama") {
		t.Error("the SLO model's series outlived their ScaledObject")
	}
}
