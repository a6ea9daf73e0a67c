// Package gangs_test checks whole-gang provisioning end to end: berth's controller (its own
// process, as in production) with the pod-gate webhook, on the full rig with kube-scheduler,
// kube-controller-manager, kwok and Karpenter's kwok provider with GPU instance types.
package gangs_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/berth-dev/berth/controllers/admission"
	bwebhook "github.com/berth-dev/berth/internal/webhook"
	"github.com/berth-dev/berth/test/rig"
	"github.com/berth-dev/berth/test/rig/rigtest"
)

// instanceTypes is the rig's GPU instance-types file, relative to this package.
const instanceTypes = "../../testdata/gpu-instance-types.json"

var (
	berthBin    string
	webhookPort int

	ctrlMu      sync.Mutex
	ctrlRunning string // name of the berth controller process that runs now
	ctrlStarts  int
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		berthBin = filepath.Join(r.WorkDir(), "berth")
		if out, err := exec.Command("go", "build", "-o", berthBin, "github.com/berth-dev/berth/cmd/berth").CombinedOutput(); err != nil {
			return fmt.Errorf("building berth: %v\n%s", err, out)
		}
		if err := rigtest.StartCluster(ctx, r, rig.KwokOptions{NodeReadyDelay: 2 * time.Second}); err != nil {
			return err
		}
		if err := r.StartKarpenter(ctx, rig.KarpenterOptions{InstanceTypesFile: instanceTypes}); err != nil {
			return err
		}
		if err := r.InstallDevNodePools(ctx); err != nil {
			return err
		}
		var err error
		if webhookPort, err = rig.FreePort(); err != nil {
			return err
		}
		url := fmt.Sprintf("https://127.0.0.1:%d%s", webhookPort, bwebhook.Path)
		if err := r.Client.Create(ctx, bwebhook.Configuration(admissionregistrationv1.WebhookClientConfig{URL: &url}, nil)); err != nil {
			return fmt.Errorf("creating webhook configuration: %w", err)
		}
		return startController(ctx, r, "")
	})
}

// startController runs `berth controller` as its own process (optionally with a fault point)
// and waits until it is ready.
func startController(ctx context.Context, r *rig.Rig, fault string) error {
	ctrlMu.Lock()
	defer ctrlMu.Unlock()
	ctrlStarts++
	name := fmt.Sprintf("berth-controller-%d", ctrlStarts)
	health, err := rig.FreePort()
	if err != nil {
		return err
	}
	var env []string
	if fault != "" {
		env = append(env, admission.FaultEnv+"="+fault)
	}
	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", health)
	err = r.StartComponent(ctx, name, berthBin, []string{
		"controller", "--kubeconfig=" + r.Kubeconfig, "--leader-elect=false", "--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(health),
		"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(webhookPort), "--webhook-hosts=127.0.0.1",
		"--webhook-cert-dir=" + filepath.Join(r.WorkDir(), name+"-certs"), "--webhook-secret-namespace=kube-system",
	}, env, ready)
	if err != nil {
		return err
	}
	ctrlRunning = name
	return nil
}

// stopController stops the running controller process.
func stopController(r *rig.Rig) error {
	ctrlMu.Lock()
	defer ctrlMu.Unlock()
	if ctrlRunning == "" {
		return nil
	}
	err := r.StopComponent(ctrlRunning, 5*time.Second)
	ctrlRunning = ""
	return err
}
