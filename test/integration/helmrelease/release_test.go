// Package helmrelease_test installs berth's packaged Helm chart on a real kube-apiserver with
// Helm's own install, upgrade and uninstall (the Helm SDK, as the helm CLI runs them), with only
// the values the quickstart names: the CRD is installed, upgraded when the chart changes it, and
// kept with every PodGroup through upgrade and uninstall; the components run as the chart's
// ServiceAccounts; and kube-prometheus-stack's Prometheus, through the real Prometheus Operator,
// scrapes them and evaluates every alert.
package helmrelease_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	berthchart "github.com/berth-dev/berth/test/chart"
	"github.com/berth-dev/berth/test/rigtest"
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		// The kinds the quickstart's values render besides berth's own (its CRD comes from the
		// chart here: nothing installs it first).
		if err := rigtest.InstallToolCRDs(ctx, r, rigtest.CRDsKEDA, rigtest.CRDsMonitoring); err != nil {
			return err
		}
		return rigtest.InstallKarpenterAWSCRDs(ctx, r)
	})
}

const (
	release   = "berth"
	namespace = "berth-system"
	crdName   = "podgroups.scheduling.berth.dev"
)

// quickstart are the --set values docs/quickstart.md names, as helm parses them.
var quickstart = []string{
	"monitoring.serviceMonitor.enabled=true",
	"monitoring.prometheusRule.enabled=true",
	"monitoring.dashboard.enabled=true",
	"monitoring.prometheusRelease=kube-prometheus-stack",
}

// installQuickstart runs helm install of the packaged chart with the quickstart's values and
// returns the configuration and values it used.
func installQuickstart(t *testing.T) (*action.Configuration, map[string]any) {
	t.Helper()
	opts := values.Options{Values: quickstart}
	vals, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t)
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = release, namespace, true
	if _, err := inst.Run(packaged(t), vals); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	return cfg, vals
}

// helmConfig is Helm's action configuration for the rig, as the helm CLI builds it from a
// kubeconfig.
func helmConfig(t *testing.T) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig, ns := rigtest.Current().Kubeconfig, namespace
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// packaged packages charts/berth (helm package) and loads the archive.
func packaged(t *testing.T) *chart.Chart {
	t.Helper()
	pkg := action.NewPackage()
	pkg.Destination = t.TempDir()
	path, err := pkg.Run(berthchart.Dir(), nil)
	if err != nil {
		t.Fatalf("helm package: %v", err)
	}
	if !strings.HasSuffix(path, ".tgz") {
		t.Fatalf("helm package wrote %s", path)
	}
	ch, err := loader.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// withChangedCRD is ch as a later release would ship it: a new version, and a PodGroup CRD with
// one more printer column.
func withChangedCRD(t *testing.T, ch *chart.Chart) *chart.Chart {
	t.Helper()
	for _, f := range ch.Files {
		if filepath.Base(f.Name) != "scheduling.berth.dev_podgroups.yaml" {
			continue
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(f.Data, &crd); err != nil {
			t.Fatal(err)
		}
		for i := range crd.Spec.Versions {
			crd.Spec.Versions[i].AdditionalPrinterColumns = append(crd.Spec.Versions[i].AdditionalPrinterColumns,
				apiextensionsv1.CustomResourceColumnDefinition{Name: "Upgraded", Type: "string", JSONPath: ".metadata.name"})
		}
		data, err := yaml.Marshal(&crd)
		if err != nil {
			t.Fatal(err)
		}
		f.Data = data
		ch.Metadata.Version = "0.1.1-test"
		return ch
	}
	t.Fatal("the packaged chart carries no PodGroup CRD under files/")
	return nil
}

func hasColumn(crd *apiextensionsv1.CustomResourceDefinition, name string) bool {
	for _, v := range crd.Spec.Versions {
		for _, c := range v.AdditionalPrinterColumns {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}

// TestInstallUpgradeUninstallKeepsPodGroups: helm install of the packaged chart with the
// quickstart's values installs the CRD; PodGroups are created; helm upgrade to a chart whose CRD
// changed applies the change and loses no PodGroup; helm uninstall leaves the CRD and every
// PodGroup (crds.keep).
func TestInstallUpgradeUninstallKeepsPodGroups(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	cfg, vals := installQuickstart(t)
	var crd apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, client.ObjectKey{Name: crdName}, &crd); err != nil {
		t.Fatalf("the PodGroup CRD after helm install: %v", err)
	}
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "PodGroups served", func(ctx context.Context) (bool, string, error) {
		err := c.List(ctx, &berthv1alpha1.PodGroupList{})
		return err == nil, fmt.Sprint(err), nil
	})
	uids := map[string]types.UID{}
	for i := range 3 {
		pg := builders.PodGroup(fmt.Sprintf("train-%d", i), "default").MinMember(8).Obj()
		if err := c.Create(ctx, pg); err != nil {
			t.Fatal(err)
		}
		uids[pg.Name] = pg.UID
	}
	survived := func(when string) {
		t.Helper()
		var list berthv1alpha1.PodGroupList
		if err := c.List(ctx, &list, client.InNamespace("default")); err != nil {
			t.Fatalf("%s: listing PodGroups: %v", when, err)
		}
		got := map[string]types.UID{}
		for _, pg := range list.Items {
			got[pg.Name] = pg.UID
		}
		if fmt.Sprint(got) != fmt.Sprint(uids) {
			t.Errorf("%s: PodGroups %v, want %v (the same objects)", when, got, uids)
		}
	}

	up := action.NewUpgrade(cfg)
	up.Namespace = namespace
	if _, err := up.Run(release, withChangedCRD(t, packaged(t)), vals); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: crdName}, &crd); err != nil || !hasColumn(&crd, "Upgraded") {
		t.Errorf("after helm upgrade to a chart with a changed CRD the CRD is not upgraded (err %v)", err)
	}
	survived("after helm upgrade")

	un := action.NewUninstall(cfg)
	if _, err := un.Run(release); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: crdName}, &crd); err != nil || crd.DeletionTimestamp != nil {
		t.Fatalf("after helm uninstall the PodGroup CRD is gone or going (err %v): crds.keep must keep it", err)
	}
	survived("after helm uninstall")
}
