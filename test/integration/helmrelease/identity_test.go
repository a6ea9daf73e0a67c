package helmrelease_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestComponentsRunAsTheChartsServiceAccounts: after helm install with the quickstart's values,
// the controller and the scaler run with the tokens of the ServiceAccounts the chart created —
// and nothing else: the chart's ClusterRoles, Roles and bindings. The controller takes its
// Lease, serves ready and writes a gang's status; neither process is refused anything (no
// "forbidden" in their logs).
func TestComponentsRunAsTheChartsServiceAccounts(t *testing.T) {
	if namespace != rig.BerthNamespace {
		t.Fatalf("the release's namespace %s is not the rig's berth namespace %s", namespace, rig.BerthNamespace)
	}
	ctx := context.Background()
	r := rigtest.Current()
	cfg, _ := installQuickstart(t)
	t.Cleanup(func() {
		if _, err := action.NewUninstall(cfg).Run(release); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
	})
	bin, err := rigtest.BuildBerth(r)
	if err != nil {
		t.Fatal(err)
	}
	start := func(component string, args ...string) {
		t.Helper()
		health, err := rig.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		url := ""
		switch component {
		case "controller":
			args = append(args, "--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(health))
			url = fmt.Sprintf("http://127.0.0.1:%d/readyz", health)
		case "scaler":
			args = append(args, "--metrics-address=127.0.0.1:"+strconv.Itoa(health))
			url = fmt.Sprintf("http://127.0.0.1:%d/metrics", health)
		}
		startAsChartAccount(ctx, t, r, bin, "chart-sa-"+component, component, url, args...)
	}
	grpc, err := rig.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	start("controller", "--leader-elect=true", "--leader-election-namespace="+namespace, "--metrics-bind-address=0",
		"--webhook-port=0", "--webhook-secret-namespace="+namespace, "--seat-namespace="+namespace,
		"--webhook-cert-dir="+filepath.Join(r.WorkDir(), "chart-sa-certs"))
	start("scaler", "--grpc-address=127.0.0.1:"+strconv.Itoa(grpc))

	// The controller works as that account: a gang gets its status.
	c := r.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "chart-sa"}}); err != nil {
		t.Fatal(err)
	}
	pg := builders.PodGroup("as-chart-sa", "chart-sa").MinMember(2).Obj()
	if err := c.Create(ctx, pg); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 60*time.Second, 250*time.Millisecond, "the gang's status written by the controller", func(ctx context.Context) (bool, string, error) {
		var got berthv1alpha1.PodGroup
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), &got); err != nil {
			return false, "", err
		}
		return got.Status.Phase != "" && len(got.Status.Conditions) > 0, fmt.Sprintf("phase %q, %d conditions", got.Status.Phase, len(got.Status.Conditions)), nil
	})
	// Give both processes a while at work, then read what they were refused.
	time.Sleep(10 * time.Second)
	for _, component := range []string{"controller", "scaler"} {
		data, err := os.ReadFile(filepath.Join(r.LogDir(), "chart-sa-"+component+".log"))
		if err != nil {
			t.Fatal(err)
		}
		var refused []string
		for line := range strings.Lines(string(data)) {
			if strings.Contains(line, "forbidden") {
				refused = append(refused, strings.TrimSpace(line))
			}
		}
		if len(refused) > 0 {
			t.Errorf("berth %s as the chart's ServiceAccount was refused %d times, first: %s", component, len(refused), refused[0])
		}
	}
}

// startAsChartAccount runs berth's component (controller, scaler) with args as the process the
// chart's pod would be — with the token of the ServiceAccount the chart made for it — as rig
// component name (its log: name.log), stopped when the test ends; ready when url (if any)
// answers.
func startAsChartAccount(ctx context.Context, t *testing.T, r *rig.Rig, bin, name, component, url string, args ...string) {
	t.Helper()
	kubeconfig, err := rigtest.ServiceAccountKubeconfig(ctx, r, release+"-"+component)
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{component, "--kubeconfig=" + kubeconfig}, args...)
	if err := r.StartComponent(ctx, name, bin, args, nil, url); err != nil {
		t.Fatalf("berth %s as ServiceAccount %s-%s: %v", component, release, component, err)
	}
	t.Cleanup(func() { _ = r.StopComponent(name, 5*time.Second) })
}
