package rig

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/testenv"
)

func TestWithStageDelay(t *testing.T) {
	stage := []byte("apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: node-initialize\nspec:\n  resourceRef:\n    kind: Node\n")
	out, err := withStageDelay(stage, 70*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Spec struct {
			Delay struct {
				DurationMilliseconds int64 `json:"durationMilliseconds"`
			} `json:"delay"`
			ResourceRef map[string]string `json:"resourceRef"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(out, &obj); err != nil {
		t.Fatal(err)
	}
	if obj.Spec.Delay.DurationMilliseconds != 70000 || obj.Spec.ResourceRef["kind"] != "Node" {
		t.Errorf("stage after delay = %s", out)
	}
	if _, err := withStageDelay([]byte("kind: Stage\n"), time.Second); err == nil {
		t.Error("a stage without spec was accepted")
	}
}

// TestWithStartDelay: kwok's pod-ready Stage takes its delay from the pod's start-delay
// annotation and keeps its own delay (none) for pods without it.
func TestWithStartDelay(t *testing.T) {
	stage := []byte("apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: pod-ready\nspec:\n  resourceRef:\n    kind: Pod\n")
	out, err := withStartDelay(stage)
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Spec struct {
			Delay struct {
				DurationMilliseconds *int64 `json:"durationMilliseconds"`
				DurationFrom         struct {
					ExpressionFrom string `json:"expressionFrom"`
				} `json:"durationFrom"`
			} `json:"delay"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(out, &obj); err != nil {
		t.Fatal(err)
	}
	d := obj.Spec.Delay
	if d.DurationMilliseconds == nil || *d.DurationMilliseconds != 0 || d.DurationFrom.ExpressionFrom != `.metadata.annotations["`+berthv1alpha1.DevStartDelayAnnotation+`"]` {
		t.Errorf("pod-ready after the start delay = %s", out)
	}
}

func TestKwokStagesAreSeparateDocuments(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(dir+"/kwok-stages", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"node-initialize", "pod-complete", "pod-ready"} {
		data := fmt.Sprintf("apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: %s\nspec: {}\n", name)
		if err := os.WriteFile(dir+"/kwok-stages/"+name+".yaml", []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &Rig{opts: Options{ToolsDir: dir}}
	out, err := r.kwokStages(KwokOptions{NodeReadyDelay: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := DecodeManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	// The files but kwok's pod-complete, plus the rig's own node-booted, pod-finish and (with a
	// delay) node-register stages.
	var names []string
	for _, o := range objs {
		names = append(names, o.GetName())
	}
	if want := []string{
		"node-initialize", "pod-ready", "node-booted",
		"berth-pod-run-time", "berth-pod-exit-code", "pod-complete", "berth-pod-terminate", "pod-delete", "node-register",
	}; !slices.Equal(names, want) {
		t.Fatalf("decoded stages %v, want %v:\n%s", names, want, out)
	}
	if !strings.Contains(string(out), "durationMilliseconds: 5000") {
		t.Errorf("node-initialize has no delay:\n%s", out)
	}
	if _, err := (&Rig{opts: Options{ToolsDir: t.TempDir()}}).kwokStages(KwokOptions{}); err == nil {
		t.Error("an empty tools folder gave stages")
	}
}

// helperEnv makes the test binary act as a process that holds a rig (see TestHelperHoldRig).
const helperEnv = "BERTH_RIG_HELPER"

// TestHelperHoldRig is not a test: run by TestComponentsStopWithTheirParent as a child process,
// it starts a control plane, prints the component PIDs and waits to be killed.
func TestHelperHoldRig(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process for TestComponentsStopWithTheirParent")
	}
	r, err := Start(context.Background(), Options{HandleSignals: true})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	var pids []string
	for _, c := range r.Components() {
		pids = append(pids, strconv.Itoa(c.PID))
	}
	fmt.Println("PIDS", strings.Join(pids, " "), "WORKDIR", r.WorkDir())
	select {}
}

// TestComponentsStopWithTheirParent: whether the process holding a rig is interrupted (Ctrl-C,
// SIGTERM) or killed outright, no component outlives it.
func TestComponentsStopWithTheirParent(t *testing.T) {
	if os.Getenv(ToolsDirEnv) == "" {
		testenv.SkipOrFail(t, "needs %s (make test sets it)", ToolsDirEnv)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldRig$")
			cmd.Env = append(os.Environ(), helperEnv+"=1")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var pids []int
			var workDir string
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) > 0 && f[0] == "ERROR" {
					t.Fatalf("helper: %s", sc.Text())
				}
				if len(f) > 3 && f[0] == "PIDS" {
					for _, s := range f[1 : len(f)-2] {
						p, _ := strconv.Atoi(s)
						pids = append(pids, p)
					}
					workDir = f[len(f)-1]
					break
				}
			}
			if len(pids) < 2 {
				_ = cmd.Process.Kill()
				t.Fatalf("helper printed no component PIDs")
			}
			t.Cleanup(func() { _ = os.RemoveAll(workDir) })
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			deadline := time.Now().Add(30 * time.Second)
			for _, pid := range pids {
				for processExists(pid) && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
				}
				if processExists(pid) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					t.Errorf("component pid %d still running 30s after its parent got %v", pid, sig)
				}
			}
		})
	}
}

// processExists is true for a live, non-zombie process.
func processExists(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
