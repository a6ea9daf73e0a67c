package kubecmd

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth/internal/nodepools"
)

type nodePoolsRenderFlags struct {
	families      []string
	role          string
	capacityTypes []string
	provider      string
	clusterName   string
	gpuLimit      int64
	output        string
	amiAlias      string
	nodeRole      string
	discoveryTags map[string]string
	// reservationIDs and reservationTags select EC2 capacity reservations.
	reservationIDs  []string
	reservationTags map[string]string
	// dra renders pools whose GPUs NVIDIA's DRA driver hands out.
	dra bool
}

// NodePools is `nodepools`.
func NodePools() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nodepools",
		Short: "Karpenter NodePool templates for GPU families",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newNodePoolsRenderCommand())
	return cmd
}

func newNodePoolsRenderCommand() *cobra.Command {
	var f nodePoolsRenderFlags
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Print Karpenter NodePools (and their EC2NodeClasses) for GPU families",
		Long: `Print one Karpenter NodePool per GPU family, tuned for inference or training, with the
EC2NodeClass each provisions from (--provider aws) or the KWOKNodeClass of berth's local rig
(--provider kwok). Pipe the output to 'kubectl apply -f -'.

Families are GPU products or EC2 instance families: h100 (p5), h200 (p5e), a100 (p4d),
l40s (g6e), a10g (g5), l4 (g6), or all. See docs/nodepools.md for the defaults and why.

With --dra the pools are for GPUs handed out by NVIDIA's DRA driver (gpu.nvidia.com
ResourceSlices) instead of the device plugin: named <pool>-dra, tainted
scheduling.berth.dev/dra-gpu (pods claiming GPUs through DRA tolerate it), labelled so NVIDIA's
GPU operator runs no device plugin there. See docs/dra.md.`,
		Example: `  berth nodepools render --family h100,h200 --cluster-name prod
  berth nodepools render --family a100 --role training --cluster-name prod | kubectl apply -f -
  berth nodepools render --family all --provider kwok -o json
  berth nodepools render --family h100 --role training --cluster-name prod --dra`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runNodePoolsRender(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.families, "family", nil, "GPU families, comma-separated: h100, h200, a100, l40s, a10g, l4 (or p5, p5e, p4d, g6e, g5, g6), or all")
	fl.StringVar(&f.role, "role", string(nodepools.RoleInference), "workload the pools are tuned for: inference or training")
	fl.StringSliceVar(&f.capacityTypes, "capacity-type", nil, "capacity types, comma-separated: spot, on-demand, reserved (default: on-demand for inference, spot,on-demand for training; reserved needs capacity reservations)")
	fl.StringVar(&f.provider, "provider", string(nodepools.ProviderAWS), "Karpenter provider: aws or kwok")
	fl.StringVar(&f.clusterName, "cluster-name", "", "EKS cluster name (aws): node role KarpenterNodeRole-<name>, discovery tag karpenter.sh/discovery=<name>")
	fl.StringVar(&f.amiAlias, "ami-alias", nodepools.DefaultAMIAlias, "EC2NodeClass AMI alias (aws); pin a release in production, e.g. al2023@v20251117")
	fl.StringVar(&f.nodeRole, "node-role", "", "the nodes' IAM role (aws; default KarpenterNodeRole-<cluster-name>)")
	fl.StringToStringVar(&f.discoveryTags, "discovery-tag", nil, "tags selecting subnets and security groups, key=value,… (aws; default karpenter.sh/discovery=<cluster-name>)")
	fl.StringSliceVar(&f.reservationIDs, "capacity-reservation-id", nil, "EC2 capacity reservations (ODCRs, Capacity Blocks for ML) to launch into, cr-…,… (aws; needs --capacity-type reserved)")
	fl.StringToStringVar(&f.reservationTags, "capacity-reservation-tag", nil, "tags selecting capacity reservations, key=value,… (aws; needs --capacity-type reserved)")
	fl.Int64Var(&f.gpuLimit, "gpu-limit", 0, "nvidia.com/gpu limit of each NodePool (default 64 for inference, 128 for training)")
	fl.BoolVar(&f.dra, "dra", false, "pools for GPUs handed out by NVIDIA's DRA driver (gpu.nvidia.com) instead of the device plugin")
	fl.StringVarP(&f.output, "output", "o", nodepools.FormatYAML, "output format: yaml or json")
	return cmd
}

func runNodePoolsRender(cmd *cobra.Command, f nodePoolsRenderFlags) error {
	if !slices.Contains(nodepools.Formats, f.output) {
		return fmt.Errorf("unknown output format %q (accepted: %s)", f.output, strings.Join(nodepools.Formats, ", "))
	}
	objs, err := nodepools.Render(nodepools.Options{
		Families:      f.families,
		Role:          nodepools.Role(f.role),
		CapacityTypes: f.capacityTypes,
		Provider:      nodepools.Provider(f.provider),
		ClusterName:   f.clusterName,
		GPULimit:      f.gpuLimit,
		AMIAlias:      f.amiAlias,
		NodeRole:      f.nodeRole,
		DiscoveryTags: f.discoveryTags,

		CapacityReservationIDs:  f.reservationIDs,
		CapacityReservationTags: f.reservationTags,
		DRA:                     f.dra,
	})
	if err != nil {
		return fmt.Errorf("nodepools render: %w", err)
	}
	return nodepools.Encode(cmd.OutOrStdout(), objs, f.output)
}
