package chart_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/berth-dev/berth/test/chart"
)

// full turns every optional part on.
var full = map[string]any{
	"webhook":          map[string]any{"certManager": map[string]any{"enabled": true}},
	"scaler":           map[string]any{"tls": map[string]any{"enabled": true, "existingSecret": "berth-scaler-tls", "mutual": true}, "watchNamespace": "inference"},
	"agent":            map[string]any{"runtimeClassName": "nvidia", "gpuAccess": "volumeMounts"},
	"controller":       map[string]any{"adapters": []any{"lws", "coscheduling", "volcano", "kai", "kueue"}},
	"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
	"monitoring": map[string]any{
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}},
		"prometheusRule": map[string]any{"enabled": true},
		"dashboard":      map[string]any{"enabled": true},
	},
	"nodePools": map[string]any{"clusterName": "prod", "families": map[string]any{"h100": map[string]any{"enabled": true}, "l4": map[string]any{"enabled": true}}},
}

// TestPrometheusRuleFollowsTheRelease: rule groups of components the release does not run are
// left out (their absence alerts would fire forever), and runbook links follow
// runbookBaseURL.
func TestPrometheusRuleFollowsTheRelease(t *testing.T) {
	got := mustRender(t, map[string]any{
		"scaler":     map[string]any{"enabled": false},
		"agent":      map[string]any{"enabled": false},
		"monitoring": map[string]any{"prometheusRule": map[string]any{"enabled": true, "runbookBaseURL": "https://wiki.example.com/berth/"}},
	})
	spec := toYAML(t, dig(got["PrometheusRule/berth"], "spec"))
	var names []string
	for _, g := range dig(got["PrometheusRule/berth"], "spec", "groups").([]any) {
		names = append(names, g.(map[string]any)["name"].(string))
	}
	if want := []string{"berth-gangs", "berth-karpenter", "berth-controller"}; !slices.Equal(names, want) {
		t.Errorf("rule groups %v, want %v", names, want)
	}
	if strings.Contains(spec, "github.com/berth-dev/berth/blob") || !strings.Contains(spec, "runbook_url: https://wiki.example.com/berth/BerthControllerDown.md") {
		t.Errorf("runbook links do not follow runbookBaseURL:\n%s", spec)
	}
}

func mustRender(t *testing.T, values map[string]any) map[string]map[string]any {
	t.Helper()
	got, err := chart.Render(values)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	return got
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestDefaultRender(t *testing.T) {
	got := mustRender(t, nil)
	want := []string{
		"ClusterRole/berth-agent", "ClusterRole/berth-controller", "ClusterRole/berth-metrics-reader", "ClusterRole/berth-scaler",
		"ClusterRoleBinding/berth-agent", "ClusterRoleBinding/berth-controller", "ClusterRoleBinding/berth-scaler",
		"CustomResourceDefinition/podgroups.scheduling.berth.dev",
		"DaemonSet/berth-agent", "Deployment/berth-controller", "Deployment/berth-scaler",
		"MutatingWebhookConfiguration/berth-pod-gate",
		"PodDisruptionBudget/berth-controller", "PodDisruptionBudget/berth-scaler", "PriorityClass/berth-seat",
		"Role/berth-controller", "Role/berth-scaler-models", "RoleBinding/berth-controller", "RoleBinding/berth-scaler-models",
		"Service/berth-scaler", "Service/berth-webhook",
		"ServiceAccount/berth-agent", "ServiceAccount/berth-controller", "ServiceAccount/berth-scaler",
	}
	if g := keys(got); !slices.Equal(g, want) {
		t.Fatalf("default render:\n got %v\nwant %v", g, want)
	}
	dep := got["Deployment/berth-controller"]
	if r := dig(dep, "spec", "replicas"); r != float64(2) {
		t.Errorf("controller replicas = %v, want 2 (leader election)", r)
	}
	args := containerArgs(dep)
	for _, a := range []string{"--leader-elect=true", "--webhook-hosts=berth-webhook.berth-system.svc", "--webhook-secret-namespace=berth-system", "--consolidation-guard=enforce"} {
		if !slices.Contains(args, a) {
			t.Errorf("controller args %v lack %s", args, a)
		}
	}
	hooks := dig(got["MutatingWebhookConfiguration/berth-pod-gate"], "webhooks").([]any)
	for _, h := range hooks {
		svc := dig(h.(map[string]any), "clientConfig", "service").(map[string]any)
		if svc["name"] != "berth-webhook" || svc["namespace"] != "berth-system" {
			t.Errorf("webhook %v points at %v", h.(map[string]any)["name"], svc)
		}
	}
	if len(hooks) != 2 {
		t.Errorf("%d webhooks, want berth's own and LeaderWorkerSet's (the other adapters are off unless listed)", len(hooks))
	}
	aff := dig(got["DaemonSet/berth-agent"], "spec", "template", "spec", "affinity", "nodeAffinity")
	if !strings.Contains(toYAML(t, aff), "nvidia.com/gpu.present") || !strings.Contains(toYAML(t, got["DaemonSet/berth-agent"]), "key: nvidia.com/gpu") {
		t.Errorf("agent must run on GPU nodes only and tolerate nvidia.com/gpu: %s", toYAML(t, aff))
	}
}

func TestFullRender(t *testing.T) {
	got := mustRender(t, full)
	if hooks := dig(got["MutatingWebhookConfiguration/berth-pod-gate"], "webhooks").([]any); len(hooks) != 6 {
		t.Errorf("%d webhooks, want berth + lws + coscheduling + volcano + kai + kueue (every adapter the controller knows)", len(hooks))
	}
	if args := toYAML(t, dig(got["Deployment/berth-controller"], "spec", "template", "spec", "containers")); !strings.Contains(args, "--adapters=lws,coscheduling,volcano,kai,kueue") {
		t.Errorf("controller lacks --adapters: %s", args)
	}
	for _, k := range []string{"Certificate/berth-webhook-cert", "Issuer/berth-selfsigned", "Certificate/berth-webhook-ca", "Issuer/berth-ca", "ServiceMonitor/berth-controller", "ServiceMonitor/berth-scaler",
		"PodMonitor/berth-agent", "PrometheusRule/berth", "ConfigMap/berth-dashboard", "NodePool/gpu-h100-training", "EC2NodeClass/gpu-l4-inference"} {
		if got[k] == nil {
			t.Errorf("full render lacks %s (has %v)", k, keys(got))
		}
	}
	args := containerArgs(got["Deployment/berth-scaler"])
	for _, a := range []string{"--tls-cert-file=/etc/berth/scaler-tls/tls.crt", "--tls-client-ca-file=/etc/berth/scaler-tls/ca.crt", "--namespace=inference"} {
		if !slices.Contains(args, a) {
			t.Errorf("scaler args %v lack %s", args, a)
		}
	}
	if !slices.Contains(containerArgs(got["Deployment/berth-controller"]), "--webhook-self-signed=false") {
		t.Error("with cert-manager the controller must not issue its own certificate")
	}
	// Secure metrics (the default): every component serves HTTPS behind authorization, and the
	// monitors scrape with the token of the chart's metrics-reader ServiceAccount.
	for _, d := range []string{"Deployment/berth-controller", "Deployment/berth-scaler", "DaemonSet/berth-agent"} {
		if !slices.Contains(containerArgs(got[d]), "--metrics-secure") {
			t.Errorf("%s does not serve secure metrics: %v", d, containerArgs(got[d]))
		}
	}
	for _, m := range []string{"ServiceMonitor/berth-controller", "ServiceMonitor/berth-scaler"} {
		ep := dig(got[m], "spec", "endpoints").([]any)[0].(map[string]any)
		if ep["scheme"] != "https" || dig(ep, "authorization", "credentials", "name") != "berth-metrics-reader" {
			t.Errorf("%s endpoint %v", m, ep)
		}
	}
	if ep := dig(got["PodMonitor/berth-agent"], "spec", "podMetricsEndpoints").([]any)[0].(map[string]any); ep["scheme"] != "https" {
		t.Errorf("agent PodMonitor endpoint %v", ep)
	}
	// A hung agent (an NVML call that never returns) is restarted: its liveness probe reads the
	// health loop's heartbeat on the port its args serve it on.
	agentC := dig(got["DaemonSet/berth-agent"], "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	if probe := toYAML(t, agentC["livenessProbe"]); !strings.Contains(probe, "path: /healthz") || !strings.Contains(probe, "port: health") ||
		!strings.Contains(toYAML(t, agentC["ports"]), "containerPort: 9401") || !slices.Contains(containerArgs(got["DaemonSet/berth-agent"]), "--health-probe-bind-address=:9401") {
		t.Errorf("agent liveness: probe %s, ports %v, args %v", probe, agentC["ports"], containerArgs(got["DaemonSet/berth-agent"]))
	}
	for _, k := range []string{"ServiceAccount/berth-metrics-reader", "Secret/berth-metrics-reader", "ClusterRoleBinding/berth-metrics-reader"} {
		if got[k] == nil {
			t.Errorf("full render lacks %s", k)
		}
	}
	// cert-manager mode: the serving certificate comes from a CA Issuer on a long-lived CA, so
	// its renewal keeps the bundle the API server trusts.
	if issuer := dig(got["Certificate/berth-webhook-cert"], "spec", "issuerRef", "name"); issuer != "berth-ca" {
		t.Errorf("serving certificate issued by %v, want the CA Issuer berth-ca", issuer)
	}
	if dig(got["Certificate/berth-webhook-ca"], "spec", "isCA") != true || dig(got["Issuer/berth-ca"], "spec", "ca", "secretName") != "berth-webhook-ca" {
		t.Errorf("CA Certificate %v / CA Issuer %v", got["Certificate/berth-webhook-ca"], got["Issuer/berth-ca"])
	}
	ann := dig(got["MutatingWebhookConfiguration/berth-pod-gate"], "metadata", "annotations").(map[string]any)
	if ann["cert-manager.io/inject-ca-from"] != "berth-system/berth-webhook-cert" {
		t.Errorf("webhook annotations %v", ann)
	}
	// The PrometheusRule carries config/prometheus/rules.yaml's groups, with the runbooks of the
	// installed version and the webhook Service's own name.
	data, err := os.ReadFile("../../config/prometheus/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.ReplaceAll(string(data), "/blob/main/docs/runbooks/", "/blob/v0.1.0/docs/runbooks/")
	want = strings.ReplaceAll(want, "(.+-)?berth(-.+)?-webhook", "berth-webhook")
	var rules map[string]any
	if err := yaml.Unmarshal([]byte(want), &rules); err != nil {
		t.Fatal(err)
	}
	if toYAML(t, dig(got["PrometheusRule/berth"], "spec")) != toYAML(t, rules) {
		t.Error("PrometheusRule spec differs from config/prometheus/rules.yaml (runbook version and webhook Service substituted)")
	}
	dash, err := os.ReadFile("../../config/grafana/berth-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if dig(got["ConfigMap/berth-dashboard"], "data", "berth-dashboard.json") != strings.TrimRight(string(dash), "\n") {
		t.Error("dashboard ConfigMap differs from config/grafana/berth-dashboard.json")
	}
}

// TestRestrictedPodSecurity: every pod the chart runs meets the "restricted" Pod Security
// Standard: non-root, read-only root filesystem, no privilege escalation, all capabilities
// dropped, seccomp RuntimeDefault; and has resource requests.
func TestRestrictedPodSecurity(t *testing.T) {
	for _, values := range []map[string]any{nil, full} {
		for k, obj := range mustRender(t, values) {
			if kind := obj["kind"]; kind != "Deployment" && kind != "DaemonSet" {
				continue
			}
			pod := dig(obj, "spec", "template", "spec").(map[string]any)
			psc, _ := pod["securityContext"].(map[string]any)
			if psc["runAsNonRoot"] != true || dig(psc, "seccompProfile", "type") != "RuntimeDefault" {
				t.Errorf("%s: pod securityContext %v", k, psc)
			}
			for _, c := range pod["containers"].([]any) {
				c := c.(map[string]any)
				sc, _ := c["securityContext"].(map[string]any)
				drop, _ := dig(sc, "capabilities", "drop").([]any)
				if sc["allowPrivilegeEscalation"] != false || sc["readOnlyRootFilesystem"] != true || sc["runAsNonRoot"] != true ||
					len(drop) != 1 || drop[0] != "ALL" || dig(sc, "seccompProfile", "type") != "RuntimeDefault" {
					t.Errorf("%s/%s: container securityContext %v", k, c["name"], sc)
				}
				if dig(c, "resources", "requests") == nil || dig(c, "resources", "limits", "memory") == nil {
					t.Errorf("%s/%s: resources %v", k, c["name"], c["resources"])
				}
				if c["livenessProbe"] == nil && !strings.HasPrefix(k, "DaemonSet/") {
					t.Errorf("%s/%s: no liveness probe", k, c["name"])
				}
			}
		}
	}
}

// TestLeastPrivilegeRBAC: no wildcard anywhere, no cluster-wide access to Secrets, and the
// rules are config/rbac's (the kustomize install and the chart grant the same).
func TestLeastPrivilegeRBAC(t *testing.T) {
	got := mustRender(t, full)
	for k, obj := range got {
		if !strings.HasPrefix(k, "ClusterRole/") && !strings.HasPrefix(k, "Role/") {
			continue
		}
		for _, r := range obj["rules"].([]any) {
			r := r.(map[string]any)
			for _, f := range []string{"apiGroups", "resources", "verbs"} {
				for _, v := range asStrings(r[f]) {
					if strings.Contains(v, "*") {
						t.Errorf("%s: wildcard %q in %s", k, v, f)
					}
				}
			}
			if strings.HasPrefix(k, "ClusterRole/") && slices.Contains(asStrings(r["resources"]), "secrets") {
				t.Errorf("%s reads secrets cluster-wide: %v", k, r)
			}
		}
	}
	wantRules := map[string]string{"ClusterRole/berth-scaler": "scaler.yaml", "ClusterRole/berth-agent": "agent.yaml"}
	for k, f := range wantRules {
		var cfg map[string]any
		data, err := os.ReadFile(filepath.Join("../../config/rbac", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			t.Fatal(err)
		}
		if toYAML(t, cfg["rules"]) != toYAML(t, got[k]["rules"]) {
			t.Errorf("%s differs from config/rbac/%s", k, f)
		}
	}
	data, err := os.ReadFile("../../config/rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := chart.SplitDocs(string(data))
	if len(docs) == 0 {
		t.Fatal("config/rbac/role.yaml has no documents")
	}
	for _, doc := range docs {
		var cfg map[string]any
		if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
			t.Fatal(err)
		}
		k := cfg["kind"].(string) + "/berth-controller"
		if toYAML(t, cfg["rules"]) != toYAML(t, got[k]["rules"]) {
			t.Errorf("%s differs from config/rbac/role.yaml", k)
		}
	}
}

// TestChartFilesMatchConfig: the chart's copies (make generate) are config/'s files, byte for
// byte, so `kubectl apply -k config` and `helm install` install the same CRDs, rules, webhook
// and PriorityClass.
func TestChartFilesMatchConfig(t *testing.T) {
	pairs := map[string]string{
		"files/crds/scheduling.berth.dev_podgroups.yaml": "crd/bases/scheduling.berth.dev_podgroups.yaml",
		"files/rbac/role.yaml":                           "rbac/role.yaml",
		"files/rbac/scaler.yaml":                         "rbac/scaler.yaml",
		"files/rbac/scaler-warm-seats.yaml":              "rbac/scaler-warm-seats.yaml",
		"files/rbac/scaler-models.yaml":                  "rbac/scaler-models.yaml",
		"files/rbac/agent.yaml":                          "rbac/agent.yaml",
		"files/rbac/metrics-reader.yaml":                 "rbac/metrics-reader.yaml",
		"files/pod-gate-webhook.yaml":                    "webhook/manifests.yaml",
		"files/prometheus-rules.yaml":                    "prometheus/rules.yaml",
		"files/berth-dashboard.json":                     "grafana/berth-dashboard.json",
		"files/priorityclass.yaml":                       "scheduling/priorityclass.yaml",
	}
	for c, k := range pairs {
		a, err := os.ReadFile(filepath.Join(chart.Dir(), c))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join("../../config", k))
		if err != nil {
			t.Fatal(err)
		}
		if string(a) != string(b) {
			t.Errorf("charts/berth/%s differs from config/%s: run make generate", c, k)
		}
	}
}

// TestBadValuesFailInstall: values.schema.json turns typos and wrong types into an install
// error naming the value.
func TestBadValuesFailInstall(t *testing.T) {
	tests := []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"typo", map[string]any{"controler": map[string]any{"replicas": 3}}, "controler"},
		{"replicas zero", map[string]any{"controller": map[string]any{"replicas": 0}}, "replicas"},
		{"guard mode", map[string]any{"controller": map[string]any{"consolidationGuard": "sometimes"}}, "consolidationGuard"},
		{"unknown adapter", map[string]any{"controller": map[string]any{"adapters": []any{"yunikorn"}}}, "adapters"},
		{"TLS without a secret", map[string]any{"scaler": map[string]any{"tls": map[string]any{"enabled": true}}}, "existingSecret"},
		{"headroom above 1", map[string]any{"scaler": map[string]any{"scaleDownHeadroom": 1.5}}, "scaleDownHeadroom"},
		{"bad duration", map[string]any{"scaler": map[string]any{"scrapeTimeout": "2 seconds"}}, "scrapeTimeout"},
		{"pull policy", map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}, "pullPolicy"},
		{"GPU access", map[string]any{"agent": map[string]any{"gpuAccess": "privileged"}}, "gpuAccess"},
		{"issuer kind", map[string]any{"webhook": map[string]any{"certManager": map[string]any{"enabled": true, "issuerRef": map[string]any{"name": "x", "kind": "Vault"}}}}, "kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := chart.Render(tt.values)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one naming %q", err, tt.want)
			}
		})
	}
}

