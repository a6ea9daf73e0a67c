package server

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/pods"
	"github.com/berth-dev/berth/scaler/promsource"
	"github.com/berth-dev/berth/test/scalertest"
)

func TestHeldForCountsAnUnbrokenHold(t *testing.T) {
	var s series
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	steps := []struct {
		at   time.Duration
		held bool
		want time.Duration
	}{
		{0, true, 0},
		{30 * time.Second, true, 30 * time.Second},
		{time.Minute, false, 0}, // the hold breaks
		{90 * time.Second, true, 0},
		{5 * time.Minute, true, 210 * time.Second},
	}
	for _, st := range steps {
		if got := s.heldFor("inference", "llama", st.held, t0.Add(st.at)); got != st.want {
			t.Errorf("at %v (held %v): held for %v, want %v", st.at, st.held, got, st.want)
		}
	}
	if got := s.heldFor("inference", "qwen", true, t0.Add(5*time.Minute)); got != 0 {
		t.Errorf("another ScaledObject inherits the hold: %v", got)
	}
}

// TestHeldDecisionKeepsTheHPAsCount: a rollout's surge pod on top of the 2 replicas the HPA
// asks for, and one replica not read (partial data, so the decision holds). The hold keeps the
// target's spec.replicas, read for the evaluation: answering the 3 live replicas made the HPA
// write 3, and the rollout's next step surged on that. Without the target's count (a ScaledJob)
// it holds the live replicas, as before.
func TestHeldDecisionKeepsTheHPAsCount(t *testing.T) {
	_, port, podList := scalertest.Fleet(t, 2)
	surge := scaler.Pod{Name: "vllm-new", IP: "127.0.99.1", Ready: true} // nothing listens: not read
	md := map[string]string{"targetQueueDepth": "4", "metricsPort": strconv.Itoa(port)}
	for _, tc := range []struct {
		name     string
		res      *staticResolver
		want     int
		wantSpec bool
	}{
		{name: "the target's count read", res: &staticResolver{pods: append(podList, surge), spec: 2, hasSpec: true}, want: 2, wantSpec: true},
		{name: "no target to read", res: &staticResolver{pods: append(podList, surge)}, want: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := &Engine{Resolver: tc.res, Pods: pods.New(pods.Options{}), Prometheus: promsource.New(promsource.Options{}), Policy: scaler.DefaultPolicy}
			ev, err := eng.Evaluate(context.Background(), "inference", "llama", md)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Decision.Held != scaler.HeldPartial || ev.Decision.Desired != tc.want || ev.Observation.HasSpec != tc.wantSpec {
				t.Errorf("held %q at %d (spec read: %v); want held %q at %d", ev.Decision.Held, ev.Decision.Desired, ev.Observation.HasSpec, scaler.HeldPartial, tc.want)
			}
			if ev.Decision.Current != 3 {
				t.Errorf("current %d, want the 3 live replicas", ev.Decision.Current)
			}
		})
	}
}
