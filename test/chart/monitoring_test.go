package chart_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// monitoringOn turns every monitoring object on, with more values merged in.
func monitoringOn(more map[string]any) map[string]any {
	m := map[string]any{
		"serviceMonitor": map[string]any{"enabled": true},
		"prometheusRule": map[string]any{"enabled": true},
	}
	for k, v := range more {
		if sub, ok := m[k].(map[string]any); ok {
			for kk, vv := range v.(map[string]any) {
				sub[kk] = vv
			}
			continue
		}
		m[k] = v
	}
	return map[string]any{"monitoring": m}
}

// labelsOf reads an object's metadata.labels.
func labelsOf(obj map[string]any) labels.Set {
	out := labels.Set{}
	m, _ := dig(obj, "metadata", "labels").(map[string]any)
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// matchLabels reads a label selector's matchLabels at path.
func matchLabels(obj map[string]any, path ...string) labels.Selector {
	set := labels.Set{}
	m, _ := dig(obj, path...).(map[string]any)
	for k, v := range m {
		set[k] = fmt.Sprint(v)
	}
	return labels.SelectorFromSet(set)
}

// namedPort reports whether ports (a Service's or a container's) has one named name.
func namedPort(ports any, name string) bool {
	list, _ := ports.([]any)
	return slices.ContainsFunc(list, func(p any) bool { return dig(p, "name") == name })
}

// TestKubePrometheusStackSelectsBerth: a Prometheus set up as kube-prometheus-stack sets it up by
// default — ServiceMonitors, PodMonitors and PrometheusRules selected by release=<its release>,
// in every namespace — finds berth's monitors and rules with nothing but the quickstart's
// enabled flags, and each monitor finds its targets (a Service, or the agent's pods, with a
// port named as its endpoint's). Without the label, nothing would be selected: the test fails
// on the chart's old default.
func TestKubePrometheusStackSelectsBerth(t *testing.T) {
	kps := labels.SelectorFromSet(labels.Set{"release": "kube-prometheus-stack"})
	got, err := render(t, monitoringOn(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ServiceMonitor/berth-controller", "ServiceMonitor/berth-scaler", "PodMonitor/berth-agent", "PrometheusRule/berth"} {
		if got[k] == nil {
			t.Fatalf("render lacks %s", k)
		}
		if !kps.Matches(labelsOf(got[k])) {
			t.Errorf("%s labels %v: kube-prometheus-stack's default selector %s does not select it", k, labelsOf(got[k]), kps)
		}
	}
	for _, c := range []string{"controller", "scaler"} {
		sm := got["ServiceMonitor/berth-"+c]
		sel := matchLabels(sm, "spec", "selector", "matchLabels")
		port := dig(dig(sm, "spec", "endpoints").([]any)[0], "port").(string)
		var found []string
		for k, obj := range got {
			if strings.HasPrefix(k, "Service/") && sel.Matches(labelsOf(obj)) && namedPort(dig(obj, "spec", "ports"), port) {
				found = append(found, k)
			}
		}
		if len(found) != 1 {
			t.Errorf("ServiceMonitor/berth-%s (selector %s, port %s) finds Services %v, want exactly one", c, sel, port, found)
		}
	}
	pm := got["PodMonitor/berth-agent"]
	sel := matchLabels(pm, "spec", "selector", "matchLabels")
	ds := got["DaemonSet/berth-agent"]
	port := dig(dig(pm, "spec", "podMetricsEndpoints").([]any)[0], "port").(string)
	tmpl := map[string]any{"metadata": dig(ds, "spec", "template", "metadata")}
	if !sel.Matches(labelsOf(tmpl)) || !namedPort(dig(container(ds), "ports"), port) {
		t.Errorf("PodMonitor/berth-agent (selector %s, port %s) does not find the agent's pods (labels %v)", sel, port, labelsOf(tmpl))
	}

	// Another release name, or a Prometheus that selects everything.
	got, err = render(t, monitoringOn(map[string]any{"prometheusRelease": "monitoring"}))
	if err != nil {
		t.Fatal(err)
	}
	if l := labelsOf(got["PrometheusRule/berth"]); l["release"] != "monitoring" {
		t.Errorf("prometheusRelease monitoring: PrometheusRule labels %v", l)
	}
	got, err = render(t, monitoringOn(map[string]any{"prometheusRelease": "", "additionalLabels": map[string]any{"prometheus": "platform"}, "serviceMonitor": map[string]any{"labels": map[string]any{"team": "ml"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if l := labelsOf(got["ServiceMonitor/berth-controller"]); l["release"] != "" || l["team"] != "ml" || l["prometheus"] != "platform" {
		t.Errorf("no prometheusRelease, additionalLabels prometheus=platform, serviceMonitor.labels team=ml: ServiceMonitor labels %v", l)
	}
}

// alerts reads a rendered PrometheusRule's alerts by name.
func alerts(t *testing.T, pr map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	groups, _ := dig(pr, "spec", "groups").([]any)
	for _, g := range groups {
		rules, _ := dig(g, "rules").([]any)
		if len(rules) == 0 {
			t.Errorf("group %v rendered without rules", dig(g, "name"))
		}
		for _, r := range rules {
			rm := r.(map[string]any)
			out[fmt.Sprint(rm["alert"])] = rm
		}
	}
	return out
}

// TestAlertValues: alerts can be left out and tuned one by one, and every alert can carry extra
// labels and annotations — what kube-prometheus-stack's defaultRules values let an SRE do — and
// a name that is no alert fails the render instead of silently keeping the page.
func TestAlertValues(t *testing.T) {
	base, err := render(t, monitoringOn(nil))
	if err != nil {
		t.Fatal(err)
	}
	all := alerts(t, base["PrometheusRule/berth"])
	got, err := render(t, monitoringOn(map[string]any{"prometheusRule": map[string]any{
		"disabled":                  map[string]any{"BerthGPUDegraded": true, "BerthWebhookSlow": false},
		"overrides":                 map[string]any{"BerthGangPendingTooLong": map[string]any{"for": "30m", "labels": map[string]any{"severity": "info", "page": "no"}}},
		"additionalRuleLabels":      map[string]any{"cluster": "prod-use1", "severity": "ignored"},
		"additionalRuleAnnotations": map[string]any{"dashboard": "https://grafana.example.com/d/berth"},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	tuned := alerts(t, got["PrometheusRule/berth"])
	if _, ok := tuned["BerthGPUDegraded"]; ok || len(tuned) != len(all)-1 {
		t.Errorf("disabled BerthGPUDegraded: %d alerts of %d left, BerthGPUDegraded present %v", len(tuned), len(all), ok)
	}
	if _, ok := tuned["BerthWebhookSlow"]; !ok {
		t.Error("disabled: {BerthWebhookSlow: false} left it out")
	}
	p := tuned["BerthGangPendingTooLong"]
	if p["for"] != "30m" || dig(p, "labels", "severity") != "info" || dig(p, "labels", "page") != "no" {
		t.Errorf("override of BerthGangPendingTooLong: for %v, labels %v", p["for"], p["labels"])
	}
	for name, a := range tuned {
		if dig(a, "labels", "cluster") != "prod-use1" || dig(a, "annotations", "dashboard") == nil {
			t.Errorf("%s lacks the additional rule labels or annotations: %v %v", name, a["labels"], a["annotations"])
		}
		if name != "BerthGangPendingTooLong" && dig(a, "labels", "severity") != dig(all[name], "labels", "severity") {
			t.Errorf("%s severity %v: an additional label overrode the alert's own %v", name, dig(a, "labels", "severity"), dig(all[name], "labels", "severity"))
		}
		if name != "BerthGangPendingTooLong" && a["for"] != all[name]["for"] {
			t.Errorf("%s for %v, was %v", name, a["for"], all[name]["for"])
		}
	}
	for _, v := range []map[string]any{
		{"disabled": map[string]any{"BerthGPUDegradedd": true}},
		{"overrides": map[string]any{"BerthNoSuchAlert": map[string]any{"for": "1m"}}},
	} {
		_, err := render(t, monitoringOn(map[string]any{"prometheusRule": v}))
		if err == nil || !strings.Contains(err.Error(), "is not one of berth's alerts") {
			t.Errorf("values %v: %v, want an error naming the unknown alert", v, err)
		}
	}
}

// TestScrapeValues: scrape timeout, relabelings, metric relabelings and the sample limit reach
// every monitor; the agent's own node relabeling stays first.
func TestScrapeValues(t *testing.T) {
	drop := map[string]any{"sourceLabels": []any{"__name__"}, "regex": "go_gc_.*", "action": "drop"}
	team := map[string]any{"targetLabel": "team", "replacement": "ml-platform"}
	got, err := render(t, monitoringOn(map[string]any{"serviceMonitor": map[string]any{
		"scrapeTimeout": "20s", "sampleLimit": 50000,
		"relabelings": []any{team}, "metricRelabelings": []any{drop},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	for k, path := range map[string]string{"ServiceMonitor/berth-controller": "endpoints", "ServiceMonitor/berth-scaler": "endpoints", "PodMonitor/berth-agent": "podMetricsEndpoints"} {
		ep := dig(got[k], "spec", path).([]any)[0]
		rel := toYAML(t, dig(ep, "relabelings"))
		if dig(ep, "scrapeTimeout") != "20s" || fmt.Sprint(dig(got[k], "spec", "sampleLimit")) != "50000" ||
			!strings.Contains(rel, "ml-platform") || !strings.Contains(toYAML(t, dig(ep, "metricRelabelings")), "go_gc_") {
			t.Errorf("%s: spec %s", k, toYAML(t, dig(got[k], "spec")))
		}
		if k == "PodMonitor/berth-agent" && !strings.HasPrefix(rel, "- sourceLabels:\n  - __meta_kubernetes_pod_node_name") {
			t.Errorf("agent relabelings lost the node label first: %s", rel)
		}
	}
	if _, err := render(t, monitoringOn(map[string]any{"serviceMonitor": map[string]any{"scrapeTimeout": "soon"}})); err == nil {
		t.Error("scrapeTimeout soon rendered; want the schema to refuse it")
	}
}
