package chart_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth/controllers"
	"github.com/berth-dev/berth/test/chart"
)

// podSpec is a workload's pod spec.
func podSpec(obj map[string]any) map[string]any {
	s, _ := dig(obj, "spec", "template", "spec").(map[string]any)
	return s
}

// container is a workload's first container.
func container(obj map[string]any) map[string]any {
	cs, _ := podSpec(obj)["containers"].([]any)
	if len(cs) == 0 {
		return nil
	}
	return cs[0].(map[string]any)
}

var workloads = []string{"Deployment/berth-controller", "Deployment/berth-scaler", "DaemonSet/berth-agent"}

// TestSafeDefaults: what the chart does with no values reaches no further than it must.
func TestSafeDefaults(t *testing.T) {
	got := mustRender(t, nil)
	for _, key := range []string{"PodDisruptionBudget/berth-controller", "PodDisruptionBudget/berth-scaler"} {
		spec, _ := dig(got[key], "spec").(map[string]any)
		if spec["maxUnavailable"] != float64(1) || spec["minAvailable"] != nil {
			t.Errorf("%s: %v; want maxUnavailable 1 (minAvailable 1 with one replica blocks every drain)", key, spec)
		}
	}
	for key, want := range map[string]any{
		"Deployment/berth-controller": "system-cluster-critical", // a Fail webhook
		"DaemonSet/berth-agent":       "system-node-critical",
		"Deployment/berth-scaler":     nil,
	} {
		if pc := podSpec(got[key])["priorityClassName"]; pc != want {
			t.Errorf("%s priorityClassName %v, want %v", key, pc, want)
		}
	}
	for _, key := range workloads {
		if args := asStrings(container(got[key])["args"]); !slices.Contains(args, "--log-level=info") {
			t.Errorf("%s args %v lack --log-level=info", key, args)
		}
		if podSpec(got[key])["hostNetwork"] != nil {
			t.Errorf("%s on the host network by default", key)
		}
	}
	hooks, _ := dig(got["MutatingWebhookConfiguration/berth-pod-gate"], "webhooks").([]any)
	if len(hooks) != 2 {
		t.Fatalf("%d webhooks by default, want berth's own and LeaderWorkerSet's (the other adapters are off unless listed)", len(hooks))
	}
	for _, h := range hooks {
		if fp := h.(map[string]any)["failurePolicy"]; fp != "Fail" {
			t.Errorf("failurePolicy %v, want Fail", fp)
		}
	}
	full := mustRender(t, full)
	for _, key := range []string{"ServiceMonitor/berth-controller", "ServiceMonitor/berth-scaler"} {
		eps, _ := dig(full[key], "spec", "endpoints").([]any)
		if len(eps) != 1 || eps[0].(map[string]any)["honorLabels"] != true {
			t.Errorf("%s endpoints %v: want honorLabels (the scaler's namespace label is the ScaledObject's, not the target's)", key, eps)
		}
	}
	if _, err := chart.Render(map[string]any{"global": map[string]any{"imageRegistry": "mirror.example.com"}}); err != nil {
		t.Errorf("a parent chart's global values fail the install: %v", err)
	}
}

