package rigtest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/berth-dev/berth/internal/rig"
)

// KubePrometheusStack is a Prometheus resource as kube-prometheus-stack's chart makes it with its
// default values for release Release in Namespace: it selects the ServiceMonitors, PodMonitors,
// Probes, ScrapeConfigs and PrometheusRules labelled release=<Release> in every namespace
// (serviceMonitorSelectorNilUsesHelmValues and friends, true by default), and runs as
// ServiceAccount <Release>-prometheus with the chart's ClusterRole.
type KubePrometheusStack struct {
	Release, Namespace string
	// Version is the Prometheus version the operator generates the configuration for.
	Version string
}

// Name is the Prometheus resource's name: <release>-prometheus.
func (k KubePrometheusStack) Name() string { return k.Release + "-prometheus" }

// Create creates the namespace, the ServiceAccount, its ClusterRole and binding (what
// kube-prometheus-stack's Prometheus may read) and the Prometheus resource.
func (k KubePrometheusStack) Create(ctx context.Context, c client.Client) error {
	name := k.Name()
	selector := map[string]any{"matchLabels": map[string]any{"release": k.Release}}
	prom := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
		"metadata": map[string]any{"name": name, "namespace": k.Namespace, "labels": map[string]any{"release": k.Release}},
		"spec": map[string]any{
			"version": k.Version, "replicas": int64(1), "serviceAccountName": name,
			"evaluationInterval": "30s", "scrapeInterval": "30s",
			"serviceMonitorSelector": selector, "serviceMonitorNamespaceSelector": map[string]any{},
			"podMonitorSelector": selector, "podMonitorNamespaceSelector": map[string]any{},
			"probeSelector": selector, "probeNamespaceSelector": map[string]any{},
			"scrapeConfigSelector": selector, "scrapeConfigNamespaceSelector": map[string]any{},
			"ruleSelector": selector, "ruleNamespaceSelector": map[string]any{},
		},
	}}
	read := []string{"get", "list", "watch"}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.Namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.Namespace}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "nodes/metrics", "services", "endpoints", "pods"}, Verbs: read},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: read},
			{NonResourceURLs: []string{"/metrics", "/metrics/cadvisor"}, Verbs: []string{"get"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: k.Namespace}}},
		prom,
	}
	for _, o := range objs {
		if err := createOrKeep(ctx, c, o); err != nil {
			return err
		}
	}
	return nil
}

// OperatorPrometheus is the Prometheus the rig runs from what the Prometheus Operator generates:
// built from its module (hack/tools/prometheus) with every service discovery — Debian's package
// leaves Kubernetes' out.
func OperatorPrometheus(r *rig.Rig) string {
	return filepath.Join(r.ToolsDir(), "bin", rig.BinPrometheus)
}

// PrometheusVersion is the version of Prometheus binary bin (v3.16.0), for the operator to
// generate a configuration that binary reads.
func PrometheusVersion(t testing.TB, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("prometheus --version: %v: %s", err, out)
	}
	m := regexp.MustCompile(`version (\d+\.\d+\.\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("prometheus --version printed no version: %s", out)
	}
	return "v" + string(m[1])
}

// GeneratedPrometheus is what the Prometheus Operator generated for a Prometheus resource: the
// configuration (from Secret prometheus-<name>, prometheus.yaml.gz) and the rule files (from
// ConfigMaps prometheus-<name>-rulefiles-<n>, by ConfigMap and key).
type GeneratedPrometheus struct {
	Config []byte
	Rules  map[string]map[string]string
}

// ScrapeJobs are the job names of the configuration's scrape configs.
func (g GeneratedPrometheus) ScrapeJobs() ([]string, error) {
	var cfg struct {
		ScrapeConfigs []struct {
			JobName string `json:"job_name"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(g.Config, &cfg); err != nil {
		return nil, fmt.Errorf("parsing the generated configuration: %w", err)
	}
	jobs := make([]string, 0, len(cfg.ScrapeConfigs))
	for _, sc := range cfg.ScrapeConfigs {
		jobs = append(jobs, sc.JobName)
	}
	return jobs, nil
}

// WaitGenerated waits until the operator has written the configuration of Prometheus ns/name
// and ready(g) holds (it re-reads both while the operator catches up with new monitors).
func WaitGenerated(t testing.TB, c client.Client, ns, name string, timeout time.Duration, ready func(GeneratedPrometheus) (bool, string)) GeneratedPrometheus {
	t.Helper()
	var g GeneratedPrometheus
	Eventually(t, timeout, time.Second, "the Prometheus Operator's configuration for "+ns+"/"+name, func(ctx context.Context) (bool, string, error) {
		var err error
		if g, err = readGenerated(ctx, c, ns, name); err != nil || g.Config == nil {
			return false, fmt.Sprint("not written yet: ", err), nil
		}
		ok, why := ready(g)
		return ok, why, nil
	})
	return g
}

// readGenerated reads what the operator wrote for Prometheus ns/name (Config nil: not yet).
func readGenerated(ctx context.Context, c client.Client, ns, name string) (GeneratedPrometheus, error) {
	g := GeneratedPrometheus{Rules: map[string]map[string]string{}}
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "prometheus-" + name}, &s); err != nil {
		return g, client.IgnoreNotFound(err)
	}
	gz := s.Data["prometheus.yaml.gz"]
	if len(gz) == 0 {
		return g, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return g, fmt.Errorf("secret %s: %w", s.Name, err)
	}
	if g.Config, err = io.ReadAll(zr); err != nil {
		return g, fmt.Errorf("secret %s: %w", s.Name, err)
	}
	var cms corev1.ConfigMapList
	if err := c.List(ctx, &cms, client.InNamespace(ns)); err != nil {
		return g, err
	}
	for _, cm := range cms.Items {
		if strings.HasPrefix(cm.Name, "prometheus-"+name+"-rulefiles-") {
			g.Rules[cm.Name] = cm.Data
		}
	}
	return g, nil
}

