package chart_test

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

const podGroupCRD = "CustomResourceDefinition/podgroups.scheduling.berth.dev"

// TestCRDLifecycle: the PodGroup CRD is a template, so helm upgrade applies a changed CRD (Helm
// never upgrades a chart's crds/); it is exactly config/crd's; by default it survives helm
// uninstall (resource-policy keep) and Argo CD never prunes it (deleting it deletes every
// PodGroup); crds.install=false leaves it to whoever manages it.
func TestCRDLifecycle(t *testing.T) {
	data, err := os.ReadFile("../../config/crd/bases/scheduling.berth.dev_podgroups.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	got, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	crd := got[podGroupCRD]
	if crd == nil {
		t.Fatalf("default render lacks %s", podGroupCRD)
	}
	if toYAML(t, crd["spec"]) != toYAML(t, want["spec"]) {
		t.Error("the chart's CRD spec differs from config/crd/bases")
	}
	ann := dig(crd, "metadata", "annotations").(map[string]any)
	if ann["helm.sh/resource-policy"] != "keep" || ann["argocd.argoproj.io/sync-options"] != "Prune=false,ServerSideApply=true" {
		t.Errorf("default CRD annotations %v: want keep and Argo CD's Prune=false", ann)
	}
	if dig(crd, "metadata", "labels", "app.kubernetes.io/managed-by") != "Helm" {
		t.Errorf("CRD labels %v", dig(crd, "metadata", "labels"))
	}

	got, err = render(t, map[string]any{"crds": map[string]any{"keep": false}})
	if err != nil {
		t.Fatal(err)
	}
	ann = dig(got[podGroupCRD], "metadata", "annotations").(map[string]any)
	if _, ok := ann["helm.sh/resource-policy"]; ok || ann["argocd.argoproj.io/sync-options"] != "ServerSideApply=true" {
		t.Errorf("crds.keep=false annotations %v: want neither keep nor Prune=false", ann)
	}

	got, err = render(t, map[string]any{"crds": map[string]any{"install": false}})
	if err != nil {
		t.Fatal(err)
	}
	if got[podGroupCRD] != nil {
		t.Error("crds.install=false still renders the CRD")
	}
}
