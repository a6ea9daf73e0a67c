// Package devcluster_test runs what `make demo` runs — berth dev up, demo, status, down — with
// the real berth binary, and checks that down leaves no process and no state behind.
package devcluster_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/internal/devcluster"
	"github.com/berth-dev/berth/internal/rig"
)

// devSetup is what a dev-cluster test needs: the tools folder (skipping without one unless
// BERTH_REQUIRE_RIG=1), a temporary folder, the dev cluster's state folder in it, and run, which
// runs `berth dev <args>` (built into the folder) on that state; the cluster is taken down when
// the test ends, with its serve.log shown if the test failed.
func devSetup(t *testing.T) (tools, dir, state string, run func(args ...string) (string, error)) {
	t.Helper()
	tools = os.Getenv(rig.ToolsDirEnv)
	if tools == "" {
		if os.Getenv("BERTH_REQUIRE_RIG") == "1" {
			t.Fatalf("%s not set", rig.ToolsDirEnv)
		}
		t.Skipf("needs %s (make test sets it)", rig.ToolsDirEnv)
	}
	dir = t.TempDir()
	berth := filepath.Join(dir, "berth")
	build := exec.Command("go", "build", "-o", berth, "github.com/berth-dev/berth/cmd/berth")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building berth: %v\n%s", err, out)
	}
	state = filepath.Join(dir, "state")
	run = func(args ...string) (string, error) {
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
	return tools, dir, state, run
}

func TestDevUpDemoDown(t *testing.T) {
	tools, dir, state, run := devSetup(t)
	kubeconfig := filepath.Join(dir, "kube", "config")

	start := time.Now()
	out, err := run("up", "--tools-dir", tools, "--kubeconfig", kubeconfig, "--kueue")
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
	wantComponents := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "karpenter-kwok", "keda-operator", "keda-adapter", "lws-controller", "kueue-controller", "berth-controller", "berth-scaler", "vllm-sim"}
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
	start = time.Now()
	out, err = run("demo")
	if err != nil {
		t.Fatalf("berth dev demo: %v\n%s", err, out)
	}
	t.Logf("demo in %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	for _, want := range demoMilestones {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if n, err := batchClaims(out); err != nil || n < 2 {
		t.Errorf("scene 3: Karpenter's NodeClaims for the 2 seats: %d, %v; want at least one per seat", n, err)
	}
	// Pods get IPs from the cluster's own loopback range.
	if prefix := strings.TrimSuffix(st.PodCIDR, "0.0/16"); st.PodCIDR == "" || !strings.Contains(out, "is Running with IP "+prefix) {
		t.Errorf("no pod IP from the cluster's range %q in the demo output", st.PodCIDR)
	}
	// One scene on its own, on a reset namespace: the gang scene sets up its own busy node.
	start = time.Now()
	out, err = run("demo", "--scene", "gang")
	if err != nil {
		t.Fatalf("berth dev demo --scene gang: %v\n%s", err, out)
	}
	t.Logf("demo --scene gang in %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	for _, want := range []string{"scene 2: a 4-member gang", "all 4 members of ddp run together"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo --scene gang output lacks %q", want)
		}
	}
	if strings.Contains(out, "scene 1:") || strings.Contains(out, "scene 3:") {
		t.Errorf("demo --scene gang played other scenes:\n%s", out)
	}
	// What docs/kueue.md has users try on the dev cluster: the sample queues and job.
	trySampleKueueJob(t, kubeconfig)
	if out, err := run("demo", "--list"); err != nil || !strings.Contains(out, "autoscale") || strings.Count(out, "\n") != len(devcluster.Scenes()) {
		t.Errorf("demo --list: err=%v\n%s", err, out)
	}
	if out, err := run("status"); err != nil || !strings.Contains(out, "dev cluster: up") || !strings.Contains(out, "scaler-grpc:") {
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

// batchClaims reads how many NodeClaims scene 3 saw Karpenter create for the gang's 2 seats.
// It may be more than 2: under load Karpenter sometimes launches a second NodeClaim for a seat it
// has already nominated (docs/gang-provisioning.md), which the scene reports as holding no member
// and leaves, empty, to Karpenter's consolidation.
func batchClaims(out string) (int, error) {
	m := regexp.MustCompile(`Karpenter created (\d+) NodeClaims for the 2 seats`).FindStringSubmatch(out)
	if m == nil {
		return 0, errors.New("no line says how many NodeClaims Karpenter created for the seats")
	}
	return strconv.Atoi(m[1])
}

// demoMilestones are lines (or parts) the demo prints in every run, scene by scene. What
// depends on timing (Karpenter's Events, whether it consolidates the audited pool's node
// within the watch) is not checked.
var demoMilestones = []string{
	// 1: a pending GPU pod gets a node from Karpenter.
	"Karpenter created NodeClaim", "p5.48xlarge", "is Ready", "kube-scheduler bound pod llm-train-0", "is Running with IP ",
	// 2: a gang waits at its gate, capped out of new capacity, and starts whole.
	"capped NodePool gpu-h100 at 8 nvidia.com/gpu", "PodGroup ddp is held — WaitingForCapacity", "member ddp-3: gated",
	"all 4 members of ddp run together", "lifted the cap on NodePool gpu-h100",
	// 3: whole-gang provisioning through seats.
	"PodGroup llm-h200: phase Provisioning", "berth created 2 seat pods", "PriorityClass berth-seat",
	"NodeClaims for the 2 seats" /* how many: batchClaims */, "p5e.48xlarge", "PodGroup llm-h200: phase Running", // Admitted lasts until the members run: a poll may miss it
	"condition CapacityProvisioned=True (Provisioned)", "the seats are deleted", "all 2 members were bound within",
	"status.provisioning: attempt 1, 2 seats", "status.nodeClaims:",
	// 4: the consolidation guard.
	"berth guarded NodePool gpu-guarded: budgets now [nodes 100%] [nodes 0 for Underutilized]",
	"scheduling.berth.dev/consolidation-guard-status: enforced:", "Event Normal ConsolidationGuarded",
	"scheduling.berth.dev/consolidation-guard-status: unsafe:", "Event Warning UnsafeConsolidation",
	"berth set karpenter.sh/do-not-disrupt=true", "Karpenter left gpu-guarded's underutilized GPU node alone",
	"removed the workloads and NodePools gpu-guarded and gpu-audit",
	// 5: inference autoscaling through real KEDA and berth's scaler.
	"created ScaledObject llama-serve: external-push trigger → berth scaler at 127.0.0.1:",
	"load: 12 requests/s", "Karpenter launched L4 node", "replicas 4 ready / 4", "load stops",
	"the Deployment followed its load",
	// 6: DRA, which this dev cluster runs without.
	"skipped: this dev cluster runs without DRA",
	// 7: a LeaderWorkerSet of 2-node groups, each a gang, scaled in whole groups.
	"created LeaderWorkerSet berth-demo/llama-405b", "berth adopted the group as PodGroup llama-405b-0 (minMember 2",
	"created ScaledObject llama-405b on the LeaderWorkerSet", "Karpenter launched A100 node", "groups 3 ready / 3",
	"the LeaderWorkerSet followed its load in whole groups",
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

// trySampleKueueJob applies config/samples/kueue (queues, then the job) to the dev cluster as
// docs/kueue.md tells users to, and waits until Kueue admits the job (its ProvisioningRequest
// served by berth) and the job's pods have run.
func trySampleKueueJob(t *testing.T, kubeconfig string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"queues.yaml", "job.yaml"} {
		data, err := os.ReadFile(filepath.Join("../../../config/samples/kueue", f))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := rig.DecodeManifests(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, o := range objs {
			if err := c.Patch(ctx, o, client.Apply, client.FieldOwner("devcluster-test")); err != nil { //nolint:staticcheck // unstructured server-side apply
				t.Fatalf("applying %s %s from %s: %v", o.GetKind(), o.GetName(), f, err)
			}
		}
	}
	start := time.Now()
	for {
		job := &unstructured.Unstructured{}
		job.SetAPIVersion("batch/v1")
		job.SetKind("Job")
		err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "train-l40s"}, job)
		succeeded, _, _ := unstructured.NestedInt64(job.Object, "status", "succeeded")
		if err == nil && succeeded == 4 {
			t.Logf("the sample Kueue job's 4 pods ran %s after it was applied", time.Since(start).Round(time.Millisecond))
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the sample Kueue job did not run in 3 minutes: err=%v status=%v", err, job.Object["status"])
		case <-time.After(500 * time.Millisecond):
		}
	}
}
