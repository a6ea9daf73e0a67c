// Package e2e runs berth's end-to-end tests on the full rig: kube-apiserver, kube-scheduler,
// kube-controller-manager, kwok and Karpenter's kwok provider with GPU instance types.
package e2e

import (
	"context"
	"testing"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// instanceTypes is the rig's GPU instance-types file, relative to this package.
const instanceTypes = "../testdata/gpu-instance-types.json"

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartCluster(ctx, r, rig.KwokOptions{}); err != nil {
			return err
		}
		if err := r.StartKarpenter(ctx, rig.KarpenterOptions{InstanceTypesFile: instanceTypes}); err != nil {
			return err
		}
		return r.InstallDevNodePools(ctx)
	})
}
