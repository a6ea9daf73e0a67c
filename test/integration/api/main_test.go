// Package api_test checks the PodGroup CRD's OpenAPI and CEL validation on a real
// kube-apiserver: good PodGroups are accepted and defaulted, bad ones are rejected with the
// messages users will see.
package api_test

import (
	"context"
	"testing"

	"github.com/berth-dev/berth/config"
	"github.com/berth-dev/berth/test/rig"
	"github.com/berth-dev/berth/test/rig/rigtest"
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		crds, err := config.CRDs()
		if err != nil {
			return err
		}
		return r.InstallCRDs(ctx, crds)
	})
}
