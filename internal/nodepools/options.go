// Package nodepools renders NodePool templates: one Karpenter NodePool per GPU family and role,
// with the AWS EC2NodeClass (or the rig's KWOKNodeClass) it provisions from, built from the
// real Karpenter API types and berth's GPU catalogue (internal/gpu) with safe production
// defaults. `berth nodepools render` prints them.
package nodepools

import (
	"errors"
	"fmt"
	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"regexp"
	"strings"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/berth-dev/berth/internal/gpu"
)

// Role is the kind of GPU workload a NodePool is tuned for.
type Role string

// The roles a NodePool can be rendered for.
const (
	// RoleInference pools serve long-running, replicated model servers: on-demand capacity,
	// nodes rotated monthly.
	RoleInference Role = "inference"
	// RoleTraining pools run multi-day gang jobs: spot first, nodes never expired.
	RoleTraining Role = "training"
)

// Roles lists the accepted roles.
var Roles = []Role{RoleInference, RoleTraining}

// Provider is the Karpenter cloud provider the NodePools are rendered for.
type Provider string

// The providers NodePools can be rendered for.
const (
	// ProviderAWS renders an EC2NodeClass for every NodePool.
	ProviderAWS Provider = "aws"
	// ProviderKwok renders one KWOKNodeClass for Karpenter's kwok provider (berth's rig).
	ProviderKwok Provider = "kwok"
)

// Providers lists the accepted providers.
var Providers = []Provider{ProviderAWS, ProviderKwok}

// AllFamilies, as the only entry of Options.Families, selects every GPU family of the catalogue.
const AllFamilies = "all"

// Options select what Render produces. Zero values take the defaults documented on each field.
type Options struct {
	// Families are GPU products (h100, h200, a100, l40s, a10g, l4) or their EC2 instance
	// families (p5, p5e, p4d, g6e, g5, g6), or the single entry "all". Required.
	Families []string
	// Role is the workload the pools are tuned for; default inference.
	Role Role
	// CapacityTypes overrides the role's capacity types (inference: on-demand; training:
	// spot, on-demand).
	CapacityTypes []string
	// Provider is the Karpenter provider; default aws.
	Provider Provider
	// ClusterName is the EKS cluster: the node role is KarpenterNodeRole-<ClusterName> and
	// subnets and security groups are discovered by the tag karpenter.sh/discovery=<ClusterName>.
	// Required for aws, unused for kwok.
	ClusterName string
	// GPULimit caps the nvidia.com/gpu of each NodePool; default 64 (inference) or 128
	// (training).
	GPULimit int64
	// AMIAlias is the EC2NodeClass's AMI alias (aws); default DefaultAMIAlias. Production pins a
	// version (al2023@v20251117) and rolls it deliberately: @latest drifts every node onto each
	// new AMI release.
	AMIAlias string
	// NodeRole is the nodes' IAM role (aws); default KarpenterNodeRole-<ClusterName>, the name
	// Karpenter's getting-started CloudFormation creates. eksctl, Terraform modules and Auto
	// Mode name it otherwise.
	NodeRole string
	// DiscoveryTags select the subnets and security groups (aws); default
	// karpenter.sh/discovery=<ClusterName>.
	DiscoveryTags map[string]string
	// CapacityReservationIDs (cr-…) and CapacityReservationTags select EC2 capacity
	// reservations — On-Demand Capacity Reservations and Capacity Blocks for ML — the pools may
	// launch into (aws); with either, CapacityTypes must include "reserved".
	CapacityReservationIDs  []string
	CapacityReservationTags map[string]string
	// DRA renders pools whose GPUs NVIDIA's DRA driver hands out (gpu.nvidia.com
	// ResourceSlices) instead of the device plugin: named <pool>-dra, tainted DRAGPUTaintKey
	// instead of nvidia.com/gpu, labelled so the GPU operator runs no device plugin there and
	// the DRA driver's kubelet plugin does. Not with a Bottlerocket AMI (its NVIDIA variants
	// run the device plugin themselves).
	DRA bool
}

// DefaultAMIAlias follows the newest AL2023 EKS AMI.
const DefaultAMIAlias = "al2023@latest"

