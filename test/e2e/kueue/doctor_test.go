package kueue_test

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/internal/doctor"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestDoctorNamesQueuesWhoseCheckHasNoProvider: on the real Kueue with berth serving
// ProvisioningRequests, berth doctor finds nothing wrong with the sample queues; a ClusterQueue
// whose provisioning check asks for a class nothing here serves is reported by name.
func TestDoctorNamesQueuesWhoseCheckHasNoProvider(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	findings := func() []string {
		t.Helper()
		snap, err := doctor.Read(ctx, c, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range doctor.Run(snap).Findings {
			if f.Check == doctor.CheckProvisioningWithoutProvider {
				out = append(out, f.Object)
			}
		}
		return out
	}
	if got := findings(); len(got) != 0 {
		t.Errorf("doctor reports the sample queues' check, which berth serves: %v", got)
	}
	objs := []*unstructured.Unstructured{
		kueueObject("ProvisioningRequestConfig", "gke-queued", map[string]any{"provisioningClassName": "queued-provisioning.gke.io"}),
		kueueObject("AdmissionCheck", "gke-capacity", map[string]any{"controllerName": "kueue.x-k8s.io/provisioning-request",
			"parameters": map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "gke-queued"}}),
		kueueObject("ClusterQueue", "team-c", map[string]any{"namespaceSelector": map[string]any{},
			"resourceGroups": []any{map[string]any{"coveredResources": []any{"cpu"}, "flavors": []any{map[string]any{"name": "l40s",
				"resources": []any{map[string]any{"name": "cpu", "nominalQuota": "8"}}}}}},
			"admissionChecksStrategy": map[string]any{"admissionChecks": []any{map[string]any{"name": "gke-capacity"}}}}),
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() {
			if err := c.Delete(context.Background(), o); client.IgnoreNotFound(err) != nil {
				t.Errorf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		})
	}
	if got := findings(); !slices.Equal(got, []string{"ClusterQueue team-c"}) {
		t.Errorf("doctor's %s findings %v, want the queue using the GKE-only class", doctor.CheckProvisioningWithoutProvider, got)
	}
}

// kueueObject is a cluster-scoped Kueue object of the given kind.
func kueueObject(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": kueueGroupVersion, "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec}}
}
