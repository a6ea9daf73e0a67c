// Package provisioningrequest_test serves ProvisioningRequests (autoscaling.x-k8s.io/v1, the CRD
// from the module berth's types come from) with berth's controller as its own process, as the
// chart runs it, on a rig with kube-scheduler and kwok nodes: check-capacity books room on
// existing nodes with seats and gives it to the consuming pods; what does not fit, or cannot be
// built, gets Cluster Autoscaler's conditions. (best-effort-atomic-scale-up with Karpenter is in
// test/e2e/gangs.)
package provisioningrequest_test

import (
	"context"
	"testing"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

var berth *rigtest.BerthProcess

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartCluster(ctx, r, rig.KwokOptions{}); err != nil {
			return err
		}
		// Before the controller starts: it serves ProvisioningRequests where their API is served.
		if err := rigtest.InstallProvisioningRequestCRD(ctx, r); err != nil {
			return err
		}
		var err error
		if berth, err = rigtest.NewBerthProcess(ctx, r); err != nil {
			return err
		}
		return berth.Start(ctx)
	})
}