// amiAliasRE is Karpenter's alias form: family@version, where version is latest or a release.
var amiAliasRE = regexp.MustCompile(`^(al2023|al2|bottlerocket)@(latest|v[0-9]{8}|v?[0-9]+(\.[0-9]+)*)$`)

// capacityTypes are the capacity types a NodePool may request; "reserved" only with capacity
// reservations selected (Options.CapacityReservationIDs or CapacityReservationTags), which the
// EC2NodeClass's capacityReservationSelectorTerms name.
var capacityTypes = []string{karpv1.CapacityTypeSpot, karpv1.CapacityTypeOnDemand, karpv1.CapacityTypeReserved}

// iamRoleRE is IAM's rule for role names.
var iamRoleRE = regexp.MustCompile(`^[\w+=,.@-]{1,64}$`)

// reservationIDRE is EC2's capacity reservation id.
var reservationIDRE = regexp.MustCompile(`^cr-[0-9a-z]+$`)

// clusterNameRE is EKS's rule for cluster names.
var clusterNameRE = regexp.MustCompile(`^[0-9A-Za-z][A-Za-z0-9_-]*$`)

// nodeRolePrefix starts the IAM role of the nodes; the rest is the cluster name.
const nodeRolePrefix = "KarpenterNodeRole-"

// maxIAMRoleName is IAM's limit on role names.
const maxIAMRoleName = 64

// Validate reports the first invalid option, naming the bad value and the accepted ones.
func (o Options) Validate() error {
	if _, err := o.families(); err != nil {
		return err
	}
	o = o.withDefaults()
	if !contains(Roles, o.Role) {
		return fmt.Errorf("unknown role %q (accepted: %s)", o.Role, join(Roles))
	}
	if !contains(Providers, o.Provider) {
		return fmt.Errorf("unknown provider %q (accepted: %s)", o.Provider, join(Providers))
	}
	for _, ct := range o.CapacityTypes {
		if !contains(capacityTypes, ct) {
			return fmt.Errorf("unknown capacity type %q (accepted: %s)", ct, strings.Join(capacityTypes, ", "))
		}
	}
	if !amiAliasRE.MatchString(o.AMIAlias) {
		return fmt.Errorf("invalid AMI alias %q: want family@version, e.g. al2023@v20251117 or al2023@latest", o.AMIAlias)
	}
	if o.GPULimit < 0 {
		return fmt.Errorf("GPU limit %d is negative (0 takes the role's default)", o.GPULimit)
	}
	if err := o.validateReservations(); err != nil {
		return err
	}
	if o.DRA && strings.HasPrefix(o.AMIAlias, "bottlerocket@") {
		return fmt.Errorf("DRA pools cannot use the AMI alias %q: Bottlerocket's NVIDIA variants run NVIDIA's device plugin as part of the OS, which would advertise the GPUs the DRA driver publishes a second time (use an al2023 alias)", o.AMIAlias)
	}
	if o.NodeRole != "" && !iamRoleRE.MatchString(o.NodeRole) {
		return fmt.Errorf("invalid node role %q: an IAM role name (letters, digits and +=,.@_-, at most 64)", o.NodeRole)
	}
	for k, v := range o.DiscoveryTags {
		if k == "" || v == "" {
			return fmt.Errorf("discovery tag %q=%q: empty keys and values select nothing", k, v)
		}
	}
	if o.Provider == ProviderAWS {
		switch {
		case o.ClusterName == "" && (o.NodeRole == "" || len(o.DiscoveryTags) == 0):
			return errors.New("the aws provider needs a cluster name (it names the node role KarpenterNodeRole-<cluster> and the karpenter.sh/discovery tag)")
		case o.ClusterName == "":
		case !clusterNameRE.MatchString(o.ClusterName):
			return fmt.Errorf("invalid cluster name %q: letters, digits, '-' and '_' only, starting with a letter or digit", o.ClusterName)
		case o.NodeRole == "" && len(nodeRolePrefix)+len(o.ClusterName) > maxIAMRoleName:
			return fmt.Errorf("cluster name %q is too long: the IAM role %s<cluster> may have at most %d characters", o.ClusterName, nodeRolePrefix, maxIAMRoleName)
		}
	}
	return nil
}

