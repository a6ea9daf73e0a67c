package server

import (
	"testing"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"

	"github.com/berth-dev/berth/scaler/pods"
	"github.com/berth-dev/berth/scaler/warmseats"
	"github.com/berth-dev/berth/test/scalertest"
)

// TestAWantGoesWithItsConnection: the warm seats a GetMetrics call asks for are its
// connection's; when KEDA closes that connection (its operator restarted, or now asks another
// scaler replica) the want is forgotten at once, not kept for WantTTL against the replica KEDA
// asks now.
func TestAWantGoesWithItsConnection(t *testing.T) {
	wants := &warmseats.Wants{}
	h := startEngine(t, 1, pods.Options{Timeout: 300 * time.Millisecond, FreshFor: time.Millisecond},
		func(e *Engine) { e.Seats = wants }, nil)
	h.reps[0].Set(scalertest.Page(1, 1, 0.2))
	if _, err := h.client.GetMetrics(ctx(t), &pb.GetMetricsRequest{ScaledObjectRef: h.ref(map[string]string{"targetQueueDepth": "4"}), MetricName: "berth-queue-depth"}); err != nil {
		t.Fatal(err)
	}
	key := warmseats.Key{Namespace: "inference", Name: "llama"}
	w, ok := wants.Fresh(time.Time{})[key]
	if !ok || w.Source == "" {
		t.Fatalf("want after GetMetrics = %+v (found %v), want one named after its connection", w, ok)
	}
	if err := h.conn.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := wants.Fresh(time.Time{})[key]; !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the want of connection %s outlived it by 5 s", w.Source)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
