// Package guard_test checks the consolidation guard, pod protection and disruption reporting on
// the full rig: kube-apiserver, kube-scheduler, kube-controller-manager, kwok and Karpenter's
// kwok provider, with berth's controller manager running in-process (no webhook: the gang's
// members are created ungated, which protection does not need).
package guard_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers"
	"github.com/berth-dev/berth/controllers/nodepool/guard"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// instanceTypes is the rig's GPU instance-types file, relative to this package.
const instanceTypes = "../../testdata/gpu-instance-types.json"

// The NodePools of this suite: all on-demand and consolidating underutilized nodes right away
// (consolidateAfter 0s, a budget of 100%), so only berth stands between Karpenter and the GPU
// pods.
var (
	// gpuPool (g6, L4): the guard enforces its Underutilized budget; its workload is unprotected.
	gpuPool = rig.GPUNodePoolName("l4")
	// auditPool (g5, A10G) is annotated audit (no budget); its workload is protected.
	auditPool = rig.GPUNodePoolName("a10g")
	// controlPool (g6e, L40S) is annotated off; its unprotected workload is consolidated.
	controlPool = rig.GPUNodePoolName("l40s")
	// cpuPool is not a GPU pool: the guard leaves it alone.
	cpuPool = rig.CPUNodePoolName
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartCluster(ctx, r, rig.KwokOptions{}); err != nil {
			return err
		}
		if err := r.StartKarpenter(ctx, rig.KarpenterOptions{InstanceTypesFile: instanceTypes}); err != nil {
			return err
		}
		if err := installNodePools(ctx, r); err != nil {
			return err
		}
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
		mgr, err := controllers.NewManager(r.Config, controllers.ManagerOptions{
			Options: controllers.Options{ConsolidationGuard: guard.ModeEnforce, AdmissionResync: rigtest.AdmissionResync},
		})
		if err != nil {
			return err
		}
		rigtest.RunManager(mgr)
		return nil
	})
}

// installNodePools creates the KWOKNodeClass and this suite's NodePools.
func installNodePools(ctx context.Context, r *rig.Rig) error {
	if err := r.Client.Create(ctx, rig.KwokNodeClass()); err != nil {
		return fmt.Errorf("creating KWOKNodeClass: %w", err)
	}
	pools := map[string]*karpv1.NodePool{}
	for _, np := range rig.DevNodePools() {
		pools[np.Name] = np
	}
	for _, name := range []string{gpuPool, auditPool, controlPool, cpuPool} {
		np, ok := pools[name]
		if !ok {
			return fmt.Errorf("rig has no NodePool %s", name)
		}
		np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized
		np.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("0s")
		np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "100%"}}
		// On-demand only: Karpenter replaces spot nodes with cheaper spot ones only behind a
		// feature gate, so on spot the underutilized nodes would stay for lack of a replacement.
		for i, req := range np.Spec.Template.Spec.Requirements {
			if req.Key == karpv1.CapacityTypeLabelKey {
				np.Spec.Template.Spec.Requirements[i].Values = []string{karpv1.CapacityTypeOnDemand}
			}
		}
		switch name {
		case auditPool:
			np.Annotations = map[string]string{berthv1alpha1.ConsolidationGuardAnnotation: berthv1alpha1.ConsolidationGuardAudit}
		case controlPool:
			np.Annotations = map[string]string{berthv1alpha1.ConsolidationGuardAnnotation: berthv1alpha1.ConsolidationGuardOff}
		}
		if err := r.Client.Create(ctx, np); err != nil {
			return fmt.Errorf("creating NodePool %s: %w", name, err)
		}
	}
	return nil
}
