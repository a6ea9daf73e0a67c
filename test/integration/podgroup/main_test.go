// Package podgroup_test runs berth's controller manager in-process against a real
// kube-apiserver and checks what users see on PodGroups.
package podgroup_test

import (
	"context"
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/berth-dev/berth/controllers"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.InstallBerthCRDs(ctx, r); err != nil {
			return err
		}
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
		mgr, err := controllers.NewManager(r.Config, controllers.ManagerOptions{Options: controllers.Options{AdmissionResync: rigtest.AdmissionResync}})
		if err != nil {
			return err
		}
		rigtest.RunManager(mgr)
		return nil
	})
}
