// Package alerts_test checks berth's Prometheus rules (config/prometheus/rules.yaml) beyond what
// promtool does: every alert is documented for on-call (summary, description, a runbook that
// exists) and every berth metric a rule reads is one berth exports.
package alerts_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
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
	if n < 10 {
		t.Errorf("only %d alerts", n)
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
				if !known[m] && !upstream[m] {
					t.Errorf("%s reads %s, which no berth component exports", r.Alert, m)
				}
			}
		}
	}
}
