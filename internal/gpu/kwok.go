package gpu

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

type kwokRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values"`
}

type kwokOffering struct {
	Price        float64           `json:"Price"`
	Available    bool              `json:"Available"`
	Requirements []kwokRequirement `json:"Requirements"`
}

type kwokInstanceType struct {
	Name             string            `json:"name"`
	Architecture     string            `json:"architecture"`
	OperatingSystems []string          `json:"operatingSystems"`
	Resources        map[string]string `json:"resources"`
	Offerings        []kwokOffering    `json:"offerings"`
}

// RigHugePages2Mi is the 2 MiB huge pages the rig's EFA (training) instance types offer. On EKS
// huge pages exist only where the node's kubelet pre-allocates them (user data), and Karpenter
// learns of them from a NodeOverlay's capacity; the rig's instance types stand for such a pool.
const RigHugePages2Mi = "32Gi"

// KwokInstanceTypesJSON renders the catalogue in the instance-types file format of Karpenter's
// kwok provider (INSTANCE_TYPES_FILE_PATH). Every offering carries the AWS well-known labels
// (family, size, GPU count/name/memory/manufacturer) as single-value requirements, which the
// kwok provider turns into node labels, so fake nodes look like real EKS GPU nodes. EFA
// families also offer their EFA devices and RigHugePages2Mi of huge pages.
func KwokInstanceTypesJSON() ([]byte, error) {
	var out []kwokInstanceType
	for _, f := range families {
		for _, s := range f.Sizes {
			labels := []kwokRequirement{
				in(awsv1.LabelInstanceFamily, f.Name),
				in(awsv1.LabelInstanceSize, s.Name),
			}
			resources := map[string]string{
				"cpu":    strconv.FormatInt(s.VCPU, 10),
				"memory": fmt.Sprintf("%dGi", s.MemoryGiB),
				"pods":   "110",
				// A 100 GiB root volume, as GPU NodeClasses are given (the default 20 GiB does
				// not hold a training image).
				string(corev1.ResourceEphemeralStorage): "100Gi",
			}
			if f.EFA > 0 {
				resources[berthv1alpha1.EFAResource] = strconv.FormatInt(f.EFA, 10)
				resources[string(corev1.ResourceHugePagesPrefix)+"2Mi"] = RigHugePages2Mi
			}
			if f.GPU != "" {
				resources[berthv1alpha1.GPUResource] = strconv.FormatInt(s.GPUs, 10)
				labels = append(labels,
					in(awsv1.LabelInstanceGPUCount, strconv.FormatInt(s.GPUs, 10)),
					in(awsv1.LabelInstanceGPUName, f.GPU),
					in(awsv1.LabelInstanceGPUMemory, strconv.FormatInt(f.GPUMemoryMiB, 10)),
					in(awsv1.LabelInstanceGPUManufacturer, "nvidia"),
				)
			}
			it := kwokInstanceType{
				Name: f.InstanceType(s), Architecture: "amd64", OperatingSystems: []string{"linux"},
				Resources: resources,
			}
			for _, z := range f.Zones {
				for _, ct := range []struct {
					name  string
					price float64
				}{{"spot", s.OnDemandUSD * f.SpotDiscount}, {"on-demand", s.OnDemandUSD}} {
					reqs := append([]kwokRequirement{in(karpv1.CapacityTypeLabelKey, ct.name), in(corev1.LabelTopologyZone, z)}, labels...)
					it.Offerings = append(it.Offerings, kwokOffering{Price: round4(ct.price), Available: true, Requirements: reqs})
				}
			}
			out = append(out, it)
		}
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding instance types: %w", err)
	}
	return append(data, '\n'), nil
}

func in(key, value string) kwokRequirement {
	return kwokRequirement{Key: key, Operator: "In", Values: []string{value}}
}

func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }
