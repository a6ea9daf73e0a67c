package restart_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/internal/cli"
	"github.com/berth-dev/berth/internal/doctor"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestDoctorChecksTheInstall: `berth doctor --install` (what helm test runs) passes while the
// controller serves the pod-gate webhook — a gang member's dry run comes back gated, nothing is
// created — and, with the controller down, names the webhook and exits 1.
func TestDoctorChecksTheInstall(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doctor-install"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	run := func() (doctor.Report, int) {
		t.Helper()
		root := cli.NewRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		args := []string{"doctor", "--install", "-n", ns.Name, "-o", "json", "--kubeconfig=" + rigtest.Current().Kubeconfig}
		root.SetArgs(args)
		_ = root.ExecuteContext(ctx)
		var rep doctor.Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return rep, cli.Execute(args)
	}
	wasRunning := berth.Running != ""
	if !wasRunning {
		if err := berth.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if rep, code := run(); code != 0 || len(rep.Findings) != 0 || len(rep.Skipped) != 0 {
		t.Errorf("with the controller serving: exit %d, report %+v; want 0 and nothing found", code, rep)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns.Name)); err != nil || len(pods.Items) != 0 {
		t.Errorf("the self-check left %d pods (%v)", len(pods.Items), err)
	}

	if err := berth.Stop(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Leave the controller as the test found it (the other tests start their own).
		if wasRunning {
			if err := berth.Start(ctx); err != nil {
				t.Error(err)
			}
		}
	}()
	rep, code := run()
	if code != 1 || len(rep.Findings) != 1 || rep.Findings[0].Check != doctor.CheckInstallWebhook ||
		!strings.Contains(rep.Findings[0].Problem, "failed at berth's webhook") {
		t.Errorf("with the controller down: exit %d, report %+v; want 1 and the webhook named", code, rep)
	}
}
