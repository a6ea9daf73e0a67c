package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/targets"
)

// countingResolver counts the reads of a target's replicas and answers n, or err.
type countingResolver struct {
	reads int
	n     int
	err   error
}

func (r *countingResolver) Resolve(context.Context, string, string, *scaler.Trigger) (targets.Info, error) {
	return targets.Info{Selector: labels.Everything()}, nil
}

func (r *countingResolver) List(context.Context, string, labels.Selector) ([]scaler.Pod, error) {
	return nil, nil
}

func (r *countingResolver) Replicas(context.Context, string, targets.Info) (int, bool, error) {
	r.reads++
	return r.n, r.err == nil, r.err
}

// TestSpecReads: the HPA's per-metric calls share one read; a later sync reads again (the HPA
// may have scaled since); activity evaluations (every second on KEDA's stream) never read and
// use the last read; a failed read holds at the live replicas (no stale count) until one
// succeeds.
func TestSpecReads(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	r := &countingResolver{n: 4}
	var s specs
	read := func(fresh bool, at time.Duration) (int, bool) {
		return s.replicas(ctx, r, "inference", "llama", targets.Info{Target: &targets.TargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "llama"}}, fresh, t0.Add(at))
	}
	if n, ok := read(false, 0); ok {
		t.Fatalf("an activity evaluation before any read: %d, want none (no read)", n)
	}
	if n, ok := read(true, 0); !ok || n != 4 || r.reads != 1 {
		t.Fatalf("first metric: %d, %v after %d reads; want 4 from one read", n, ok, r.reads)
	}
	for _, at := range []time.Duration{100 * time.Millisecond, 900 * time.Millisecond} {
		if n, ok := read(true, at); !ok || n != 4 || r.reads != 1 {
			t.Fatalf("another metric of the same sync (+%v): %d, %v after %d reads; want the one read shared", at, n, ok, r.reads)
		}
	}
	r.n = 6 // the HPA scaled
	if n, ok := read(false, 5*time.Second); !ok || n != 4 || r.reads != 1 {
		t.Fatalf("activity: %d, %v after %d reads; want the last read, no new one", n, ok, r.reads)
	}
	if n, ok := read(true, 15*time.Second); !ok || n != 6 || r.reads != 2 {
		t.Fatalf("the next sync: %d, %v after %d reads; want 6, read again", n, ok, r.reads)
	}
	r.err = errors.New("etcdserver: request timed out")
	failedBefore := testutil.ToFloat64(targetReadErrors.WithLabelValues("inference", "llama"))
	if n, ok := read(true, 30*time.Second); ok {
		t.Fatalf("a failed read answered %d: a held decision must not keep a count the HPA may have left", n)
	}
	if got := testutil.ToFloat64(targetReadErrors.WithLabelValues("inference", "llama")) - failedBefore; got != 1 {
		t.Errorf("berth_scaler_target_read_errors_total rose by %v, want 1", got)
	}
	if n, ok := read(false, 31*time.Second); ok {
		t.Fatalf("activity after a failed read answered %d, want none", n)
	}
	r.err = nil
	if n, ok := read(true, 45*time.Second); !ok || n != 6 {
		t.Fatalf("after the API recovered: %d, %v; want 6", n, ok)
	}
	// A trigger with podSelector (no target resolved) never reads, nor gets another's count.
	reads := r.reads
	if n, ok := s.replicas(ctx, r, "inference", "llama", targets.Info{}, true, t0.Add(45*time.Second)); ok || r.reads != reads {
		t.Fatalf("no target: %d, %v after %d more reads; want none", n, ok, r.reads-reads)
	}
	// Retargeted: the last read was of another target.
	other := targets.Info{Target: &targets.TargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "llama-v2"}}
	if n, ok := s.replicas(ctx, r, "inference", "llama", other, false, t0.Add(46*time.Second)); ok {
		t.Fatalf("activity after a retarget answered the old target's %d", n)
	}
}