func dig(obj any, path ...string) any {
	for _, p := range path {
		m, ok := obj.(map[string]any)
		if !ok {
			return nil
		}
		obj = m[p]
	}
	return obj
}

func containerArgs(dep map[string]any) []string {
	cs, _ := dig(dep, "spec", "template", "spec", "containers").([]any)
	if len(cs) == 0 {
		return nil
	}
	return asStrings(cs[0].(map[string]any)["args"])
}

func asStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		out = append(out, x.(string))
	}
	return out
}

func toYAML(t *testing.T, v any) string {
	t.Helper()
	data, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestWarmSeatsValues: scaler.warmSeats.enabled turns the keeper on (its flags) and adds
// exactly config/rbac/scaler-warm-seats.yaml's rules to the scaler's ClusterRole; off (the
// default) the scaler can create no pod.
func TestWarmSeatsValues(t *testing.T) {
	args := func(objs map[string]map[string]any) []string {
		d := objs["Deployment/berth-scaler"]
		spec := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		return asStrings(spec["containers"].([]any)[0].(map[string]any)["args"])
	}
	verbs := func(objs map[string]map[string]any) string {
		return toYAML(t, objs["ClusterRole/berth-scaler"]["rules"])
	}
	off, err := render(t, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	var extra map[string]any
	data, err := os.ReadFile("../../config/rbac/scaler-warm-seats.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &extra); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(args(off), "--warm-seats") || strings.Contains(verbs(off), toYAML(t, extra["rules"])) {
		t.Errorf("warm seats off by default: args %v, rules %s", args(off), verbs(off))
	}
	on, err := render(t, map[string]any{"scaler": map[string]any{"warmSeats": map[string]any{"enabled": true, "pull": "init-container", "image": "mirror.example/pause:3.10"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--warm-seats", "--warm-seat-pull=init-container", "--warm-seat-image=mirror.example/pause:3.10"} {
		if !slices.Contains(args(on), want) {
			t.Errorf("scaler args %v lack %s", args(on), want)
		}
	}
	if !strings.HasSuffix(verbs(on), toYAML(t, extra["rules"])) {
		t.Errorf("the scaler's rules with warm seats:\n%s\nwant config/rbac/scaler-warm-seats.yaml's appended:\n%s", verbs(on), toYAML(t, extra["rules"]))
	}
	if _, err := render(t, map[string]any{"scaler": map[string]any{"warmSeats": map[string]any{"pull": "sideways"}}}); err == nil {
		t.Error("scaler.warmSeats.pull sideways: want a schema error")
	}
}

// TestKeepModelsValues: scaler.keepModels (the default) points the scaler at the release
// namespace for its fleet models and binds its ServiceAccount to a Role there with exactly
// config/rbac/scaler-models.yaml's rules; off, the scaler keeps them in memory and has no
// ConfigMap access.
func TestKeepModelsValues(t *testing.T) {
	args := func(objs map[string]map[string]any) []string {
		d := objs["Deployment/berth-scaler"]
		spec := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		return asStrings(spec["containers"].([]any)[0].(map[string]any)["args"])
	}
	var want map[string]any
	data, err := os.ReadFile("../../config/rbac/scaler-models.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	on, err := render(t, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(args(on), "--model-namespace=berth-system") {
		t.Errorf("scaler args %v lack --model-namespace=berth-system", args(on))
	}
	role, binding := on["Role/berth-scaler-models"], on["RoleBinding/berth-scaler-models"]
	if role == nil || toYAML(t, role["rules"]) != toYAML(t, want["rules"]) {
		t.Errorf("the scaler's models Role:\n%s\nwant config/rbac/scaler-models.yaml's rules:\n%s", toYAML(t, role["rules"]), toYAML(t, want["rules"]))
	}
	if binding == nil || !strings.Contains(toYAML(t, binding["subjects"]), "name: berth-scaler") {
		t.Errorf("the models RoleBinding binds %v, want the scaler's ServiceAccount", binding["subjects"])
	}
	off, err := render(t, map[string]any{"scaler": map[string]any{"keepModels": false}})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(args(off), "--model-namespace=berth-system") || off["Role/berth-scaler-models"] != nil {
		t.Errorf("keepModels false: args %v, Role %v; want neither", args(off), off["Role/berth-scaler-models"])
	}
}

// TestAgentGPUAccess: by default the agent asks the NVIDIA runtime for every GPU through
// NVIDIA_VISIBLE_DEVICES and mounts nothing from the host; with gpuAccess volumeMounts (what
// Bottlerocket's runtime accepts from an unprivileged container) it also mounts the host's
// /dev/null at /var/run/nvidia-container-devices/all, read-only, beside any extra volume.
func TestAgentGPUAccess(t *testing.T) {
	for _, tt := range []struct {
		access     string
		wantDevice bool
	}{{"", false}, {"environment", false}, {"volumeMounts", true}} {
		t.Run("gpuAccess="+tt.access, func(t *testing.T) {
			agent := map[string]any{"extraVolumes": []any{map[string]any{"name": "ca", "configMap": map[string]any{"name": "ca"}}},
				"extraVolumeMounts": []any{map[string]any{"name": "ca", "mountPath": "/etc/ca"}}}
			if tt.access != "" {
				agent["gpuAccess"] = tt.access
			}
			ds := mustRender(t, map[string]any{"agent": agent})["DaemonSet/berth-agent"]
			pod := dig(ds, "spec", "template", "spec").(map[string]any)
			c := pod["containers"].([]any)[0].(map[string]any)
			env := map[string]any{}
			for _, e := range c["env"].([]any) {
				env[e.(map[string]any)["name"].(string)] = e.(map[string]any)["value"]
			}
			if env["NVIDIA_VISIBLE_DEVICES"] != "all" {
				t.Errorf("NVIDIA_VISIBLE_DEVICES = %v, want all", env["NVIDIA_VISIBLE_DEVICES"])
			}
			var device, ca bool
			for _, v := range pod["volumes"].([]any) {
				v := v.(map[string]any)
				switch v["name"] {
				case "nvidia-all-gpus":
					device = dig(v, "hostPath", "path") == "/dev/null" && dig(v, "hostPath", "type") == "CharDevice"
				case "ca":
					ca = true
				}
			}
			var mounted bool
			for _, m := range c["volumeMounts"].([]any) {
				m := m.(map[string]any)
				if m["name"] == "nvidia-all-gpus" {
					mounted = m["mountPath"] == "/var/run/nvidia-container-devices/all" && m["readOnly"] == true
				}
			}
			if device != tt.wantDevice || mounted != tt.wantDevice || !ca {
				t.Errorf("/dev/null volume %v, mounted at the device list %v (want %v); extra volume kept %v", device, mounted, tt.wantDevice, ca)
			}
		})
	}
}
