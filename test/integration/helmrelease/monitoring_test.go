package helmrelease_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
	"github.com/berth-dev/berth/test/testenv"
)

// TestKubePrometheusStackScrapesBerth: berth installed with the quickstart's values beside a
// Prometheus resource as kube-prometheus-stack makes it by default (it selects release=
// kube-prometheus-stack in every namespace), and the real Prometheus Operator: the operator
// selects berth's ServiceMonitors, PodMonitor and PrometheusRule, and a real Prometheus run from
// the configuration and rule files the operator generated scrapes the controller and the scaler
// through their Services — over HTTPS, with the chart's metrics-reader token, as the chart's
// RBAC allows — and loads and evaluates every alert of the chart. Endpoints may not hold a
// loopback address, so the machine needs an IPv4 address besides loopback (any machine or
// container with a network interface has one; a --network none container does not).
func TestKubePrometheusStackScrapesBerth(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	c := r.Client
	cfg, _ := installQuickstart(t)
	t.Cleanup(func() {
		if _, err := action.NewUninstall(cfg).Run(release); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
	})
	// The chart's metrics-reader token Secret, filled as kube-controller-manager's token
	// controller fills it (the rig runs without that controller).
	token, err := rigtest.ServiceAccountToken(ctx, r, namespace, release+"-metrics-reader")
	if err != nil {
		t.Fatal(err)
	}
	var secret corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release + "-metrics-reader"}, &secret); err != nil {
		t.Fatalf("the chart's metrics-reader token Secret: %v", err)
	}
	secret.Data = map[string][]byte{corev1.ServiceAccountTokenKey: []byte(token)}
	if err := c.Update(ctx, &secret); err != nil {
		t.Fatal(err)
	}

	if err := r.StartPrometheusOperator(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.StopComponent(rig.BinPrometheusOperator, 5*time.Second) })
	kps := rigtest.KubePrometheusStack{Release: "kube-prometheus-stack", Namespace: "monitoring", Version: rigtest.PrometheusVersion(t, rigtest.OperatorPrometheus(r))}
	if err := kps.Create(ctx, c); err != nil {
		t.Fatal(err)
	}

	// The controller and the scaler serve their metrics as the chart runs them (--metrics-secure)
	// at an address of this machine that Endpoints may hold (never loopback): their Services'
	// endpoints, which kube-controller-manager would write for their pods.
	ip := hostIP(t)
	bin, err := rigtest.BuildBerth(r)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]int{}
	for _, component := range []string{"controller", "scaler"} {
		if ports[component], err = rig.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	health, err := rig.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	grpc, err := rig.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsAt := func(component string) string { return net.JoinHostPort(ip, strconv.Itoa(ports[component])) }
	startAsChartAccount(ctx, t, r, bin, "kps-controller", "controller", fmt.Sprintf("http://127.0.0.1:%d/readyz", health),
		"--leader-elect=true", "--leader-election-namespace="+namespace, "--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(health),
		"--metrics-bind-address="+metricsAt("controller"), "--metrics-secure",
		"--webhook-port=0", "--webhook-secret-namespace="+namespace, "--seat-namespace="+namespace,
		"--webhook-cert-dir="+t.TempDir())
	startAsChartAccount(ctx, t, r, bin, "kps-scaler", "scaler", "",
		"--grpc-address=127.0.0.1:"+strconv.Itoa(grpc), "--metrics-address="+metricsAt("scaler"), "--metrics-secure")
	services := map[string]string{} // scrape pool → the Service whose endpoints it scrapes (its job label)
	for component, port := range ports {
		services["serviceMonitor/"+namespace+"/"+release+"-"+component+"/0"] = writeEndpoints(ctx, t, c, release+"-"+component, ip, port)
	}

	// The operator generates a job per monitor endpoint and a rule file from berth's rule.
	jobs := []string{
		"serviceMonitor/" + namespace + "/" + release + "-controller/0",
		"serviceMonitor/" + namespace + "/" + release + "-scaler/0",
		"podMonitor/" + namespace + "/" + release + "-agent/0",
	}
	alerts := chartAlerts(ctx, t, c)
	g := rigtest.WaitGenerated(t, c, kps.Namespace, kps.Name(), 2*time.Minute, func(g rigtest.GeneratedPrometheus) (bool, string) {
		have, err := g.ScrapeJobs()
		if err != nil {
			return false, err.Error()
		}
		for _, j := range jobs {
			if !slices.Contains(have, j) {
				return false, fmt.Sprintf("jobs %v, want %v", have, jobs)
			}
		}
		for _, files := range g.Rules {
			for _, f := range files {
				if strings.Contains(f, alerts[0]) {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("no rule file holds %s yet (%d rule ConfigMaps)", alerts[0], len(g.Rules))
	})
	kubeconfig, err := rigtest.NamespacedServiceAccountKubeconfig(ctx, r, kps.Namespace, kps.Name())
	if err != nil {
		t.Fatal(err)
	}
	prom := rigtest.RunGenerated(t, r, kps.Namespace, kps.Name(), g, kubeconfig)

	// Scraped: each monitor's target up, berth's own series stored under its Service's job.
	for _, pool := range jobs[:2] {
		rigtest.Eventually(t, 2*time.Minute, time.Second, "Prometheus scrapes "+pool, func(context.Context) (bool, string, error) {
			targets, dropped, err := rigtest.PromTargets(prom)
			if err != nil {
				return false, "", err
			}
			up := slices.ContainsFunc(targets, func(a rigtest.ActiveTarget) bool { return a.Job == pool && a.Health == "up" })
			series := rigtest.PromCount(prom, fmt.Sprintf(`{job=%q, namespace=%q, __name__=~"berth_.+"}`, services[pool], namespace))
			return up && series > 0, fmt.Sprintf("target up %v, %d berth series of job %s; targets %+v (%d dropped)", up, series, services[pool], targets, dropped), nil
		})
	}
	// Every alert of the chart loaded and evaluated without error.
	rigtest.Eventually(t, 2*time.Minute, time.Second, "every berth alert loaded and evaluated", func(context.Context) (bool, string, error) {
		loaded, err := rigtest.PrometheusRules(prom)
		if err != nil {
			return false, "", err
		}
		seen := map[string]bool{}
		for _, lr := range loaded {
			if lr.Type != "alerting" {
				continue
			}
			if lr.Health == "err" {
				return false, "", fmt.Errorf("alert %s (group %s) fails to evaluate: %s", lr.Name, lr.Group, lr.LastError)
			}
			seen[lr.Name] = seen[lr.Name] || lr.Evaluated && lr.Health == "ok"
		}
		var missing []string
		for _, a := range alerts {
			if !seen[a] {
				missing = append(missing, a)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d of %d alerts loaded and evaluated; not yet: %v", len(alerts)-len(missing), len(alerts), missing), nil
	})
}

// hostIP is an IPv4 address of this machine's that is neither loopback nor link-local: what
// an Endpoints object may hold and a local process may listen on.
func hostIP(t *testing.T) string {
	t.Helper()
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
				return n.IP.String()
			}
		}
	}
	testenv.SkipOrFail(t, "no IPv4 address but loopback on this machine: Endpoints cannot point at a local process")
	return ""
}

// writeEndpoints writes the Endpoints of the Service ServiceMonitor name selects, as the
// endpoints controller would for one ready pod at ip serving its metrics port on port, and
// returns the Service's name.
func writeEndpoints(ctx context.Context, t *testing.T, c client.Client, name, ip string, port int) string {
	t.Helper()
	var sm unstructured.Unstructured
	sm.SetAPIVersion("monitoring.coreos.com/v1")
	sm.SetKind("ServiceMonitor")
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &sm); err != nil {
		t.Fatalf("the chart's ServiceMonitor %s: %v", name, err)
	}
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.InNamespace(namespace), client.MatchingLabels(selector)); err != nil {
		t.Fatal(err)
	}
	if len(svcs.Items) != 1 {
		t.Fatalf("ServiceMonitor %s selects %d Services (labels %v), want the chart's one", name, len(svcs.Items), selector)
	}
	svc := svcs.Items[0]
	var eps []corev1.EndpointPort
	for _, p := range svc.Spec.Ports {
		if p.Name == "metrics" {
			eps = append(eps, corev1.EndpointPort{Name: p.Name, Port: int32(port), Protocol: corev1.ProtocolTCP}) //nolint:gosec // a free port
		}
	}
	if len(eps) == 0 {
		t.Fatalf("the chart's Service %s has no port named metrics", svc.Name)
	}
	// Endpoints, deprecated as they are: the operator's default service discovery role (and
	// kube-prometheus-stack's) reads them.
	subset := corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{{IP: ip}}, Ports: eps} //nolint:staticcheck // see above
	ep := &corev1.Endpoints{                                                                   //nolint:staticcheck // see above
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: namespace, Labels: svc.Labels},
		Subsets:    []corev1.EndpointSubset{subset}, //nolint:staticcheck // see above
	}
	if err := c.Create(ctx, ep); err != nil {
		t.Fatalf("Endpoints %s: %v", svc.Name, err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), ep) })
	return svc.Name
}

// chartAlerts are the alert names of the PrometheusRule the chart installed.
func chartAlerts(ctx context.Context, t *testing.T, c client.Client) []string {
	t.Helper()
	var rules unstructured.UnstructuredList
	rules.SetAPIVersion("monitoring.coreos.com/v1")
	rules.SetKind("PrometheusRuleList")
	if err := c.List(ctx, &rules, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, pr := range rules.Items {
		groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
		for _, g := range groups {
			rs, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
			for _, r := range rs {
				if a, ok := r.(map[string]any)["alert"].(string); ok {
					alerts = append(alerts, a)
				}
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatal("the chart installed no PrometheusRule with alerts")
	}
	return alerts
}
