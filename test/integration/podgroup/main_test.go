// Package podgroup_test runs berth's controller manager in-process against a real
// kube-apiserver and checks what users see on PodGroups.
package podgroup_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/berth-dev/berth/config"
	"github.com/berth-dev/berth/controllers"
	"github.com/berth-dev/berth/test/rig"
	"github.com/berth-dev/berth/test/rig/rigtest"
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		crds, err := config.CRDs()
		if err != nil {
			return err
		}
		if err := r.InstallCRDs(ctx, crds); err != nil {
			return err
		}
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
		mgr, err := controllers.NewManager(r.Config, controllers.ManagerOptions{})
		if err != nil {
			return err
		}
		mgrCtx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := mgr.Start(mgrCtx); err != nil {
				fmt.Fprintln(os.Stderr, "manager stopped:", err)
			}
		}()
		rigtest.Defer(func() { cancel(); <-done })
		return nil
	})
}
