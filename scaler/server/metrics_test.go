package server

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/pods"
	"github.com/berth-dev/berth/scaler/promsource"
	"github.com/berth-dev/berth/scaler/warmseats"
	"github.com/berth-dev/berth/test/scalertest"
	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
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

// TestWarmSeatsNobodyKeeps: a trigger's warmSeats split its headroom into seats only where a
// keeper keeps them — not on a scaler without one (the chart's scaler.warmSeats.enabled off),
// nor for a ScaledObject the keeper refuses (a LeaderWorkerSet target, one not there): there
// the split is off and the headroom is held as serving replicas.
func TestWarmSeatsNobodyKeeps(t *testing.T) {
	_, port, podList := scalertest.Fleet(t, 1)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	md := map[string]string{"ttftSLOSeconds": "2", "warmSeats": "2", "metricsPort": strconv.Itoa(port)}
	refused := &warmseats.Wants{}
	refused.Refuse(warmseats.Key{Namespace: "inference", Name: "llama"}, "LeaderWorkerSet llama: ...")
	for _, tc := range []struct {
		name    string
		seats   *warmseats.Wants
		ignored bool
	}{
		{name: "a keeper", seats: &warmseats.Wants{}},
		{name: "no keeper", seats: nil, ignored: true},
		{name: "refused by the keeper", seats: refused, ignored: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := &Engine{Resolver: &staticResolver{pods: podList}, Pods: pods.New(pods.Options{Clock: clk, TTFTWindow: time.Minute}),
				Prometheus: promsource.New(promsource.Options{}), Policy: scaler.DefaultPolicy, Clock: clk, Seats: tc.seats}
			ev, err := eng.Evaluate(context.Background(), "inference", "llama", md)
			if err != nil {
				t.Fatal(err)
			}
			if got := ev.SeatsIgnored != ""; got != tc.ignored || (ev.Trigger.WarmSeats == 0) != tc.ignored {
				t.Errorf("seats ignored %q with the trigger's warmSeats at %d; want ignored %v", ev.SeatsIgnored, ev.Trigger.WarmSeats, tc.ignored)
			}
		})
	}
}

// TestIdleFleetSetsItsSeats: KEDA has scaled an idle fleet to zero and asks only IsActive; the
// HPA's GetMetrics, which sets the seats while the fleet is active, is not called. IsActive then
// sets them (the trigger's minWarmSeats, none beyond): the last want of the busy hours went stale
// and its seats held their nodes for as long as the ScaledObject lived.
func TestIdleFleetSetsItsSeats(t *testing.T) {
	reps, port, podList := scalertest.Fleet(t, 1)
	reps[0].Set(scalertest.Page(0, 0, 0))
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	wants := &warmseats.Wants{}
	eng := &Engine{Resolver: &staticResolver{pods: podList}, Pods: pods.New(pods.Options{Clock: clk, TTFTWindow: time.Minute}),
		Prometheus: promsource.New(promsource.Options{}), Policy: scaler.DefaultPolicy, Clock: clk, Seats: wants}
	s := &Server{Engine: eng}
	ref := &pb.ScaledObjectRef{Name: "llama", Namespace: "inference", ScalerMetadata: map[string]string{
		"ttftSLOSeconds": "2", "warmSeats": "4", "minWarmSeats": "1", "metricsPort": strconv.Itoa(port)}}
	res, err := s.IsActive(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if res.GetResult() {
		t.Fatal("an idle fleet is active")
	}
	w, ok := wants.Fresh(clk.Now())[warmseats.Key{Namespace: "inference", Name: "llama"}]
	if !ok || w.Seats > 1 {
		t.Errorf("want %+v (set: %v), want at most the trigger's minWarmSeats, 1", w, ok)
	}
}
