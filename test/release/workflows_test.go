// Package release_test checks the GitHub workflows that test and publish berth: pull requests run
// the same command as .ci/run, a release publishes nothing CI has not passed on its commit, and
// what it publishes is signed.
package release_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

type workflow struct {
	// On is the workflow's "on:" — which YAML 1.1 (sigs.k8s.io/yaml) reads as the key true.
	On   map[string]any `json:"true"`
	Jobs map[string]struct {
		Needs any    `json:"needs"`
		Uses  string `json:"uses"`
		Steps []struct {
			Uses string `json:"uses"`
			Run  string `json:"run"`
		} `json:"steps"`
	} `json:"jobs"`
}

func read(t *testing.T, path string) workflow {
	t.Helper()
	data, err := os.ReadFile("../../" + path)
	if err != nil {
		t.Fatal(err)
	}
	var w workflow
	if err := yaml.Unmarshal(data, &w); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return w
}

// needs lists a job's needs (a string or a list).
func needs(v any) []string {
	switch n := v.(type) {
	case string:
		return []string{n}
	case []any:
		var out []string
		for _, x := range n {
			out = append(out, x.(string))
		}
		return out
	}
	return nil
}

func runs(w workflow, job, cmd string) bool {
	for _, s := range w.Jobs[job].Steps {
		if strings.Contains(s.Run, cmd) {
			return true
		}
	}
	return false
}

// TestCIRunsOnPullRequests: every pull request and push to main runs .ci/run (exactly make test)
// and govulncheck, and the workflow can be called by the release.
func TestCIRunsOnPullRequests(t *testing.T) {
	ci := read(t, ".github/workflows/ci.yaml")
	for _, ev := range []string{"pull_request", "push", "workflow_call"} {
		if _, ok := ci.On[ev]; !ok {
			t.Errorf("ci.yaml does not run on %s", ev)
		}
	}
	if !runs(ci, "test", ".ci/run") || !runs(ci, "govulncheck", "govulncheck") {
		t.Errorf("ci.yaml jobs %v: want test running .ci/run and a govulncheck job", ci.Jobs)
	}
	script, err := os.ReadFile("../../.ci/run")
	if err != nil || !strings.Contains(string(script), "make test") {
		t.Errorf(".ci/run does not run make test (%v)", err)
	}
}

// TestReleaseWaitsForCIAndSigns: the release runs CI on its commit before any image is built,
// and signs the images and the chart it pushes.
func TestReleaseWaitsForCIAndSigns(t *testing.T) {
	rel := read(t, ".github/workflows/release.yaml")
	if rel.Jobs["test"].Uses != "./.github/workflows/ci.yaml" {
		t.Errorf("release job test uses %q, want ./.github/workflows/ci.yaml", rel.Jobs["test"].Uses)
	}
	for job := range rel.Jobs {
		if job == "test" {
			continue
		}
		// Every publishing job waits for the tests, directly or through another job.
		seen, queue := map[string]bool{}, []string{job}
		for len(queue) > 0 {
			j := queue[0]
			queue = queue[1:]
			for _, n := range needs(rel.Jobs[j].Needs) {
				if !seen[n] {
					seen[n] = true
					queue = append(queue, n)
				}
			}
		}
		if !seen["test"] {
			t.Errorf("release job %s does not wait for the tests", job)
		}
	}
	for _, job := range []string{"images", "chart"} {
		signed := runs(rel, job, "cosign sign --yes") && slices.ContainsFunc(rel.Jobs[job].Steps, func(s struct {
			Uses string `json:"uses"`
			Run  string `json:"run"`
		}) bool {
			return strings.HasPrefix(s.Uses, "sigstore/cosign-installer@")
		})
		if !signed {
			t.Errorf("release job %s does not sign what it pushes", job)
		}
	}
	// The chart is packaged by the script `make release-dry-run` checks (TestReleaseDryRun),
	// and what it packaged is what is pushed.
	if !runs(rel, "chart", "hack/release-chart.sh") || !runs(rel, "chart", `helm push "$tgz"`) {
		t.Error("release job chart does not package the chart with hack/release-chart.sh and push what it packaged")
	}
}

// pinned is an action pinned to a full commit, with the release it is as a comment (what
// Dependabot updates in place): owner/repo[/path]@<40 hex> # vX.Y.Z.
var pinned = regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40} # v[0-9]+\.[0-9]+\.[0-9]+$`)

// TestActionsPinnedByCommit: every third-party action a workflow runs is pinned to a commit (a
// tag can be moved to other code; a commit cannot), with its release named beside it; the
// workflows' own reusable workflow is the only local reference.
func TestActionsPinnedByCommit(t *testing.T) {
	for _, path := range []string{".github/workflows/ci.yaml", ".github/workflows/release.yaml"} {
		data, err := os.ReadFile("../../" + path)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for line := range strings.Lines(string(data)) {
			_, ref, ok := strings.Cut(line, "uses: ")
			if !ok {
				continue
			}
			ref = strings.TrimSpace(ref)
			if strings.HasPrefix(ref, "./.github/workflows/") {
				continue
			}
			n++
			if !pinned.MatchString(ref) {
				t.Errorf("%s: %q is not pinned to a commit with its release as a comment", path, ref)
			}
		}
		if n == 0 {
			t.Errorf("%s: no action found; the test reads nothing", path)
		}
	}
}
