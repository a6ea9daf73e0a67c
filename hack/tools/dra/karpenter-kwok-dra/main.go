// Command karpenter-kwok-dra is Karpenter's kwok provider whose instance types carry the devices
// their nodes will publish through NVIDIA's DRA driver (gpu.nvidia.com), as Karpenter's AWS
// provider declares them for EC2's GPU instance types (pkg/providers/nvidiadra). Karpenter core
// v1.15 sizes pods with resource claims against those templates when it runs with
// --ignore-dra-requests=false; the kwok provider itself carries none, so without them no kwok
// node could be launched for a pod that claims a GPU. berth's rig runs it in its DRA mode, and
// publishes the same devices as ResourceSlices once a node is up (internal/rig, StartDRADriver).
package main

import (
	"github.com/aws/karpenter-provider-aws/pkg/providers/nvidiadra"
	"github.com/samber/lo"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kwok "sigs.k8s.io/karpenter/kwok/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/node/health"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/operator"
)

func main() {
	ctx, op := operator.NewOperator()
	instanceTypes, err := kwok.ConstructInstanceTypes(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "failed constructing instance types")
	}
	// The devices each GPU instance type's node will have, keyed by instance type name (EC2's:
	// the rig's instance types are EC2's).
	devices := nvidiadra.NewDefaultProvider().ResolveDynamicResources(ctx, instanceTypes, nil)
	for _, it := range instanceTypes {
		if dr, ok := devices[it.Name]; ok {
			it.DynamicResources = dr
		}
	}
	undecorated := kwok.NewCloudProvider(ctx, op.GetClient(), instanceTypes)
	cloudProvider := overlay.Decorate(undecorated, op.GetClient(), op.InstanceTypeStore)
	repairPolicyMatcher := lo.Must(health.NewRepairPolicyMatcher(ctx, cloudProvider))
	clusterState := state.NewCluster(op.Clock, op.GetClient(), cloudProvider, state.WithRepairPolicyMatcher(repairPolicyMatcher))
	op.WithControllers(ctx, controllers.NewControllers(ctx, op.Manager, op.Clock, op.GetClient(), op.EventRecorder,
		cloudProvider, undecorated, clusterState, op.InstanceTypeStore, op.PredictionStore)...).Start(ctx)
}
