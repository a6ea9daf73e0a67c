// Package alerts_test checks berth's Prometheus rules (config/prometheus/rules.yaml) beyond what
// promtool does: every alert is documented for on-call (summary, description, a runbook that
// exists) and every berth metric a rule reads is one berth exports.
package alerts_test

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers"
	"github.com/berth-dev/berth/controllers/podgroup/admission"
	"github.com/berth-dev/berth/controllers/podgroup/disruption"
	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/pods"
	"github.com/berth-dev/berth/scaler/promsource"
	"github.com/berth-dev/berth/test/testenv"
)

const (
	repoRoot   = "../.."
	rulesFile  = repoRoot + "/config/prometheus/rules.yaml"
	runbookURL = "https://github.com/berth-dev/berth/blob/main/docs/runbooks/"
)

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(data, &rf); err != nil {
		t.Fatalf("parsing %s: %v", rulesFile, err)
	}
	return rf
}

func TestEveryAlertHasARunbook(t *testing.T) {
	rf := loadRules(t)
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[k]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, k)
				}
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			if want := runbookURL + r.Alert + ".md"; r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			data, err := os.ReadFile(filepath.Join(repoRoot, "docs", "runbooks", r.Alert+".md"))
			if err != nil {
				t.Errorf("%s: runbook missing: %v", r.Alert, err)
				continue
			}
			for _, section := range []string{"## What it means", "## How to confirm", "## What to do"} {
				if !strings.Contains(string(data), section) {
					t.Errorf("%s: runbook lacks %q", r.Alert, section)
				}
			}
		}
	}
	// Counted on the raw text too, so a YAML shape the struct above misreads cannot pass.
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(regexp.MustCompile(`(?m)^\s*- alert: `).FindAll(raw, -1)); n != want || n == 0 {
		t.Errorf("checked %d alerts, the file defines %d", n, want)
	}
}

// exported collects the berth metric names declared in the code (not tests).
func exported(t *testing.T) map[string]bool {
	t.Helper()
	opts := regexp.MustCompile(`Subsystem:\s*"([a-z_]+)",\s*Name:\s*"([a-z_]+)"`)
	fq := regexp.MustCompile(`BuildFQName\(bmetrics\.Namespace,\s*"([a-z_]+)",\s*"([a-z_]+)"\)`)
	out := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "hack" || d.Name() == "test" || strings.HasPrefix(d.Name(), ".")) && path != repoRoot {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, re := range []*regexp.Regexp{opts, fq} {
			for _, m := range re.FindAllStringSubmatch(string(data), -1) {
				out["berth_"+m[1]+"_"+m[2]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRulesReadExistingMetrics(t *testing.T) {
	known := exported(t)
	if len(known) < 10 {
		t.Fatalf("found only %d berth metrics in the code: %v", len(known), known)
	}
	metric := regexp.MustCompile(`\b(berth_[a-z_]+|controller_runtime_[a-z_]+|leader_election_[a-z_]+)`)
	upstream := map[string]bool{"controller_runtime_reconcile_errors_total": true, "leader_election_master_status": true}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			for _, m := range metric.FindAllString(r.Expr, -1) {
				if base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count"); known[base] {
					continue
				}
				if !known[m] && !upstream[m] {
					t.Errorf("%s reads %s, which no berth component exports", r.Alert, m)
				}
			}
		}
	}
}

// TestDashboardQueriesReadExistingMetrics: every query of the Grafana dashboard reads metrics
// berth exports, and every berth metric that matters on a dashboard appears in one.
func TestDashboardQueriesReadExistingMetrics(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "config", "grafana", "berth-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := yaml.Unmarshal(data, &dash); err != nil {
		t.Fatalf("parsing dashboard: %v", err)
	}
	known := exported(t)
	used := map[string]bool{}
	metric := regexp.MustCompile(`\bberth_[a-z_]+`)
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metric.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
				if !known[base] {
					t.Errorf("panel %q reads %s, which no berth component exports", p.Title, m)
				}
				used[base] = true
			}
		}
	}
	for m := range known {
		if !used[m] {
			t.Errorf("metric %s is on no dashboard panel", m)
		}
	}
}

