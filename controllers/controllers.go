// Package controllers registers every berth reconciler with a controller-runtime manager, in
// one place, so the set of running controllers is visible at a glance.
package controllers

import (
	"fmt"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/berth-dev/berth/controllers/adapter"
	"github.com/berth-dev/berth/controllers/admission"
	"github.com/berth-dev/berth/controllers/podgroup"
	"github.com/berth-dev/berth/internal/events"
)

// Options are shared by all controllers.
type Options struct {
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
}

// controller is what each reconciler package provides.
type controller interface {
	SetupWithManager(ctrl.Manager) error
}

// Setup builds every controller and registers it with mgr. An error names the controller that
// failed to start.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	rec := events.NewRecorder(mgr.GetEventRecorder("berth-controller"))
	all := []struct {
		name string
		c    controller
	}{
		{podgroup.Name, &podgroup.Reconciler{Client: mgr.GetClient(), Clock: opts.Clock, Recorder: rec}},
		{adapter.Name, &adapter.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: rec}},
		{admission.Name, &admission.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: opts.Clock, Recorder: rec}},
	}
	for _, c := range all {
		if err := c.c.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up controller %s: %w", c.name, err)
		}
	}
	return nil
}