// validateReservations checks the capacity reservations and the reserved capacity type go
// together.
func (o Options) validateReservations() error {
	for _, id := range o.CapacityReservationIDs {
		if !reservationIDRE.MatchString(id) {
			return fmt.Errorf("invalid capacity reservation id %q: want cr-…", id)
		}
	}
	for k, v := range o.CapacityReservationTags {
		if k == "" || v == "" {
			return fmt.Errorf("capacity reservation tag %q=%q: empty keys and values are not supported", k, v)
		}
	}
	reservations := len(o.CapacityReservationIDs)+len(o.CapacityReservationTags) > 0
	reserved := contains(o.CapacityTypes, karpv1.CapacityTypeReserved)
	switch {
	case reserved && !reservations:
		return errors.New(`capacity type "reserved" needs capacity reservations to launch into (capacity reservation ids or tags)`)
	case reservations && !reserved:
		return errors.New(`capacity reservations are selected but the capacity types lack "reserved": Karpenter would never launch into them`)
	}
	return nil
}

// nodeRole is the nodes' IAM role.
func (o Options) nodeRole() string {
	if o.NodeRole != "" {
		return o.NodeRole
	}
	return nodeRolePrefix + o.ClusterName
}

// discoveryTags select the subnets and security groups.
func (o Options) discoveryTags() map[string]string {
	if len(o.DiscoveryTags) > 0 {
		return o.DiscoveryTags
	}
	return map[string]string{berthv1alpha1.KarpenterDiscoveryTag: o.ClusterName}
}

// withDefaults fills the zero options with the role's defaults.
func (o Options) withDefaults() Options {
	if o.Role == "" {
		o.Role = RoleInference
	}
	if o.Provider == "" {
		o.Provider = ProviderAWS
	}
	if o.AMIAlias == "" {
		o.AMIAlias = DefaultAMIAlias
	}
	if len(o.CapacityTypes) == 0 {
		if o.Role == RoleTraining {
			// Training checkpoints and tolerates interruption; spot is ~30-35% of the price.
			// On-demand stays as the fallback when spot has no capacity.
			o.CapacityTypes = []string{karpv1.CapacityTypeSpot, karpv1.CapacityTypeOnDemand}
		} else {
			// A spot reclaim gives two minutes' notice: not enough to drain a model server
			// holding tens of GiB of weights without dropping requests.
			o.CapacityTypes = []string{karpv1.CapacityTypeOnDemand}
		}
	}
	o.CapacityTypes = dedupe(o.CapacityTypes)
	if o.GPULimit == 0 {
		// A limit bounds the bill if a runaway workload keeps asking for GPUs.
		o.GPULimit = 64
		if o.Role == RoleTraining {
			o.GPULimit = 128
		}
	}
	return o
}

// families resolves Options.Families to catalogue families, in the order given, without
// duplicates.
func (o Options) families() ([]gpu.Family, error) {
	all := gpu.GPUFamilies()
	if len(o.Families) == 0 {
		return nil, fmt.Errorf("no GPU family given (accepted: %s, or %s)", acceptedFamilies(all), AllFamilies)
	}
	if len(o.Families) == 1 && o.Families[0] == AllFamilies {
		return all, nil
	}
	var out []gpu.Family
	seen := map[string]bool{}
	for _, name := range o.Families {
		f, ok := lookupFamily(all, name)
		if !ok {
			return nil, fmt.Errorf("unknown GPU family %q (accepted: %s, or %s)", name, acceptedFamilies(all), AllFamilies)
		}
		if !seen[f.Name] {
			seen[f.Name] = true
			out = append(out, f)
		}
	}
	return out, nil
}

// lookupFamily finds a GPU family by product ("h100") or EC2 family ("p5"), case-insensitively.
func lookupFamily(all []gpu.Family, name string) (gpu.Family, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, f := range all {
		if f.GPU == name || f.Name == name {
			return f, true
		}
	}
	return gpu.Family{}, false
}

// acceptedFamilies lists the families as "h100 (p5), ...".
func acceptedFamilies(all []gpu.Family) string {
	names := make([]string, len(all))
	for i, f := range all {
		names[i] = f.GPU + " (" + f.Name + ")"
	}
	return strings.Join(names, ", ")
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func join[T ~string](list []T) string {
	s := make([]string, len(list))
	for i, v := range list {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

func dedupe(list []string) []string {
	var out []string
	for _, v := range list {
		if !contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
