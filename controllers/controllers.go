// Package controllers registers every berth reconciler with a controller-runtime manager, in
// one place, so the set of running controllers is visible at a glance.
package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/berth-dev/berth/controllers/nativegang"
	"github.com/berth-dev/berth/controllers/nodepool/guard"
	"github.com/berth-dev/berth/controllers/pod/protect"
	"github.com/berth-dev/berth/controllers/podgroup/adapter"
	"github.com/berth-dev/berth/controllers/podgroup/admission"
	"github.com/berth-dev/berth/controllers/podgroup/disruption"
	"github.com/berth-dev/berth/controllers/podgroup/status"
	"github.com/berth-dev/berth/controllers/provisioningrequest"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/internal/index"
	"github.com/berth-dev/berth/internal/ledger"
)

// Options are shared by all controllers.
type Options struct {
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
	// Provisioning configures whole-gang provisioning through Karpenter. It is turned off at
	// start when Karpenter's API (karpenter.sh/v1 NodeClaim) is not served.
	Provisioning admission.ProvisioningOptions
	// AdmissionResync is the longest gang admission waits without events; its default when zero.
	AdmissionResync time.Duration
	// StrandedAfter is how long a released member may be unschedulable on its node before
	// berth replaces it; admission's default when zero.
	StrandedAfter time.Duration
	// NodeReadyBudget is how long a booting node counts as capacity on its way; admission's
	// default when zero.
	NodeReadyBudget time.Duration
	// ConsolidationGuard is the consolidation guard's mode for NodePools without the
	// consolidation-guard annotation; enforce when empty.
	ConsolidationGuard guard.Mode
	// Fence, when set, is checked before every promise and release of gang admission (set by
	// NewManager under leader election).
	Fence admission.Fence
}

// controller is what each reconciler package provides.
type controller interface {
	SetupWithManager(ctrl.Manager) error
}

// registration is one controller of Setup's list, with the name setup errors give.
type registration struct {
	name string
	c    controller
}

// Setup builds every controller and registers it with mgr. An error names the controller that
// failed to start.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	rec := events.NewRecorder(mgr.GetEventRecorder("berth-controller"))
	if opts.Provisioning.Enabled {
		if _, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: "karpenter.sh", Kind: "NodeClaim"}, "v1"); err != nil {
			ctrl.Log.WithName("setup").Info("Karpenter's API is not served; whole-gang provisioning is off", "reason", err.Error())
			opts.Provisioning.Enabled = false
		} else if err := mgr.Add(admission.SeatPriorityClassInstaller(mgr.GetClient())); err != nil {
			return fmt.Errorf("adding the seat PriorityClass installer: %w", err)
		}
	}
	// The consolidation guard and NodeClaim watches need Karpenter's API: a watch of a kind the
	// cluster does not serve would stop the manager.
	karpenter, err := served(mgr, schema.GroupKind{Group: "karpenter.sh", Kind: "NodePool"}, "v1")
	if err != nil {
		return err
	}
	// One account of promised room for every controller that promises it: gang admission and
	// ProvisioningRequests decide under its lock and see each other's promises before the cache
	// does; native gangs hold there the room their seats give way to (internal/ledger).
	book := ledger.New(opts.Clock)
	if err := index.Register(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	all := []registration{
		{status.Name, status.New(mgr.GetClient(), mgr.GetAPIReader(), opts.Clock, rec)},
		{adapter.Name, &adapter.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: rec}},
		{admission.Name, admission.New(mgr.GetClient(), mgr.GetAPIReader(), opts.Clock, rec, admission.Options{Provisioning: opts.Provisioning, Resync: opts.AdmissionResync, StrandedAfter: opts.StrandedAfter, NodeReadyBudget: opts.NodeReadyBudget, Fence: opts.Fence, Ledger: book})},
		{protect.Name, &protect.Reconciler{Client: mgr.GetClient()}},
		{disruption.Name, &disruption.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: opts.Clock, Recorder: rec, Karpenter: karpenter}},
	}
	if karpenter {
		all = append(all, registration{guard.Name, &guard.Reconciler{Client: mgr.GetClient(), Recorder: rec, DefaultMode: opts.ConsolidationGuard}})
	} else {
		ctrl.Log.WithName("setup").Info("Karpenter's API (karpenter.sh/v1 NodePool) is not served; the consolidation guard is off until berth restarts")
	}
	// ProvisioningRequests (Kueue's provisioning admission check) where their API is served.
	provReqs, err := served(mgr, schema.GroupKind{Group: "autoscaling.x-k8s.io", Kind: "ProvisioningRequest"}, "v1")
	if err != nil {
		return err
	}
	if provReqs {
		all = append(all, registration{provisioningrequest.Name, provisioningrequest.New(mgr.GetClient(), mgr.GetAPIReader(), opts.Clock, rec, provisioningrequest.Options{
			SeatNamespace: opts.Provisioning.SeatNamespace, SeatImage: opts.Provisioning.SeatImage, Ledger: book})})
		if !opts.Provisioning.Enabled { // the seats need their PriorityClass either way
			if err := mgr.Add(admission.SeatPriorityClassInstaller(mgr.GetClient())); err != nil {
				return fmt.Errorf("adding the seat PriorityClass installer: %w", err)
			}
		}
	} else {
		ctrl.Log.WithName("setup").Info("the ProvisioningRequest API (autoscaling.x-k8s.io/v1) is not served; berth serves no ProvisioningRequests until it restarts")
	}
	// Kubernetes' native gangs (feature gate GenericWorkload) where their API is served.
	native, err := served(mgr, schema.GroupKind{Group: "scheduling.k8s.io", Kind: "PodGroup"}, "v1beta1")
	if err != nil {
		return err
	}
	if native && opts.Provisioning.Enabled {
		all = append(all, registration{nativegang.Name, nativegang.New(mgr.GetClient(), mgr.GetAPIReader(), opts.Clock, rec, nativegang.Options{
			SeatNamespace: opts.Provisioning.SeatNamespace, SeatImage: opts.Provisioning.SeatImage, Ledger: book})})
	} else {
		ctrl.Log.WithName("setup").Info("native gangs (scheduling.k8s.io/v1beta1 PodGroup) are not served, or provisioning is off; berth provisions no capacity for them", "served", native)
	}
	for _, c := range all {
		if err := c.c.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up controller %s: %w", c.name, err)
		}
	}
	return nil
}

// Names are the names of every controller Setup registers (the nodepool guard only where
// Karpenter is installed, the ProvisioningRequest and native-gang controllers only where their APIs are served), as logs and the controller_runtime_* metrics show them.
func Names() []string {
	return []string{status.Name, adapter.Name, admission.Name, protect.Name, disruption.Name, guard.Name, provisioningrequest.Name, nativegang.Name}
}

// served reports whether the cluster serves a kind at a version.
func served(mgr ctrl.Manager, gk schema.GroupKind, version string) (bool, error) {
	_, err := mgr.GetRESTMapper().RESTMapping(gk, version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	}
	return false, fmt.Errorf("looking up %s/%s: %w", gk, version, err)
}
