package rigtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/testenv"
)

// PrometheusTarget is a static scrape target of StartPrometheus and the labels its series get
// (namespace and pod, as a PodMonitor writes them, or anything else).
type PrometheusTarget struct {
	// Address is host:port; Path is the metrics path (default /metrics).
	Address, Path string
	Labels        map[string]string
}

// PrometheusBinary finds Prometheus: $PROMETHEUS, else prometheus on $PATH (Debian's package,
// which hack/ensure-promtool.sh installs). Without it the test skips, unless
// BERTH_REQUIRE_RIG=1 (make test) makes that a failure.
func PrometheusBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("PROMETHEUS"); p != "" {
		return p
	}
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	testenv.SkipOrFail(t, "no prometheus binary: install Debian's prometheus package (hack/ensure-promtool.sh does) or set PROMETHEUS")
	return ""
}

// StartPrometheus runs a real Prometheus scraping targets every interval, stopped when the test
// ends, and returns its URL once every target is up.
func StartPrometheus(t testing.TB, interval time.Duration, targets []PrometheusTarget) string {
	t.Helper()
	bin := PrometheusBinary(t)
	dir := t.TempDir()
	ms := func(d time.Duration) string { return strconv.Itoa(int(d/time.Millisecond)) + "ms" }
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\nscrape_configs:\n", ms(interval), ms(interval*8/10))
	for i, tg := range targets {
		path := tg.Path
		if path == "" {
			path = "/metrics"
		}
		keys := make([]string, 0, len(tg.Labels))
		for k := range tg.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		labels := make([]string, len(keys))
		for j, k := range keys {
			labels[j] = fmt.Sprintf("%s: %q", k, tg.Labels[k])
		}
		fmt.Fprintf(&cfg, "  - job_name: target-%d\n    metrics_path: %q\n    static_configs:\n      - targets: [%q]\n        labels: {%s}\n",
			i, path, tg.Address, strings.Join(labels, ", "))
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	u := runPrometheus(t, bin, dir)
	deadline := time.Now().Add(60 * time.Second)
	for up := 0; up < len(targets); up = promCount(u, "up==1") {
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus on %s: %d of %d targets up after 60s", u, up, len(targets))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return u
}

// runPrometheus starts Prometheus bin with dir/prometheus.yml, its data and log in dir, killed
// when the test ends (its log shown if the test failed), and returns its URL once it serves.
func runPrometheus(t testing.TB, bin, dir string) string {
	t.Helper()
	webPort, err := rig.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(webPort)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", out)
		}
	})
	u := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(u + "/-/ready") //nolint:gosec,noctx // loopback test Prometheus
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return u
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus on %s not ready after 60s (%v)", u, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// promCount is the number of series an instant query returns (0 on any error).
func promCount(base, query string) int {
	r, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(query)) //nolint:gosec,noctx // loopback test Prometheus
	if err != nil {
		return 0
	}
	defer r.Body.Close()
	var resp struct {
		Data struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if json.NewDecoder(r.Body).Decode(&resp) != nil {
		return 0
	}
	return len(resp.Data.Result)
}
