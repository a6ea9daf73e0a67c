package chart_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	chart "github.com/berth-dev/berth/test/chart"
)

// metricRef finds metric names in PromQL (a rough lexer, enough for berth's rules): a name that
// is followed by "{", or a berth metric anywhere.
var metricRef = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}|\b(berth_[a-z0-9_]+|leader_election_master_status)\b`)

// TestSeriesSelector: with monitoring.prometheusRule.seriesSelector every series every alert
// reads carries the selector (braced selectors first among their matchers, bare berth metrics
// braced), and nothing changes without it. The schema refuses a selector that is not PromQL
// matchers.
func TestSeriesSelector(t *testing.T) {
	base, err := render(t, monitoringOn(nil))
	if err != nil {
		t.Fatal(err)
	}
	got, err := render(t, monitoringOn(map[string]any{"prometheusRule": map[string]any{"seriesSelector": `cluster="prod-use1"`}}))
	if err != nil {
		t.Fatal(err)
	}
	plain, scoped := alerts(t, base["PrometheusRule/berth"]), alerts(t, got["PrometheusRule/berth"])
	if len(scoped) != len(plain) || len(plain) == 0 {
		t.Fatalf("%d alerts with the selector, %d without", len(scoped), len(plain))
	}
	for name, a := range scoped {
		expr := a["expr"].(string)
		refs := 0
		for _, m := range metricRef.FindAllStringSubmatch(expr, -1) {
			switch {
			case m[1] != "":
				refs++
				if !strings.HasPrefix(m[2], `cluster="prod-use1",`) && m[2] != `cluster="prod-use1"` {
					t.Errorf("%s: %s{%s} lacks the selector", name, m[1], m[2])
				}
			case m[3] != "":
				// A bare berth metric left (not followed by braces) is unscoped.
				t.Errorf("%s: %s read without the selector in %q", name, m[3], expr)
			}
		}
		if refs == 0 {
			t.Errorf("%s: no series in %q", name, expr)
		}
		if plainExpr := plain[name]["expr"].(string); strings.Contains(plainExpr, "prod-use1") {
			t.Errorf("%s: the selector is in the expression without the value: %q", name, plainExpr)
		}
	}
	for _, bad := range []string{`cluster=prod-use1`, `cluster="a"}`, `cluster="a") or vector(1`} {
		if _, err := render(t, monitoringOn(map[string]any{"prometheusRule": map[string]any{"seriesSelector": bad}})); err == nil {
			t.Errorf("seriesSelector %q rendered; want the schema to refuse it", bad)
		}
	}
}

// TestSeriesSelectorFiresPerCluster: promtool evaluates the rendered rules over two clusters'
// series in one store (Thanos, Amazon Managed Service for Prometheus): cluster a runs its
// controller and scaler, cluster b lost both. The rules rendered for b fire BerthControllerDown
// and BerthScalerDown for b; those rendered for a fire nothing — where without the selector
// (absent() over every cluster) b's outage never fires.
func TestSeriesSelectorFiresPerCluster(t *testing.T) {
	promtool, err := exec.Command(filepath.Join(chart.Dir(), "..", "..", "hack", "ensure-promtool.sh")).Output()
	if err != nil {
		if os.Getenv("BERTH_REQUIRE_RIG") != "" {
			t.Fatalf("promtool: %v", err)
		}
		t.Skipf("no promtool (hack/ensure-promtool.sh): %v", err)
	}
	dir := t.TempDir()
	rules := func(selector string) string {
		t.Helper()
		got, err := render(t, monitoringOn(map[string]any{"prometheusRule": map[string]any{"seriesSelector": selector}}))
		if err != nil {
			t.Fatal(err)
		}
		data, err := yaml.Marshal(dig(got["PrometheusRule/berth"], "spec"))
		if err != nil {
			t.Fatal(err)
		}
		name := "rules-" + strings.NewReplacer(`"`, "", "=", "-").Replace(selector) + ".yaml"
		if selector == "" {
			name = "rules-unscoped.yaml"
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		return name
	}
	a, b, none := rules(`cluster="a"`), rules(`cluster="b"`), rules("")
	series := `
  - series: 'berth_build_info{cluster="a",component="controller",version="v0.1.0",commit="abc"}'
    values: '1x10'
  - series: 'berth_build_info{cluster="a",component="scaler",version="v0.1.0",commit="abc"}'
    values: '1x10'
  - series: 'leader_election_master_status{cluster="a",name="berth-controller.scheduling.berth.dev",pod="x"}'
    values: '1x10'`
	test := func(file string, want string) string {
		return `
- name: ` + file + `
  interval: 1m
  input_series:` + series + `
  alert_rule_test:
  - eval_time: 8m
    alertname: BerthControllerDown
    exp_alerts:` + want + `
`
	}
	down := `
    - exp_labels: {severity: critical, component: controller, cluster: b}
      exp_annotations:
        summary: No berth controller is running (or none is scraped).
        description: No berth controller serves berth_build_info. Gangs are not admitted, gang members cannot be created (the webhook's failurePolicy is Fail for them), seats are not cleaned up, NodePools are not guarded.
        runbook_url: https://github.com/berth-dev/berth/blob/v0.1.0/docs/runbooks/BerthControllerDown.md`
	for _, tc := range []struct{ rules, want string }{{a, " []"}, {b, down}, {none, " []"}} {
		file := filepath.Join(dir, "test-"+tc.rules)
		doc := "rule_files: [" + tc.rules + "]\nevaluation_interval: 1m\ntests:" + test(tc.rules, tc.want)
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(strings.TrimSpace(string(promtool)), "test", "rules", filepath.Base(file))
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool test rules (%s): %v\n%s", tc.rules, err, out)
		}
	}
}
