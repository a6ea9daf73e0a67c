package doctor

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func kueueObj(kind, name string, spec map[string]any) unstructured.Unstructured {
	return unstructured.Unstructured{Object: map[string]any{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

func TestProvisioningWithoutProvider(t *testing.T) {
	checks := []unstructured.Unstructured{
		kueueObj("AdmissionCheck", "atomic", map[string]any{"controllerName": "kueue.x-k8s.io/provisioning-request",
			"parameters": map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "atomic-config"}}),
		kueueObj("AdmissionCheck", "queued", map[string]any{"controllerName": "kueue.x-k8s.io/provisioning-request",
			"parameters": map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "gke-config"}}),
		kueueObj("AdmissionCheck", "dangling", map[string]any{"controllerName": "kueue.x-k8s.io/provisioning-request",
			"parameters": map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "missing"}}),
		kueueObj("AdmissionCheck", "multikueue", map[string]any{"controllerName": "kueue.x-k8s.io/multikueue"}),
	}
	configs := []unstructured.Unstructured{
		kueueObj("ProvisioningRequestConfig", "atomic-config", map[string]any{"provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io"}),
		kueueObj("ProvisioningRequestConfig", "gke-config", map[string]any{"provisioningClassName": "queued-provisioning.gke.io"}),
	}
	pcs := provisioningChecks(checks, configs, nil)
	if len(pcs) != 3 {
		t.Fatalf("provisioning checks %+v, want the 3 of Kueue's provisioning controller", pcs)
	}
	for _, tc := range []struct {
		name      string
		api, ca   bool
		wantCheck []string
	}{
		{"no ProvisioningRequest API: every provisioning check is stuck", false, false, []string{"atomic", "queued", "dangling"}},
		{"API served, no Cluster Autoscaler: the class berth does not serve and the missing config", true, false, []string{"queued", "dangling"}},
		{"Cluster Autoscaler runs: only the missing config", true, true, []string{"dangling"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range provisioningWithoutProvider(Snapshot{ProvisioningChecks: pcs, ProvisioningRequestAPI: tc.api, ClusterAutoscaler: tc.ca}) {
				got = append(got, f.Object)
				if f.Problem == "" || f.Fix == "" || f.Check != CheckProvisioningWithoutProvider {
					t.Errorf("incomplete finding %+v", f)
				}
			}
			var want []string
			for _, n := range tc.wantCheck {
				want = append(want, obj(KindAdmissionCheck, "", n))
			}
			if len(got) != len(want) {
				t.Fatalf("findings on %v, want %v", got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("findings on %v, want %v", got, want)
				}
			}
		})
	}
}

func TestProvisioningWithoutProviderNamesTheQueues(t *testing.T) {
	checks := []unstructured.Unstructured{
		kueueObj("AdmissionCheck", "gke", map[string]any{"controllerName": "kueue.x-k8s.io/provisioning-request",
			"parameters": map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "gke-config"}}),
	}
	configs := []unstructured.Unstructured{
		kueueObj("ProvisioningRequestConfig", "gke-config", map[string]any{"provisioningClassName": "queued-provisioning.gke.io"}),
	}
	queues := []unstructured.Unstructured{
		kueueObj("ClusterQueue", "team-a", map[string]any{"admissionChecksStrategy": map[string]any{"admissionChecks": []any{map[string]any{"name": "gke"}}}}),
		kueueObj("ClusterQueue", "team-b", map[string]any{"admissionChecks": []any{"gke"}}), // v1beta1
		kueueObj("ClusterQueue", "team-c", map[string]any{}),
	}
	var got []string
	for _, f := range provisioningWithoutProvider(Snapshot{ProvisioningChecks: provisioningChecks(checks, configs, queues), ProvisioningRequestAPI: true}) {
		got = append(got, f.Object)
		if !strings.HasPrefix(f.Problem, "admission check gke: ") {
			t.Errorf("finding %+v does not name the admission check", f)
		}
	}
	if want := []string{"ClusterQueue team-a", "ClusterQueue team-b"}; !slices.Equal(got, want) {
		t.Errorf("findings on %v, want %v", got, want)
	}
}
