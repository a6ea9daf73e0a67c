package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimulateCommandWritesAReport(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.csv")
	if err := os.WriteFile(trace, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n0,500,40\n0.5,800,60\n2,1200,30\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	jobs := filepath.Join(dir, "jobs.csv")
	if err := os.WriteFile(jobs, []byte("arrival_seconds,members,gpus_per_member,duration_seconds\n0,2,8,600\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newSimulateCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--trace", trace, "--jobs", jobs, "--no-consolidation", "--out", filepath.Join(dir, "report")})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report", "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "trace.csv (3 requests)") || !strings.Contains(string(md), "jobs.csv (1 jobs)") {
		t.Errorf("report.md does not name its traces:\n%s", md)
	}
	if !strings.Contains(out.String(), "idle GPU-hours from partial gangs") {
		t.Errorf("the command does not print the goals:\n%s", out.String())
	}
}

func TestSimulateCommandRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fleet", "a10"}, `--fleet "a10"`},
		{[]string{"--trace", "/nonexistent.csv"}, "--trace"},
		{[]string{"--no-inference", "--no-training"}, "nothing to simulate"},
		{[]string{"--node-gpus", "3", "--no-training"}, "no size with 3 GPUs"},
		{[]string{"--rate", "-1", "--no-training"}, "mean rate"},
		{[]string{"--routing", "random", "--no-training"}, `--routing "random": want round-robin or least-outstanding`},
		{[]string{"--drain-timeout", "-1s", "--no-training"}, "--drain-timeout -1s: must not be negative"},
		{[]string{"--image-pull", "-1s", "--no-training"}, "--image-pull -1s"},
		{[]string{"--model-load", "-1s", "--no-training"}, "--model-load -1s"},
		{[]string{"--lengths", "uniform", "--no-training"}, `--lengths "uniform": want trace or lognormal`},
		{[]string{"--lengths", "lognormal", "--lengths-from", "x.csv", "--no-training"}, "--lengths-from needs --lengths trace"},
		{[]string{"--lengths-from", "/nonexistent.csv", "--no-training"}, "--lengths-from"},
		{[]string{"--burst-blind", "--trace", "/dev/null", "--no-training"}, "--burst-blind plans on the same day without its bursts"},
		{[]string{"--burst-blind", "--burst-every", "0", "--duration", "10m", "--no-training"}, "--burst-blind needs a day with bursts"},
		{[]string{"--burst-blind", "--oracle=false", "--duration", "10m", "--no-training"}, "--burst-blind needs --oracle"},
		{[]string{"--scaler-forgets", "--duration", "10m", "--no-training"}, "--scaler-forgets needs --scaler-restarts"},
		{[]string{"--scaler-restarts", "-1h", "--duration", "10m", "--no-training"}, "--scaler-restarts -1h0m0s: a restart's time must be positive"},
	} {
		cmd := newSimulateCommand()
		cmd.SetArgs(append(tc.args, "--out", t.TempDir()))
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}

func TestSimulateCommandFleetAndLengthFlags(t *testing.T) {
	dir := t.TempDir()
	lengths := filepath.Join(dir, "lengths.csv")
	if err := os.WriteFile(lengths, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n0,300,20\n1,700,50\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newSimulateCommand()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetArgs([]string{"--no-training", "--no-consolidation", "--duration", "10m", "--rate", "0.3", "--lengths-from", lengths,
		"--routing", "least-outstanding", "--image-pull", "10s", "--model-load", "20s", "--drain-timeout", "2m", "--out", filepath.Join(dir, "report")})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report", "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lengths from lengths.csv", "image pull 10s (once per node) and model load 20s", "least-outstanding routing", "drain 2m0s", "| unattainable |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
}
