package restart_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/cli"
	"github.com/berth-dev/berth/internal/doctor"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestDoctorChecksTheInstall: `berth doctor --install -n <berth's namespace>` (what helm test
// runs) passes while a leader-elected controller serves the pod-gate webhook — a gang member's
// dry run comes back gated, nothing is created, the leader Lease is held — and, with the
// controller down, names the webhook and, once the Lease is released or expires, the missing
// leader, and exits 1. (The agent check has its own test in test/integration/doctor.)
func TestDoctorChecksTheInstall(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := rig.BerthNamespace
	run := func() (doctor.Report, int) {
		t.Helper()
		root := cli.NewRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		args := []string{"doctor", "--install", "-n", ns, "--skip", doctor.CheckInstallAgent, "-o", "json", "--kubeconfig=" + rigtest.Current().Kubeconfig}
		root.SetArgs(args)
		_ = root.ExecuteContext(ctx)
		var rep doctor.Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return rep, cli.Execute(args)
	}
	wasRunning := berth.Running != ""
	if wasRunning {
		if err := berth.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		// Leave the controller as the test found it (the other tests start their own).
		if wasRunning {
			if err := berth.Start(ctx); err != nil {
				t.Error(err)
			}
		}
	}()
	leader, err := berth.StartReplica(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	// The replica is ready before it leads: wait for the Lease.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		rep, code := run()
		return code == 0 && len(rep.Findings) == 0, nil
	}); err != nil {
		rep, code := run()
		t.Errorf("with a leader serving the webhook: exit %d, report %+v; want 0 and nothing found", code, rep)
	}
	if rep, _ := run(); len(rep.Skipped) != 1 || rep.Skipped[0].Check != doctor.CheckInstallAgent || rep.Incomplete {
		t.Errorf("skipped %+v (incomplete %v); want only the agent check, on request", rep.Skipped, rep.Incomplete)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: "berth-doctor-self-check"}); err != nil || len(pods.Items) != 0 {
		t.Errorf("the self-check left %d pods (%v)", len(pods.Items), err)
	}

	if err := rigtest.Current().StopComponent(leader, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var rep doctor.Report
	var code int
	checks := func() []string {
		var out []string
		for _, f := range rep.Findings {
			out = append(out, f.Check)
		}
		return out
	}
	// The Lease is released on a clean stop or expires within its 15 s.
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 40*time.Second, true, func(ctx context.Context) (bool, error) {
		rep, code = run()
		return slices.Equal(checks(), []string{doctor.CheckInstallWebhook, doctor.CheckInstallLeader}), nil
	})
	if code != 1 || !slices.Equal(checks(), []string{doctor.CheckInstallWebhook, doctor.CheckInstallLeader}) ||
		!strings.Contains(rep.Findings[0].Problem, "failed at berth's webhook") {
		t.Errorf("with the controller down: exit %d, report %+v; want 1, the webhook and the leader named", code, rep)
	}
}
