// Package gangbench measures whole-gang provisioning against plain Karpenter + kube-scheduler
// on the rig, with kwok's node-ready delay set to what a GPU node takes (about 70 s): how long
// capacity takes, and how much GPU time members spend bound or running while their gang is
// incomplete. It has benchmarks only (`make bench`); the results are in docs/benchmarks.md.
package gangbench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	bwebhook "github.com/berth-dev/berth/internal/webhook"
	"github.com/berth-dev/berth/test/rig"
	"github.com/berth-dev/berth/test/rig/rigtest"
)

// DelayEnv overrides the node-ready delay (a Go duration; default 70s).
const DelayEnv = "BERTH_BENCH_NODE_READY_DELAY"

// instanceTypes is the rig's GPU instance-types file, relative to this package.
const instanceTypes = "../../testdata/gpu-instance-types.json"

// nodeReadyDelay is the kwok node-ready delay of this run.
var nodeReadyDelay = 70 * time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run()) // no benchmark asked for (plain `go test ./...`): no rig needed
	}
	if v := os.Getenv(DelayEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%q: %v\n", DelayEnv, v, err)
			os.Exit(2)
		}
		nodeReadyDelay = d
	}
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		bin := filepath.Join(r.WorkDir(), "berth")
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/berth-dev/berth/cmd/berth").CombinedOutput(); err != nil {
			return fmt.Errorf("building berth: %v\n%s", err, out)
		}
		if err := rigtest.StartCluster(ctx, r, rig.KwokOptions{NodeReadyDelay: nodeReadyDelay}); err != nil {
			return err
		}
		if err := r.StartKarpenter(ctx, rig.KarpenterOptions{InstanceTypesFile: instanceTypes}); err != nil {
			return err
		}
		if err := r.InstallDevNodePools(ctx); err != nil {
			return err
		}
		port, err := rig.FreePort()
		if err != nil {
			return err
		}
		health, err := rig.FreePort()
		if err != nil {
			return err
		}
		url := fmt.Sprintf("https://127.0.0.1:%d%s", port, bwebhook.Path)
		if err := r.Client.Create(ctx, bwebhook.Configuration(admissionregistrationv1.WebhookClientConfig{URL: &url}, nil)); err != nil {
			return fmt.Errorf("creating webhook configuration: %w", err)
		}
		return r.StartComponent(ctx, "berth-controller", bin, []string{
			"controller", "--kubeconfig=" + r.Kubeconfig, "--leader-elect=false", "--metrics-bind-address=0",
			"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(health),
			"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(port), "--webhook-hosts=127.0.0.1",
			"--webhook-cert-dir=" + filepath.Join(r.WorkDir(), "certs"), "--webhook-secret-namespace=kube-system",
		}, nil, fmt.Sprintf("http://127.0.0.1:%d/readyz", health))
	})
}
