package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
)

// metricsFlags locate a component's /metrics endpoint and say whether it is served over HTTPS
// to callers the API server authenticates and authorizes.
type metricsFlags struct {
	address string
	secure  bool
}

func (f *metricsFlags) bind(fl *pflag.FlagSet, name, def string) {
	fl.StringVar(&f.address, name, def, "address of the Prometheus /metrics endpoint; 0 disables it")
	fl.BoolVar(&f.secure, "metrics-secure", false, "serve /metrics over HTTPS (a self-signed certificate) to callers whose bearer token the API server authenticates (TokenReview) and authorizes for get on the non-resource URL /metrics (SubjectAccessReview): the ClusterRole in config/rbac/metrics-reader.yaml")
}

// serveMetrics serves reg on /metrics until ctx ends: plain HTTP, or with f.secure HTTPS behind
// controller-runtime's authentication and authorization filter (what the controller's metrics
// server uses too).
func serveMetrics(ctx context.Context, f metricsFlags, reg *prometheus.Registry, cfg *rest.Config) error {
	handler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	l, err := net.Listen("tcp", f.address)
	if err != nil {
		return fmt.Errorf("listening on %s for metrics: %w", f.address, err)
	}
	if f.secure {
		if handler, err = authorized(cfg, handler); err != nil {
			_ = l.Close()
			return err
		}
		cert, key, err := certutil.GenerateSelfSignedCertKeyWithFixtures("localhost", []net.IP{{127, 0, 0, 1}}, nil, "")
		if err != nil {
			_ = l.Close()
			return fmt.Errorf("generating the metrics serving certificate: %w", err)
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			_ = l.Close()
			return fmt.Errorf("loading the metrics serving certificate: %w", err)
		}
		l = tls.NewListener(l, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}})
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", handler)
	serve(ctx, l, mux)
	return nil
}

// authorized wraps h in controller-runtime's TokenReview and SubjectAccessReview filter.
func authorized(cfg *rest.Config, h http.Handler) (http.Handler, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the metrics authorization client: %w", err)
	}
	filter, err := filters.WithAuthenticationAndAuthorization(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("creating the metrics authorization filter: %w", err)
	}
	out, err := filter(ctrl.Log.WithName("metrics"), h)
	if err != nil {
		return nil, fmt.Errorf("creating the metrics authorization filter: %w", err)
	}
	return out, nil
}

// serveHealth serves /healthz on address (plain HTTP, for the kubelet) until ctx ends: 200 while
// check passes, 503 with its error otherwise.
func serveHealth(ctx context.Context, address string, check func() error) error {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("listening on %s for health probes: %w", address, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := check(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	serve(ctx, l, mux)
	return nil
}

// serve serves h on l until ctx ends, then shuts the server down (5 s for requests in flight).
func serve(ctx context.Context, l net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
}
