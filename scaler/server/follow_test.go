package server

import (
	"testing"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/test/scalertest"
)

// TestFollowKeepsARatio: a prefill ScaledObject following its decode ScaledObject at 0.5 asks
// for at least half the decode fleet's own count, through its berth-follow-replicas metric; two
// ScaledObjects following each other follow each other's own needs and cannot ratchet up.
func TestFollowKeepsARatio(t *testing.T) {
	h := start(t, 2, nil)
	for _, r := range h.reps {
		r.Set(scalertest.Page(20, 8, 0.5)) // 40 waiting: decode's queue target 4 asks 10
	}
	decode := h.ref(map[string]string{"targetQueueDepth": "4"})
	decode.Name = "llama-decode"
	prefill := h.ref(map[string]string{"targetQueueDepth": "100", "followScaledObject": "llama-decode", "followRatio": "0.5"})
	prefill.Name = "llama-prefill"
	// metric is the replica count the HPA computes from the signal's value (its target is 1
	// replica for follow, 4 waiting for the queue).
	metric := func(ref *pb.ScaledObjectRef, s scaler.Signal) int {
		t.Helper()
		resp, err := h.client.GetMetrics(ctx(t), &pb.GetMetricsRequest{ScaledObjectRef: ref, MetricName: s.MetricName()})
		if err != nil {
			t.Fatal(err)
		}
		return int(resp.MetricValues[0].MetricValueFloat) // n replicas are sent as n + ¼ milli
	}
	// Before the decode ScaledObject was evaluated, the ratio is unknown: it follows prefill's own.
	if v := metric(prefill, scaler.SignalFollow); v != 1 {
		t.Errorf("follow before decode is known = %v, want prefill's own 1 replica", v)
	}
	metric(decode, scaler.SignalQueue)
	if v := metric(prefill, scaler.SignalFollow); v != 5 {
		t.Errorf("follow = %v, want half of decode's 10: 5 replicas", v)
	}
	// Mutual following: each floor is the other's own count, so repeated evaluations settle.
	decode.ScalerMetadata["followScaledObject"], decode.ScalerMetadata["followRatio"] = "llama-prefill", "2"
	for range 5 {
		metric(decode, scaler.SignalFollow)
		metric(prefill, scaler.SignalFollow)
	}
	if d, p := metric(decode, scaler.SignalFollow), metric(prefill, scaler.SignalFollow); d != 10 || p != 5 {
		t.Errorf("mutual following ratcheted: decode %v, prefill %v; want 10 and 5 replicas", d, p)
	}
}
