package chart_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// volumeNames lists the names in a list of volumes or volume mounts.
func volumeNames(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		out = append(out, fmt.Sprint(dig(x, "name")))
	}
	return out
}

// TestWorkloadKnobs: the chart knobs the anchors' charts have — labels on every object,
// revision history, update strategies, extra volumes and mounts next to the chart's own, the
// agent's node selector, extra objects rendered through tpl.
func TestWorkloadKnobs(t *testing.T) {
	extraVol := []any{map[string]any{"name": "ca", "configMap": map[string]any{"name": "corp-ca"}}}
	extraMount := []any{map[string]any{"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": true}}
	got, err := render(t, map[string]any{
		"commonLabels":         map[string]any{"cost-center": "ml-platform"},
		"revisionHistoryLimit": 3,
		"controller": map[string]any{"strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": 0, "maxSurge": 1}},
			"extraVolumes": extraVol, "extraVolumeMounts": extraMount},
		"scaler": map[string]any{"strategy": map[string]any{"type": "Recreate"}, "extraVolumes": extraVol, "extraVolumeMounts": extraMount,
			"tls": map[string]any{"enabled": true, "existingSecret": "berth-scaler-tls"}},
		"agent": map[string]any{"nodeSelector": map[string]any{"karpenter.sh/nodepool": "gpu-h100-training"}, "updateStrategy": map[string]any{"type": "OnDelete"},
			"extraVolumes": extraVol, "extraVolumeMounts": extraMount},
		"extraObjects": []any{
			map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "{{ .Release.Name }}-extra"}, "data": map[string]any{"a": "b"}},
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-from-string\n",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, obj := range got {
		if strings.HasPrefix(k, "ConfigMap/berth-extra") || k == "ConfigMap/berth-from-string" {
			continue // extraObjects are released as given
		}
		if dig(obj, "metadata", "labels", "cost-center") != "ml-platform" {
			t.Errorf("%s lacks commonLabels: %v", k, dig(obj, "metadata", "labels"))
		}
	}
	for _, k := range []string{"Deployment/berth-controller", "Deployment/berth-scaler", "DaemonSet/berth-agent"} {
		if fmt.Sprint(dig(got[k], "spec", "revisionHistoryLimit")) != "3" {
			t.Errorf("%s revisionHistoryLimit %v", k, dig(got[k], "spec", "revisionHistoryLimit"))
		}
		vols := volumeNames(dig(got[k], "spec", "template", "spec", "volumes"))
		mounts := volumeNames(dig(container(got[k]), "volumeMounts"))
		if len(vols) == 0 || vols[len(vols)-1] != "ca" || len(mounts) == 0 || mounts[len(mounts)-1] != "ca" {
			t.Errorf("%s volumes %v, mounts %v: want the extra ca last", k, vols, mounts)
		}
	}
	if v := volumeNames(dig(got["Deployment/berth-controller"], "spec", "template", "spec", "volumes")); v[0] != "webhook-certs" {
		t.Errorf("controller volumes %v: the webhook certificate's volume must stay", v)
	}
	if v := volumeNames(dig(got["Deployment/berth-scaler"], "spec", "template", "spec", "volumes")); v[0] != "tls" {
		t.Errorf("scaler volumes %v: the TLS volume must stay", v)
	}
	if s := toYAML(t, dig(got["Deployment/berth-controller"], "spec", "strategy")); !strings.Contains(s, "maxUnavailable: 0") {
		t.Errorf("controller strategy %s", s)
	}
	if dig(got["Deployment/berth-scaler"], "spec", "strategy", "type") != "Recreate" || dig(got["DaemonSet/berth-agent"], "spec", "updateStrategy", "type") != "OnDelete" {
		t.Errorf("scaler strategy %v, agent updateStrategy %v", dig(got["Deployment/berth-scaler"], "spec", "strategy"), dig(got["DaemonSet/berth-agent"], "spec", "updateStrategy"))
	}
	ds := got["DaemonSet/berth-agent"]
	if dig(ds, "spec", "template", "spec", "nodeSelector", "karpenter.sh/nodepool") != "gpu-h100-training" ||
		!strings.Contains(toYAML(t, dig(ds, "spec", "template", "spec", "affinity")), "nvidia.com/gpu.present") {
		t.Errorf("agent nodeSelector %v must come with the GPU-node affinity %v", dig(ds, "spec", "template", "spec", "nodeSelector"), dig(ds, "spec", "template", "spec", "affinity"))
	}
	if got["ConfigMap/berth-extra"] == nil || got["ConfigMap/berth-from-string"] == nil {
		t.Error("extraObjects (a map and a string, names through tpl) not rendered")
	}

	// Defaults: nothing extra, the agent's one-in-ten rollout, the scaler without volumes.
	def, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if dig(def["DaemonSet/berth-agent"], "spec", "updateStrategy", "rollingUpdate", "maxUnavailable") != "10%" || dig(def["Deployment/berth-controller"], "spec", "strategy") != nil {
		t.Errorf("default strategies: agent %v, controller %v", dig(def["DaemonSet/berth-agent"], "spec", "updateStrategy"), dig(def["Deployment/berth-controller"], "spec", "strategy"))
	}
	if v := dig(def["Deployment/berth-scaler"], "spec", "template", "spec", "volumes"); v != nil {
		t.Errorf("default scaler volumes %v, want none", v)
	}
	if _, err := render(t, map[string]any{"controller": map[string]any{"strategy": map[string]any{"type": "Sometimes"}}}); err == nil {
		t.Error("strategy type Sometimes rendered; want the schema to refuse it")
	}
}

