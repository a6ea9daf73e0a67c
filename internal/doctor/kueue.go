package doctor

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Kueue's provisioning admission check on a cluster where nothing serves its
// ProvisioningRequests: every workload behind it waits forever.

// CheckProvisioningWithoutProvider is the check's name.
const CheckProvisioningWithoutProvider = "kueue-provisioning-without-provider"

// KindAdmissionCheck is the kind the check reads (Kueue's); KindClusterQueue the kind its
// findings name (the queues whose workloads wait).
const (
	KindAdmissionCheck = "AdmissionCheck"
	KindClusterQueue   = "ClusterQueue"
)

// Kueue's kinds, read when served (v1beta2 first, then v1beta1).
var (
	admissionCheckGVKs = []schema.GroupVersionKind{
		{Group: "kueue.x-k8s.io", Version: "v1beta2", Kind: KindAdmissionCheck},
		{Group: "kueue.x-k8s.io", Version: "v1beta1", Kind: KindAdmissionCheck},
	}
	clusterQueueGVKs = []schema.GroupVersionKind{
		{Group: "kueue.x-k8s.io", Version: "v1beta2", Kind: KindClusterQueue},
		{Group: "kueue.x-k8s.io", Version: "v1beta1", Kind: KindClusterQueue},
	}
	provisioningConfigGVKs = []schema.GroupVersionKind{
		{Group: "kueue.x-k8s.io", Version: "v1beta2", Kind: "ProvisioningRequestConfig"},
		{Group: "kueue.x-k8s.io", Version: "v1beta1", Kind: "ProvisioningRequestConfig"},
	}
	provisioningRequestGVK = autoscalingv1.SchemeGroupVersion.WithKind("ProvisioningRequest")
)

// ProvisioningCheck is one of Kueue's provisioning admission checks, as the check needs it.
type ProvisioningCheck struct {
	// Name is the AdmissionCheck's name; Config its ProvisioningRequestConfig's ("" when it
	// names none, or one that does not exist); Class the config's provisioningClassName.
	Name, Config, Class string
	// ClusterQueues are the ClusterQueues that use the check.
	ClusterQueues []string
}

// berthClasses are the classes berth serves (controllers/provisioningrequest).
var berthClasses = []string{autoscalingv1.ProvisioningClassCheckCapacity, autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp}

// provisioningChecks reads Kueue's provisioning admission checks from AdmissionChecks and
// ProvisioningRequestConfigs (unstructured: berth does not link Kueue's API).
func provisioningChecks(checks, configs, queues []unstructured.Unstructured) []ProvisioningCheck {
	users := map[string][]string{}
	for _, q := range queues {
		for _, name := range queueChecks(q) {
			users[name] = append(users[name], q.GetName())
		}
	}
	class := map[string]string{}
	for _, c := range configs {
		v, _, _ := unstructured.NestedString(c.Object, "spec", "provisioningClassName")
		class[c.GetName()] = v
	}
	var out []ProvisioningCheck
	for _, ac := range checks {
		if ctl, _, _ := unstructured.NestedString(ac.Object, "spec", "controllerName"); ctl != berthv1alpha1.KueueProvisioningController {
			continue
		}
		pc := ProvisioningCheck{Name: ac.GetName(), ClusterQueues: users[ac.GetName()]}
		if kind, _, _ := unstructured.NestedString(ac.Object, "spec", "parameters", "kind"); kind == "ProvisioningRequestConfig" {
			name, _, _ := unstructured.NestedString(ac.Object, "spec", "parameters", "name")
			if c, ok := class[name]; ok {
				pc.Config, pc.Class = name, c
			}
		}
		out = append(out, pc)
	}
	return out
}

// queueChecks are the admission checks a ClusterQueue uses: spec.admissionChecksStrategy
// (v1beta2, v1beta1) and spec.admissionChecks (v1beta1).
func queueChecks(q unstructured.Unstructured) []string {
	names, _, _ := unstructured.NestedStringSlice(q.Object, "spec", "admissionChecks")
	strategy, _, _ := unstructured.NestedSlice(q.Object, "spec", "admissionChecksStrategy", "admissionChecks")
	for _, r := range strategy {
		if m, ok := r.(map[string]any); ok {
			if n, _ := m["name"].(string); n != "" && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names
}

// provisioningWithoutProvider finds Kueue provisioning checks nothing can answer: the cluster
// does not serve ProvisioningRequests, or the check asks for a class berth does not serve and
// no Cluster Autoscaler runs.
func provisioningWithoutProvider(s Snapshot) []Finding {
	var out []Finding
	for _, pc := range s.ProvisioningChecks {
		for _, f := range checkWithoutProvider(s, pc) {
			if len(pc.ClusterQueues) == 0 {
				out = append(out, f)
				continue
			}
			// The queues whose workloads wait are what on-call looks for.
			for _, q := range pc.ClusterQueues {
				g := f
				g.Object = obj(KindClusterQueue, "", q)
				g.Problem = fmt.Sprintf("admission check %s: %s", pc.Name, f.Problem)
				out = append(out, g)
			}
		}
	}
	return out
}

// checkWithoutProvider is the finding on one provisioning check, if nothing answers it.
func checkWithoutProvider(s Snapshot, pc ProvisioningCheck) []Finding {
	var out []Finding
	o := obj(KindAdmissionCheck, "", pc.Name)
	switch {
	case !s.ProvisioningRequestAPI:
		out = append(out, Finding{Check: CheckProvisioningWithoutProvider, Object: o,
			Problem: "Kueue's provisioning admission check asks for capacity with ProvisioningRequests, but the cluster does not serve autoscaling.x-k8s.io/v1 ProvisioningRequest: no workload behind it is ever admitted",
			Fix:     "install the ProvisioningRequest CRD and restart berth's controller, which then serves the requests with Karpenter (docs/provisioning-requests.md)"})
	case pc.Config == "":
		out = append(out, Finding{Check: CheckProvisioningWithoutProvider, Object: o,
			Problem: "the provisioning admission check names no ProvisioningRequestConfig that exists, so Kueue cannot say which class to ask for",
			Fix:     "create the ProvisioningRequestConfig it names, with provisioningClassName " + autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp})
	case !slices.Contains(berthClasses, pc.Class) && !s.ClusterAutoscaler:
		out = append(out, Finding{Check: CheckProvisioningWithoutProvider, Object: o,
			Problem: fmt.Sprintf("ProvisioningRequestConfig %s asks for class %q, which berth does not serve and no Cluster Autoscaler runs to serve: its requests are never answered", pc.Config, pc.Class),
			Fix:     "use provisioningClassName " + strings.Join(berthClasses, " or ") + " (berth serves both with Karpenter)"})
	}
	return out
}
