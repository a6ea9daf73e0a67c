package chart_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestProbeTimings: each component's probe timings can be tuned over the chart's defaults; what
// is probed stays the chart's (the schema refuses a handler).
func TestProbeTimings(t *testing.T) {
	def, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"httpGet": map[string]any{"path": "/healthz", "port": "health"}, "initialDelaySeconds": float64(10)},
		dig(container(def["Deployment/berth-controller"]), "livenessProbe")); diff != "" {
		t.Errorf("default controller liveness probe (-want +got):\n%s", diff)
	}
	got, err := render(t, map[string]any{
		"controller": map[string]any{"livenessProbe": map[string]any{"periodSeconds": 30, "failureThreshold": 6},
			"readinessProbe": map[string]any{"timeoutSeconds": 3}},
		"scaler": map[string]any{"livenessProbe": map[string]any{"initialDelaySeconds": 0}},
		"agent":  map[string]any{"livenessProbe": map[string]any{"timeoutSeconds": 15}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		obj, probe string
		want       map[string]any
	}{
		{"Deployment/berth-controller", "livenessProbe", map[string]any{"httpGet": map[string]any{"path": "/healthz", "port": "health"},
			"initialDelaySeconds": float64(10), "periodSeconds": float64(30), "failureThreshold": float64(6)}},
		{"Deployment/berth-controller", "readinessProbe", map[string]any{"httpGet": map[string]any{"path": "/readyz", "port": "health"}, "timeoutSeconds": float64(3)}},
		{"Deployment/berth-scaler", "livenessProbe", map[string]any{"grpc": map[string]any{"port": float64(9090)}, "initialDelaySeconds": float64(0)}},
		{"Deployment/berth-scaler", "readinessProbe", map[string]any{"grpc": map[string]any{"port": float64(9090), "service": "externalscaler.ExternalScaler"}}},
		{"DaemonSet/berth-agent", "livenessProbe", map[string]any{"httpGet": map[string]any{"path": "/healthz", "port": "health"},
			"periodSeconds": float64(20), "timeoutSeconds": float64(15), "failureThreshold": float64(3)}},
	} {
		if diff := cmp.Diff(tc.want, dig(container(got[tc.obj]), tc.probe)); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", tc.obj, tc.probe, diff)
		}
	}
	if _, err := render(t, map[string]any{"controller": map[string]any{"livenessProbe": map[string]any{"httpGet": map[string]any{"path": "/"}}}}); err == nil {
		t.Error("a probe handler in the values rendered; want the schema to refuse it")
	}
	if _, err := render(t, map[string]any{"agent": map[string]any{"livenessProbe": map[string]any{"periodSeconds": 0}}}); err == nil {
		t.Error("periodSeconds 0 rendered; want the schema to refuse it")
	}
}

// ingressPorts maps each port of a NetworkPolicy's ingress rules to the peers admitted to it
// ("anywhere" for a rule without from).
func ingressPorts(np map[string]any) map[string]any {
	out := map[string]any{}
	rules, _ := dig(np, "spec", "ingress").([]any)
	for _, r := range rules {
		ports, _ := dig(r, "ports").([]any)
		from := dig(r, "from")
		if from == nil {
			from = "anywhere"
		}
		for _, p := range ports {
			out[fmt.Sprint(dig(p, "port"))] = from
		}
	}
	return out
}

// TestNetworkPolicy: off by default; on, each component admits only what it serves — the
// webhook from anywhere (the API server has no selector), /metrics from the monitoring
// namespace, the scaler's gRPC from KEDA's — on the ports the workloads listen on (moved under
// hostNetwork), and selects exactly its own pods.
func TestNetworkPolicy(t *testing.T) {
	def, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := range def {
		if len(k) > 14 && k[:14] == "NetworkPolicy/" {
			t.Errorf("%s rendered with networkPolicy.enabled false", k)
		}
	}
	monitoring := []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}}
	keda := []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "keda"}}}}
	debug := map[string]any{"from": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": "sre"}}}},
		"ports": []any{map[string]any{"port": 6060}}}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   map[string]map[string]any
	}{
		{"defaults", map[string]any{"networkPolicy": map[string]any{"enabled": true}}, map[string]map[string]any{
			"controller": {"9443": "anywhere", "8080": monitoring},
			"scaler":     {"9090": keda, "8080": monitoring},
			"agent":      {"9400": monitoring},
		}},
		{"hostNetwork, extra rule, no scaler", map[string]any{"networkPolicy": map[string]any{"enabled": true,
			"extraIngress": map[string]any{"controller": []any{debug}}},
			"controller": map[string]any{"hostNetwork": true}, "scaler": map[string]any{"enabled": false}}, map[string]map[string]any{
			"controller": {"9342": "anywhere", "9340": monitoring, "6060": debug["from"]},
			"agent":      {"9400": monitoring},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := render(t, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for k := range got {
				if len(k) > 14 && k[:14] == "NetworkPolicy/" {
					names = append(names, k)
				}
			}
			var want []string
			for c := range tc.want {
				want = append(want, "NetworkPolicy/berth-"+c)
			}
			slices.Sort(names)
			slices.Sort(want)
			if diff := cmp.Diff(want, names); diff != "" {
				t.Fatalf("NetworkPolicies (-want +got):\n%s", diff)
			}
			workloads := map[string]string{"controller": "Deployment/berth-controller", "scaler": "Deployment/berth-scaler", "agent": "DaemonSet/berth-agent"}
			for c, ports := range tc.want {
				np := got["NetworkPolicy/berth-"+c]
				if diff := cmp.Diff(ports, ingressPorts(np)); diff != "" {
					t.Errorf("%s ingress by port (-want +got):\n%s", c, diff)
				}
				sel, _ := dig(np, "spec", "podSelector", "matchLabels").(map[string]any)
				podLabels, _ := dig(got[workloads[c]], "spec", "template", "metadata", "labels").(map[string]any)
				for k, v := range sel {
					if podLabels[k] != v {
						t.Errorf("%s selects %s=%v; its pods carry %v", c, k, v, podLabels[k])
					}
				}
				for other, w := range workloads {
					if other == c || got[w] == nil {
						continue
					}
					otherLabels, _ := dig(got[w], "spec", "template", "metadata", "labels").(map[string]any)
					if matchesAll(sel, otherLabels) {
						t.Errorf("%s's policy also selects the %s's pods", c, other)
					}
				}
			}
		})
	}
}

// matchesAll reports whether labels carry every selector label.
func matchesAll(sel, labels map[string]any) bool {
	for k, v := range maps.All(sel) {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}