// TestControllerClientValues: lease timings and the API client's rate reach the controller's
// flags (the controller itself refuses timings leader election cannot work with).
func TestControllerClientValues(t *testing.T) {
	got, err := render(t, map[string]any{"controller": map[string]any{
		"leaderElection": map[string]any{"leaseDuration": "60s", "renewDeadline": "40s", "retryPeriod": "5s"},
		"kubeAPI":        map[string]any{"qps": 50, "burst": 100},
	}})
	if err != nil {
		t.Fatal(err)
	}
	args := containerArgs(got["Deployment/berth-controller"])
	for _, a := range []string{"--leader-elect-lease-duration=60s", "--leader-elect-renew-deadline=40s", "--leader-elect-retry-period=5s", "--kube-api-qps=50", "--kube-api-burst=100"} {
		if !slices.Contains(args, a) {
			t.Errorf("controller args %v lack %s", args, a)
		}
	}
	if _, err := render(t, map[string]any{"controller": map[string]any{"kubeAPI": map[string]any{"qps": 0, "burst": 10}}}); err == nil {
		t.Error("kubeAPI.qps 0 rendered; want the schema to refuse it")
	}
}

// TestSecurityContextOverrides: fields set over the restricted defaults win, and the defaults not
// named stay (a platform's user id does not drop seccomp or the read-only root).
func TestSecurityContextOverrides(t *testing.T) {
	got, err := render(t, map[string]any{
		"podSecurityContext":       map[string]any{"runAsUser": 1001, "fsGroup": 2000},
		"containerSecurityContext": map[string]any{"seLinuxOptions": map[string]any{"type": "spc_t"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"Deployment/berth-controller", "Deployment/berth-scaler", "DaemonSet/berth-agent"} {
		pod := dig(got[k], "spec", "template", "spec", "securityContext")
		ctr := dig(container(got[k]), "securityContext")
		if fmt.Sprint(dig(pod, "runAsUser")) != "1001" || fmt.Sprint(dig(pod, "fsGroup")) != "2000" || dig(pod, "runAsNonRoot") != true || dig(pod, "seccompProfile", "type") != "RuntimeDefault" {
			t.Errorf("%s pod securityContext %v", k, pod)
		}
		if dig(ctr, "seLinuxOptions", "type") != "spc_t" || dig(ctr, "readOnlyRootFilesystem") != true || dig(ctr, "allowPrivilegeEscalation") != false {
			t.Errorf("%s container securityContext %v", k, ctr)
		}
	}
}