// TestPodValues: every component takes the values the Karpenter and KEDA charts take.
func TestPodValues(t *testing.T) {
	perComponent := func(c string) map[string]any {
		return map[string]any{
			"serviceAccount":            map[string]any{"create": false, "name": "team-" + c},
			"podAnnotations":            map[string]any{"example.com/owner": "platform"},
			"podLabels":                 map[string]any{"team": "ml-platform"},
			"priorityClassName":         "berth-critical",
			"topologySpreadConstraints": []any{map[string]any{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}},
			"logLevel":                  "debug",
			"extraArgs":                 []any{"--kube-api-qps=50"},
			"extraEnv":                  []any{map[string]any{"name": "GOMEMLIMIT", "value": "900MiB"}},
		}
	}
	values := map[string]any{"fullnameOverride": "gpu", "nameOverride": "gpu-berth",
		"controller": perComponent("controller"), "scaler": perComponent("scaler"), "agent": perComponent("agent"),
		"webhook": map[string]any{"failurePolicy": "Ignore"}}
	got := mustRender(t, values)
	for _, c := range []string{"controller", "scaler", "agent"} {
		key := "Deployment/gpu-" + c
		if c == "agent" {
			key = "DaemonSet/gpu-agent"
		}
		obj := got[key]
		if obj == nil {
			t.Fatalf("no %s (fullnameOverride): %v", key, keys(got))
		}
		spec := podSpec(obj)
		if spec["serviceAccountName"] != "team-"+c || spec["priorityClassName"] != "berth-critical" || spec["topologySpreadConstraints"] == nil {
			t.Errorf("%s pod spec: serviceAccountName %v, priorityClassName %v, spread %v", key, spec["serviceAccountName"], spec["priorityClassName"], spec["topologySpreadConstraints"])
		}
		meta, _ := dig(obj, "spec", "template", "metadata").(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		ann, _ := meta["annotations"].(map[string]any)
		if labels["team"] != "ml-platform" || labels["app.kubernetes.io/name"] != "gpu-berth" || ann["example.com/owner"] != "platform" {
			t.Errorf("%s pod metadata %v", key, meta)
		}
		ct := container(obj)
		args := asStrings(ct["args"])
		if !slices.Contains(args, "--log-level=debug") || !slices.Contains(args, "--kube-api-qps=50") {
			t.Errorf("%s args %v", key, args)
		}
		if env := toYAML(t, ct["env"]); !strings.Contains(env, "GOMEMLIMIT") {
			t.Errorf("%s env %s lacks the extra variable", key, env)
		}
		if _, ok := got["ServiceAccount/gpu-"+c]; ok {
			t.Errorf("serviceAccount.create false still creates ServiceAccount/gpu-%s", c)
		}
		subjects, _ := dig(got["ClusterRoleBinding/gpu-"+c], "subjects").([]any)
		if len(subjects) != 1 || subjects[0].(map[string]any)["name"] != "team-"+c {
			t.Errorf("ClusterRoleBinding/gpu-%s subjects %v, want the existing ServiceAccount team-%s", c, subjects, c)
		}
	}
	hooks, _ := dig(got["MutatingWebhookConfiguration/berth-pod-gate"], "webhooks").([]any)
	if fp := hooks[0].(map[string]any)["failurePolicy"]; fp != "Ignore" {
		t.Errorf("failurePolicy %v, want Ignore", fp)
	}
	svc, _ := dig(hooks[0], "clientConfig", "service").(map[string]any)
	if svc["name"] != "gpu-webhook" {
		t.Errorf("webhook service %v, want gpu-webhook", svc["name"])
	}

	// A created ServiceAccount carries its annotations (IRSA, workload identity).
	got = mustRender(t, map[string]any{"controller": map[string]any{"serviceAccount": map[string]any{"annotations": map[string]any{"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/berth"}}}})
	if ann, _ := dig(got["ServiceAccount/berth-controller"], "metadata", "annotations").(map[string]any); ann["eks.amazonaws.com/role-arn"] == nil {
		t.Errorf("ServiceAccount annotations %v", ann)
	}
}

// TestHostNetworkWebhook: on overlay CNIs the controller runs on the node's network, with the
// webhook, metrics and health ports it is told (free on every node).
func TestHostNetworkWebhook(t *testing.T) {
	got := mustRender(t, map[string]any{
		"controller": map[string]any{"hostNetwork": true, "metricsPort": 18080, "healthPort": 18081},
		"webhook":    map[string]any{"port": 19443},
	})
	dep := got["Deployment/berth-controller"]
	spec := podSpec(dep)
	if spec["hostNetwork"] != true || spec["dnsPolicy"] != "ClusterFirstWithHostNet" {
		t.Errorf("hostNetwork %v, dnsPolicy %v", spec["hostNetwork"], spec["dnsPolicy"])
	}
	args := asStrings(container(dep)["args"])
	for _, want := range []string{"--webhook-port=19443", "--metrics-bind-address=:18080", "--health-probe-bind-address=:18081"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
	if ports := toYAML(t, container(dep)["ports"]); !strings.Contains(ports, "19443") || !strings.Contains(ports, "18080") || !strings.Contains(ports, "18081") {
		t.Errorf("container ports %s", ports)
	}
}

// TestHostNetworkPortsAvoidTheNeighbours: under hostNetwork the ports are the node's, where
// Karpenter (8080, 8081, 8443) and Kueue (8080, 8081, 9443) listen too when they run on the host
// network: ports left at their defaults move to berth's own; on the pod network they stay.
func TestHostNetworkPortsAvoidTheNeighbours(t *testing.T) {
	for _, tc := range []struct {
		hostNetwork bool
		want        []string
	}{
		{true, []string{"--metrics-bind-address=:9340", "--health-probe-bind-address=:9341", "--webhook-port=9342"}},
		{false, []string{"--metrics-bind-address=:8080", "--health-probe-bind-address=:8081", "--webhook-port=9443"}},
	} {
		got := mustRender(t, map[string]any{"controller": map[string]any{"hostNetwork": tc.hostNetwork}})
		dep := got["Deployment/berth-controller"]
		args := asStrings(container(dep)["args"])
		for _, want := range tc.want {
			if !slices.Contains(args, want) {
				t.Errorf("hostNetwork %v: args %v lack %s", tc.hostNetwork, args, want)
			}
		}
		port := strings.TrimPrefix(tc.want[2], "--webhook-port=")
		if ports := toYAML(t, container(dep)["ports"]); !strings.Contains(ports, "containerPort: "+port) {
			t.Errorf("hostNetwork %v: container ports %s, want the webhook on %s", tc.hostNetwork, ports, port)
		}
	}
}

// TestBadPodValues: the new values are checked like the others.
func TestBadPodValues(t *testing.T) {
	tests := []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"existing ServiceAccount without a name", map[string]any{"scaler": map[string]any{"serviceAccount": map[string]any{"create": false}}}, "scaler.serviceAccount.name is required"},
		{"log level", map[string]any{"controller": map[string]any{"logLevel": "verbose"}}, "logLevel"},
		{"extra arg not a flag", map[string]any{"agent": map[string]any{"extraArgs": []any{"agent"}}}, "extraArgs"},
		{"failure policy", map[string]any{"webhook": map[string]any{"failurePolicy": "Sometimes"}}, "failurePolicy"},
		{"old PDB field", map[string]any{"controller": map[string]any{"podDisruptionBudget": map[string]any{"minAvailable": 1}}}, "minAvailable"},
		{"fullnameOverride not a name", map[string]any{"fullnameOverride": "GPU_Berth"}, "fullnameOverride"},
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

// TestHelmTest: helm test runs `berth doctor --install` in the release namespace with a
// ServiceAccount of its own that may do exactly what the check needs; none of it is installed
// with the release.
func TestHelmTest(t *testing.T) {
	hooks, err := chart.Hooks(nil)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]map[string]any{}
	for _, h := range hooks {
		if ann, _ := dig(h, "metadata", "annotations").(map[string]any); ann["helm.sh/hook"] != "test" {
			t.Errorf("%v %v is a hook but not a test hook: %v", h["kind"], dig(h, "metadata", "name"), ann)
		}
		byKey[h["kind"].(string)+"/"+dig(h, "metadata", "name").(string)] = h
	}
	pod := byKey["Pod/berth-test"]
	if pod == nil {
		t.Fatalf("no test pod among %v", hooks)
	}
	cs, _ := dig(pod, "spec", "containers").([]any)
	if args := asStrings(cs[0].(map[string]any)["args"]); strings.Join(args, " ") != "doctor --install -n berth-system" {
		t.Errorf("test pod args %v", args)
	}
	if sa := dig(pod, "spec", "serviceAccountName"); sa != "berth-test" {
		t.Errorf("test pod runs as %v", sa)
	}
	rules := toYAML(t, dig(byKey["Role/berth-test"], "rules")) + toYAML(t, dig(byKey["ClusterRole/berth-test"], "rules"))
	for _, want := range []string{"create", "customresourcedefinitions", "podgroups.scheduling.berth.dev", "mutatingwebhookconfigurations", "berth-pod-gate",
		"leases", controllers.LeaderElectionID, "nodes"} {
		if !strings.Contains(rules, want) {
			t.Errorf("test RBAC lacks %q:\n%s", want, rules)
		}
	}
	for _, forbidden := range []string{"'*'", "delete", "update", "patch", "secrets", "watch"} {
		if strings.Contains(rules, forbidden) {
			t.Errorf("test RBAC grants %s:\n%s", forbidden, rules)
		}
	}
	// Without the agent, its check is left out rather than failing on every GPU node.
	noAgent, err := chart.Hooks(map[string]any{"agent": map[string]any{"enabled": false}})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range noAgent {
		if h["kind"] == "Pod" {
			cs, _ := dig(h, "spec", "containers").([]any)
			if args := strings.Join(asStrings(cs[0].(map[string]any)["args"]), " "); args != "doctor --install -n berth-system --skip berth-agent" {
				t.Errorf("test pod args without the agent: %s", args)
			}
		}
	}
	for key := range mustRender(t, nil) {
		if strings.Contains(key, "berth-test") {
			t.Errorf("%s is installed with the release; it is a test hook", key)
		}
	}
}

// TestNotes: what helm install prints names the fully qualified PodGroup resource and helm test,
// and warns about an unpinned AMI and an Ignore failure policy only when they apply.
func TestNotes(t *testing.T) {
	notes, err := chart.Notes(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"podgroups.scheduling.berth.dev", "helm test berth -n berth-system", "docs/runbooks/emergency.md"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "WARNING") {
		t.Errorf("default NOTES warn:\n%s", notes)
	}
	notes, err = chart.Notes(map[string]any{"webhook": map[string]any{"failurePolicy": "Ignore"},
		"nodePools": map[string]any{"clusterName": "prod", "families": map[string]any{"h100": map[string]any{"enabled": true}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"failurePolicy is Ignore", "amiAlias is al2023@latest", "NodePools for h100 are installed and kept"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
}
