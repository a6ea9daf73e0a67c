// Package devcluster_test runs what `make demo` runs — berth dev up, demo, status, down — with
// the real berth binary, and checks that down leaves no process and no state behind.
package devcluster_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/devcluster"
	"github.com/berth-dev/berth/test/rig"
)

func TestDevUpDemoDown(t *testing.T) {
	tools := os.Getenv(rig.ToolsDirEnv)
	if tools == "" {
		if os.Getenv("BERTH_REQUIRE_RIG") == "1" {
			t.Fatalf("%s not set", rig.ToolsDirEnv)
		}
		t.Skipf("needs %s (make test sets it)", rig.ToolsDirEnv)
	}
	dir := t.TempDir()
	berth := filepath.Join(dir, "berth")
	build := exec.Command("go", "build", "-o", berth, "github.com/berth-dev/berth/cmd/berth")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building berth: %v\n%s", err, out)
	}
	state := filepath.Join(dir, "state")
	kubeconfig := filepath.Join(dir, "kube", "config")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(berth, append([]string{"dev", "--state-dir", state}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	t.Cleanup(func() {
		if t.Failed() {
			if data, err := os.ReadFile(filepath.Join(state, "serve.log")); err == nil {
				t.Logf("serve.log:\n%s", data)
			}
		}
		_, _ = run("down")
	})

	start := time.Now()
	out, err := run("up", "--tools-dir", tools, "--kubeconfig", kubeconfig)
	if err != nil {
		t.Fatalf("berth dev up: %v\n%s", err, out)
	}
	t.Logf("dev up in %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	if _, err := os.Stat(kubeconfig); err != nil {
		t.Errorf("kubeconfig not written to --kubeconfig: %v", err)
	}
	st, ok, err := devcluster.ReadState(state)
	if err != nil || !ok || !st.Ready {
		t.Fatalf("state after up: %+v ok=%v err=%v", st, ok, err)
	}
	wantComponents := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "karpenter-kwok", "berth-controller"}
	var names []string
	for _, c := range st.Components {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != strings.Join(wantComponents, ",") {
		t.Errorf("components = %v, want %v", names, wantComponents)
	}

	if out, err := run("up", "--tools-dir", tools); err != nil || !strings.Contains(out, "already up") {
		t.Errorf("second up: err=%v out=%s; want 'already up'", err, out)
	}
	out, err = run("demo")
	if err != nil {
		t.Fatalf("berth dev demo: %v\n%s", err, out)
	}
	for _, want := range []string{"Karpenter created NodeClaim", "p5.48xlarge", "is Ready", "kube-scheduler bound pod llm-train-0", "is Running with IP 127.1.",
		"PodGroup ddp is held — Unschedulable", "member ddp-3: gated", "all 4 members of ddp run together"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if out, err := run("status"); err != nil || !strings.Contains(out, "dev cluster: up") {
		t.Errorf("status: err=%v\n%s", err, out)
	}

	if out, err := run("down"); err != nil {
		t.Fatalf("berth dev down: %v\n%s", err, out)
	}
	for _, c := range st.Components {
		if running(c.PID) {
			t.Errorf("%s (pid %d) still running after down", c.Name, c.PID)
		}
	}
	if running(st.PID) {
		t.Errorf("background process %d still running after down", st.PID)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state folder %s still exists after down (err %v)", state, err)
	}
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("kubeconfig %s still exists after down", kubeconfig)
	}
	if _, err := run("status"); err == nil {
		t.Error("status exits 0 with no cluster up")
	}
}

// running is true for a live, non-zombie process.
func running(pid int) bool {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