// RunGenerated runs a real Prometheus (OperatorPrometheus) from g, as the operator's
// StatefulSet would mount it, with $(SHARD) and $(POD_NAME) expanded as its config reloader does:
// rule files and the operator's Secrets under /etc/prometheus live in a temporary folder
// instead, and Kubernetes service discovery reads the API server with kubeconfig (the
// Prometheus' ServiceAccount) where in a pod it reads the mounted token. Nothing else of the
// operator's configuration — jobs, selectors, relabelings, credentials — is touched. Returns
// its URL once it serves.
func RunGenerated(t testing.TB, r *rig.Rig, ns, name string, g GeneratedPrometheus, kubeconfig string) string {
	t.Helper()
	dir := t.TempDir()
	// What the operator's config reloader expands from the pod's environment.
	text := strings.NewReplacer("$(SHARD)", "0", "$(POD_NAME)", "prometheus-"+name+"-0").Replace(string(g.Config))
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("parsing the generated configuration: %v", err)
	}
	cfg = outOfCluster(cfg, dir, kubeconfig).(map[string]any)
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	for cm, files := range g.Rules {
		if err := os.MkdirAll(filepath.Join(dir, "rules", cm), 0o700); err != nil {
			t.Fatal(err)
		}
		for k, v := range files {
			if err := os.WriteFile(filepath.Join(dir, "rules", cm, k), []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	// TLS assets the configuration refers to (CA files of monitors), as the operator's
	// tls-assets Secrets hold them.
	var secrets corev1.SecretList
	if err := r.Client.List(context.Background(), &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if !strings.HasPrefix(s.Name, "prometheus-"+name+"-tls-assets-") {
			continue
		}
		if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o700); err != nil {
			t.Fatal(err)
		}
		for k, v := range s.Data {
			if err := os.WriteFile(filepath.Join(dir, "certs", k), v, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	return runPrometheus(t, OperatorPrometheus(r), dir)
}

// outOfCluster is v with every path under /etc/prometheus/ moved into dir and every
// kubernetes_sd_configs entry reading the API server through kubeconfig.
func outOfCluster(v any, dir, kubeconfig string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = outOfCluster(e, dir, kubeconfig)
		}
		if sds, ok := x["kubernetes_sd_configs"].([]any); ok {
			for _, sd := range sds {
				if m, ok := sd.(map[string]any); ok {
					delete(m, "api_server")
					m["kubeconfig_file"] = kubeconfig
				}
			}
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = outOfCluster(e, dir, kubeconfig)
		}
		return x
	case string:
		if rest, ok := strings.CutPrefix(x, "/etc/prometheus/"); ok {
			return filepath.Join(dir, rest)
		}
		return x
	}
	return v
}

// PromCount is the number of series PromQL query returns on the Prometheus at base (0 on any
// error: callers poll).
func PromCount(base, query string) int { return promCount(base, query) }

// LoadedRule is a rule as Prometheus's /api/v1/rules reports it.
type LoadedRule struct {
	Group, Name, Type, Health, LastError string
	// Evaluated is false until the rule has been evaluated once.
	Evaluated bool
}

// PrometheusRules are the rules the Prometheus at base has loaded.
func PrometheusRules(base string) ([]LoadedRule, error) {
	resp, err := http.Get(base + "/api/v1/rules") //nolint:gosec,noctx // loopback test Prometheus
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name           string    `json:"name"`
					Type           string    `json:"type"`
					Health         string    `json:"health"`
					LastError      string    `json:"lastError"`
					LastEvaluation time.Time `json:"lastEvaluation"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("decoding /api/v1/rules: %w", err)
	}
	var out []LoadedRule
	for _, g := range body.Data.Groups {
		for _, r := range g.Rules {
			out = append(out, LoadedRule{Group: g.Name, Name: r.Name, Type: r.Type, Health: r.Health, LastError: r.LastError,
				Evaluated: r.LastEvaluation.Year() > 1})
		}
	}
	return out, nil
}

// ActiveTarget is a target as Prometheus's /api/v1/targets reports it.
type ActiveTarget struct {
	Job, ScrapeURL, Health, LastError string
}

// PromTargets are the active targets of the Prometheus at base, and how many it dropped.
func PromTargets(base string) ([]ActiveTarget, int, error) {
	resp, err := http.Get(base + "/api/v1/targets") //nolint:gosec,noctx // loopback test Prometheus
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Active []struct {
				ScrapePool string `json:"scrapePool"`
				ScrapeURL  string `json:"scrapeUrl"`
				Health     string `json:"health"`
				LastError  string `json:"lastError"`
			} `json:"activeTargets"`
			Dropped []json.RawMessage `json:"droppedTargets"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, 0, fmt.Errorf("decoding /api/v1/targets: %w", err)
	}
	out := make([]ActiveTarget, 0, len(body.Data.Active))
	for _, a := range body.Data.Active {
		out = append(out, ActiveTarget{Job: a.ScrapePool, ScrapeURL: a.ScrapeURL, Health: a.Health, LastError: a.LastError})
	}
	return out, len(body.Data.Dropped), nil
}
