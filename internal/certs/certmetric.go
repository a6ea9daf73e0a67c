package certs

import (
	"os"
	"path/filepath"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	bmetrics "github.com/berth-dev/berth/internal/metrics"
)

var (
	certMetricOnce sync.Once
	certDirMu      sync.Mutex
	certDir        string
)

// WatchServingCertificate exports berth_webhook_certificate_expiry_timestamp_seconds: when the
// serving certificate in dir (tls.crt, whoever wrote it: berth's Rotator or cert-manager)
// expires, read at every scrape. The gauge is absent while the file cannot be read.
func WatchServingCertificate(dir string) {
	certDirMu.Lock()
	certDir = dir
	certDirMu.Unlock()
	certMetricOnce.Do(func() { ctrlmetrics.Registry.MustRegister(Collectors()...) })
}

var certExpiryDesc = prometheus.NewDesc(
	prometheus.BuildFQName(bmetrics.Namespace, "webhook", "certificate_expiry_timestamp_seconds"),
	"Unix time at which the pod-gate webhook's serving certificate expires.", nil, nil)

// certCollector reads the certificate at scrape time, so a renewal shows at once.
type certCollector struct{}

// Describe sends the gauge's description.
func (certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- certExpiryDesc }

// Collect sends the expiry of the certificate on disk, if it can be read.
func (certCollector) Collect(ch chan<- prometheus.Metric) {
	certDirMu.Lock()
	dir := certDir
	certDirMu.Unlock()
	data, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
	if err != nil {
		return
	}
	cert, err := parseCert(data)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue, float64(cert.NotAfter.Unix()))
}

// Collectors are the webhook's metrics (docs/metrics.md is generated from them).
func Collectors() []prometheus.Collector { return []prometheus.Collector{certCollector{}} }