// TestDashboardQueriesParse hands every dashboard query to promtool as a recording rule, so a
// query Prometheus cannot parse fails here ($PROMTOOL, else promtool on PATH; make test-rules
// installs it, and under make test a missing promtool fails the test).
func TestDashboardQueriesParse(t *testing.T) {
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		p, err := exec.LookPath("promtool")
		if err != nil {
			testenv.SkipOrFail(t, "promtool not installed (hack/ensure-promtool.sh installs it)")
		}
		promtool = p
	}
	data, err := os.ReadFile(filepath.Join(repoRoot, "config", "grafana", "berth-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := yaml.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for i, p := range dash.Panels {
		for j, tg := range p.Targets {
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:panel_%d_%d", i, j), Expr: tg.Expr})
		}
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(f, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
		t.Fatalf("promtool rejects dashboard queries: %v\n%s", err, msg)
	}
}

// closedLabels are the label values berth's code can emit, for every label of a closed set that
// the rule tests feed: a rule test that uses another value tests an alert that never fires.
func closedLabels() map[string]map[string][]string {
	phases := []string{}
	for _, p := range []berthv1alpha1.PodGroupPhase{berthv1alpha1.PodGroupPending, berthv1alpha1.PodGroupProvisioning} {
		phases = append(phases, string(p)) // the waiting phases oldest_waiting_seconds reports
	}
	sources := []string{string(scaler.SourcePods), string(scaler.SourcePrometheus)}
	return map[string]map[string][]string{
		"berth_podgroup_disruptions_total":           {"reason": disruption.Causes},
		"berth_podgroup_provisioning_attempts_total": {"result": admission.ProvisioningResults},
		"berth_podgroup_placement_attempts_total":    {"result": admission.PlacementResults},
		"berth_podgroup_oldest_waiting_seconds":      {"phase": phases},
		"berth_podgroup_waiting_seconds":             {"phase": phases},
		"berth_scaler_scrape_errors_total":           {"source": sources, "reason": append(slices.Clone(pods.Reasons), promsource.ReasonQuery)},
		"berth_scaler_scrape_duration_seconds_count": {"source": sources},
		"leader_election_master_status":              {"name": {controllers.LeaderElectionID}},
		// Foreign controllers the rule must ignore: someone-else, and scheduler-plugins' "podgroup"
		// (which a looser pattern once matched).
		"controller_runtime_reconcile_errors_total": {"controller": append(controllers.Names(), "someone-else", "podgroup")},
	}
}

func TestRuleTestsUseLabelValuesTheCodeEmits(t *testing.T) {
	data, err := os.ReadFile(repoRoot + "/config/prometheus/rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			Name        string `json:"name"`
			InputSeries []struct {
				Series string `json:"series"`
			} `json:"input_series"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatal(err)
	}
	series := regexp.MustCompile(`^([a-z_:]+)(?:\{(.*)\})?$`)
	label := regexp.MustCompile(`([a-z_]+)="([^"]*)"`)
	closed := closedLabels()
	checked := 0
	for _, tc := range tests.Tests {
		for _, in := range tc.InputSeries {
			m := series.FindStringSubmatch(in.Series)
			if m == nil {
				t.Errorf("%s: cannot parse series %q", tc.Name, in.Series)
				continue
			}
			for _, l := range label.FindAllStringSubmatch(m[2], -1) {
				allowed, ok := closed[m[1]][l[1]]
				if !ok {
					continue
				}
				checked++
				if !slices.Contains(allowed, l[2]) {
					t.Errorf("%s: %s{%s=%q}: berth never emits that value (it emits %v)", tc.Name, m[1], l[1], l[2], allowed)
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no rule test feeds a closed-set label; is rules_test.yaml read?")
	}
}
