package server

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/targets"
)

// TestAModelIsOfItsFleet: what the SLO signal learned of a ScaledObject's replicas is kept
// while the ScaledObject names the same fleet, and dropped when its name comes to stand for
// another — recreated (another UID), pointed at another target or selector, another model, or
// another objective (what a replica carries is measured at it). Knobs that do not change what
// a replica carries (the headroom) keep it. The old fleet's model expires when no evaluation
// asks for it.
func TestAModelIsOfItsFleet(t *testing.T) {
	base := targets.Info{UID: "so-1", Selector: labels.SelectorFromSet(labels.Set{"app": "llama"}),
		Target: &targets.TargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "llama"}}
	trigger := func(mod func(*scaler.Trigger)) *scaler.Trigger {
		tr := &scaler.Trigger{SLO: scaler.SLO{TTFT: 2, ITL: 0.15, Attainment: 0.99, HeadroomQuantile: 0.9}}
		mod(tr)
		return tr
	}
	same := func(*scaler.Trigger) {}
	cases := []struct {
		name string
		info func(targets.Info) targets.Info
		tr   func(*scaler.Trigger)
		kept bool
	}{
		{"the same fleet", func(i targets.Info) targets.Info { return i }, same, true},
		{"another headroom", func(i targets.Info) targets.Info { return i }, func(tr *scaler.Trigger) { tr.SLO.HeadroomQuantile = 0.5 }, true},
		{"recreated", func(i targets.Info) targets.Info { i.UID = "so-2"; return i }, same, false},
		{"another target", func(i targets.Info) targets.Info {
			i.Target = &targets.TargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "llama-h100"}
			return i
		}, same, false},
		{"another selector", func(i targets.Info) targets.Info {
			i.Selector = labels.SelectorFromSet(labels.Set{"app": "llama", "track": "green"})
			return i
		}, same, false},
		{"another model", func(i targets.Info) targets.Info { return i }, func(tr *scaler.Trigger) { tr.Model = "llama-70b" }, false},
		{"another TTFT objective", func(i targets.Info) targets.Info { return i }, func(tr *scaler.Trigger) { tr.SLO.TTFT = 1 }, false},
		{"another attainment", func(i targets.Info) targets.Info { return i }, func(tr *scaler.Trigger) { tr.SLO.Attainment = 0.95 }, false},
	}
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var m models
			first := trigger(same)
			m.learn("inference", "llama", fleetOf(base, first), scaler.Observation{}, first.SLO, now)
			m.m[[3]string{"inference", "llama", fleetOf(base, first)}].model.Capacity = 6 // learned: 6 requests/s a replica
			next := trigger(tc.tr)
			got := m.learn("inference", "llama", fleetOf(tc.info(base), next), scaler.Observation{}, next.SLO, now.Add(time.Minute))
			if kept := got.Capacity == 6; kept != tc.kept {
				t.Errorf("capacity %v; want the model kept: %v", got.Capacity, tc.kept)
			}
			// The model of the fleet before expires with the evaluations that stopped.
			m.expire(now.Add(30 * time.Second))
			if n := len(m.m); n != 1 {
				t.Errorf("%d models after the one not fed since expired, want 1", n)
			}
		})
	}
}
