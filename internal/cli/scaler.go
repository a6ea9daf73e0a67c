package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/internal/certs"
	bmetrics "github.com/berth-dev/berth/internal/metrics"
	"github.com/berth-dev/berth/internal/seat"
	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/modelstore"
	"github.com/berth-dev/berth/scaler/pods"
	"github.com/berth-dev/berth/scaler/promsource"
	"github.com/berth-dev/berth/scaler/server"
	"github.com/berth-dev/berth/scaler/targets"
	"github.com/berth-dev/berth/scaler/warmseats"
)

type scalerFlags struct {
	grpcAddress, kubeconfig, namespace                string
	metrics                                           metricsFlags
	tls                                               certs.ServingFiles
	scrapeTimeout, freshFor, maxSampleAge, ttftWindow time.Duration
	streamInterval, shutdownGrace                     time.Duration
	headroom                                          float64
	log                                               logFlags
	warmSeats                                         bool
	warmSeatPull, warmSeatImage                       string
	prometheusCAFile                                  string
	modelNamespace                                    string
}

func newScalerCommand() *cobra.Command {
	var f scalerFlags
	cmd := &cobra.Command{
		Use:   "scaler",
		Short: "Run the KEDA external scaler that sizes vLLM Deployments from queue depth and KV-cache usage",
		Long: `Run berth's KEDA external scaler (KEDA's externalscaler.proto over gRPC).

A ScaledObject points an external (or external-push) trigger at this server; berth finds the
scale target's pods, reads vllm:num_requests_waiting, vllm:kv_cache_usage_perc and
vllm:time_to_first_token_seconds from each ready replica (source pods) or from Prometheus
(source prometheus), and answers with values whose AverageValue targets make the HPA land on
the replicas berth decided. Missing data is an error, never a zero. Trigger metadata and the
math: docs/scaler.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runScaler(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	f.log.bind(fl)
	fl.StringVar(&f.grpcAddress, "grpc-address", ":9090", "address of the gRPC ExternalScaler and health services")
	f.metrics.bind(fl, "metrics-address", ":8080")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses $KUBECONFIG or in-cluster config")
	fl.StringVar(&f.namespace, "namespace", "", "watch pods in this namespace only (default all namespaces)")
	fl.StringVar(&f.tls.CertFile, "tls-cert-file", "", "serving certificate (PEM); enables TLS (KEDA trigger enableTLS: true)")
	fl.StringVar(&f.tls.KeyFile, "tls-key-file", "", "serving certificate's private key (PEM)")
	fl.StringVar(&f.tls.ClientCAFile, "tls-client-ca-file", "", "CA that signs KEDA's client certificate; enables mutual TLS")
	fl.StringVar(&f.prometheusCAFile, "prometheus-ca-file", "", "PEM file of the certificate authorities trusted for HTTPS Prometheus servers (source prometheus, demandQuery), e.g. mounted with scaler.extraVolumes; empty: the system's")
	fl.DurationVar(&f.scrapeTimeout, "scrape-timeout", 2*time.Second, "timeout of one replica scrape (source pods) or one evaluation's queries (source prometheus)")
	fl.DurationVar(&f.freshFor, "scrape-reuse", 2*time.Second, "how long a scrape's outcome is reused (one KEDA poll = GetMetrics + IsActive; several ScaledObjects on the same pods)")
	fl.DurationVar(&f.maxSampleAge, "max-sample-age", 45*time.Second, "staleness bound: a replica whose scrape fails counts with its last sample until it is this old")
	fl.DurationVar(&f.ttftWindow, "ttft-window", time.Minute, "window of the p95 time to first token")
	fl.DurationVar(&f.streamInterval, "stream-interval", time.Second, "how often StreamIsActive (external-push triggers) re-evaluates")
	fl.DurationVar(&f.shutdownGrace, "shutdown-grace", 10*time.Second, "how long in-flight calls may finish on SIGTERM")
	fl.Float64Var(&f.headroom, "scale-down-headroom", scaler.DefaultPolicy.ScaleDownHeadroom, "fraction (0-1] of each target the remaining replicas may reach after a scale-down")
	fl.BoolVar(&f.warmSeats, "warm-seats", false, "keep warm seats for ScaledObjects whose trigger sets warmSeats (needs RBAC to create and delete pods and to read Deployments and StatefulSets; docs/scaler.md#warm-seats)")
	fl.StringVar(&f.warmSeatPull, "warm-seat-pull", string(warmseats.PullImageVolume), "how a warm seat pulls the serving images: image-volume (Kubernetes 1.35+, containerd 2.1+) or init-container (runs each image's /bin/sh -c true)")
	fl.StringVar(&f.modelNamespace, "model-namespace", os.Getenv("POD_NAMESPACE"), "namespace whose ConfigMaps keep the fleet models across restarts and between the scaler's replicas (needs a Role there to get, list, create, update and delete ConfigMaps; docs/scaler.md#the-model-across-restarts); empty: kept in memory only (default $POD_NAMESPACE)")
	fl.StringVar(&f.warmSeatImage, "warm-seat-image", seat.DefaultImage, "the warm seats' own container image (a pause image)")
	return cmd
}

// newScalerEngine builds the scaler's engine: a slim pod cache, a watch on ScaledObjects, the
// API client for /scale, Karpenter's pod events, and the background reads of the replicas (started here,
// until ctx ends).
func newScalerEngine(ctx context.Context, cfg *rest.Config, f scalerFlags) (*server.Engine, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	copts := cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Transform: targets.SlimPod}}}
	if f.namespace != "" {
		copts.DefaultNamespaces = map[string]cache.Config{f.namespace: {}}
	}
	podCache, err := cache.New(cfg, copts)
	if err != nil {
		return nil, fmt.Errorf("creating the pod cache: %w", err)
	}
	api, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the API client: %w", err)
	}
	go func() { _ = podCache.Start(ctx) }()
	if !podCache.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("pod cache did not sync")
	}
	// The informer starts on the first List; do it now so the first KEDA call is not slow.
	if err := podCache.List(ctx, &corev1.PodList{}, client.Limit(1)); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	observe := func(src scaler.Source) func(time.Duration, string) {
		return func(d time.Duration, reason string) { server.ObserveScrape(src, d, reason) }
	}
	// Karpenter's pod events tell an unschedulable replica with a node on its way from one
	// with none coming (which then never holds a scale-up).
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the events client: %w", err)
	}
	verdicts := targets.NewKarpenterVerdicts(cs, f.namespace)
	go verdicts.Run(ctx)
	rootCAs, err := loadCAFile(f.prometheusCAFile)
	if err != nil {
		return nil, fmt.Errorf("--prometheus-ca-file: %w", err)
	}
	// ScaledObjects from a watch: a retarget (blue to green) is resolved as soon as it is made.
	resolver := &targets.Targets{Pods: podCache, API: api, Capacity: verdicts}
	if resolver.ScaledObjects, err = targets.WatchScaledObjects(ctx, cfg, f.namespace, api, 10*time.Second); err != nil {
		ctrl.Log.WithName("scaler").Error(err, "ScaledObjects are read through the API and each kept for 30s: a retarget is seen up to 30s late (a restart watches them once the scaler may, or once KEDA's CRD is installed)")
	}
	eng := &server.Engine{
		Resolver:   resolver,
		Pods:       pods.New(pods.Options{Timeout: f.scrapeTimeout, FreshFor: f.freshFor, MaxAge: f.maxSampleAge, TTFTWindow: f.ttftWindow, Observe: observe(scaler.SourcePods)}),
		Prometheus: promsource.New(promsource.Options{RootCAs: rootCAs, Timeout: f.scrapeTimeout, FreshFor: f.freshFor, MaxAge: f.maxSampleAge, TTFTWindow: f.ttftWindow, Observe: observe(scaler.SourcePrometheus)}),
		Policy:     scaler.Policy{ScaleDownHeadroom: f.headroom},
	}
	if f.modelNamespace != "" {
		eng.ModelStore = &modelstore.Store{Client: api, Namespace: f.modelNamespace}
	} else {
		ctrl.Log.WithName("scaler").Info("fleet models are kept in memory only: a restart learns every fleet again (set --model-namespace)")
	}
	// Replicas are read in the background at their ScaledObject's cadence; KEDA's calls are
	// answered from memory.
	go eng.Pods.Run(ctx, 100*time.Millisecond)
	if f.warmSeats {
		eng.Seats = &warmseats.Wants{}
		keeper := &warmseats.Keeper{Client: api, Pods: podCache, API: api, ScaledObjects: resolver.ScaledObjects, Wants: eng.Seats, PauseImage: f.warmSeatImage,
			Pull: warmseats.Pull(f.warmSeatPull), Log: ctrl.Log.WithName("warm-seats")}
		go keeper.Run(ctx)
	}
	return eng, nil
}

func runScaler(ctx context.Context, f scalerFlags) error {
	if err := f.log.setup(); err != nil {
		return err
	}
	log := ctrl.Log.WithName("scaler")
	if f.headroom <= 0 || f.headroom > 1 {
		return fmt.Errorf("--scale-down-headroom %v: want a fraction in (0, 1]", f.headroom)
	}
	if !slices.Contains(warmseats.Pulls(), warmseats.Pull(f.warmSeatPull)) {
		return fmt.Errorf("--warm-seat-pull %q: want %s or %s", f.warmSeatPull, warmseats.PullImageVolume, warmseats.PullInitContainer)
	}
	cfg, err := loadConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	eng, err := newScalerEngine(ctx, cfg, f)
	if err != nil {
		return err
	}
	var tlsCfg *tls.Config
	if f.tls.Enabled() {
		if tlsCfg, err = f.tls.Config(); err != nil {
			return err
		}
	}
	// The server stops serving once the models are written (stopModels): a replica KEDA turns
	// to while this one stops reads what it learned to the end.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	gs, hs := server.NewGRPCServer(&server.Server{Engine: eng, StreamInterval: f.streamInterval, Stopping: serveCtx.Done()}, tlsCfg)
	lis, err := net.Listen("tcp", f.grpcAddress)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", f.grpcAddress, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(server.Collectors()...)
	reg.MustRegister(warmseats.Collectors()...)
	reg.MustRegister(bmetrics.BuildInfo("scaler"))
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if f.metrics.address != "0" {
		if err := serveMetrics(ctx, f.metrics, reg, cfg); err != nil {
			return err
		}
	}
	ticking := make(chan struct{})
	go func() { // forget pods and ScaledObjects that went away; write the models that learned
		defer close(ticking)
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		var said saidOnce
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				eng.Pods.Forget(10 * time.Minute)
				eng.ExpireSeries(10 * time.Minute)
				keepModels(ctx, eng, i%60 == 0, &said)
			}
		}
	}()
	go stopModels(ctx, eng, ticking, stopServing)
	log.Info("serving KEDA's ExternalScaler", "address", lis.Addr().String(), "tls", f.tls.Enabled(), "mutualTLS", f.tls.ClientCAFile != "")
	return server.Serve(serveCtx, gs, hs, lis, f.shutdownGrace)
}

// finalSaveTimeout bounds the models' writes at a stop (the chart's grace period is 30 s, of
// which the gRPC drain takes --shutdown-grace).
const finalSaveTimeout = 10 * time.Second

// stopModels waits for ctx to end (SIGTERM) and the minute's writes to stop (ticking closed:
// one in flight would meet the stop's), writes every fleet model that learned since its last
// write while the scaler still answers KEDA — so the replica KEDA turns to next, or this one
// started again, goes on from where it stopped — and then stops the server. A server that
// failed on its own (its port taken) stops without it.
func stopModels(ctx context.Context, eng *server.Engine, ticking <-chan struct{}, stopServing context.CancelFunc) {
	defer stopServing()
	<-ctx.Done()
	<-ticking
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalSaveTimeout)
	defer cancel()
	if err := eng.SaveModels(sctx, true); err != nil {
		ctrl.Log.WithName("scaler").Error(err, "fleet models not written at the stop: the next scaler learns them again")
	}
}

// keepModels writes the fleet models that are due, and with collect deletes those nobody
// wrote for server.KeepModelsFor (of ScaledObjects gone).
func keepModels(ctx context.Context, eng *server.Engine, collect bool, said *saidOnce) {
	log := ctrl.Log.WithName("scaler")
	if err := eng.SaveModels(ctx, false); err != nil && ctx.Err() == nil && said.first(err, time.Now()) {
		log.Error(err, "fleet models not written (tried again every minute; this error is logged again in an hour, or when it changes)")
	}
	store, ok := eng.ModelStore.(*modelstore.Store)
	if !collect || !ok {
		return
	}
	if n, err := store.Collect(ctx, server.KeepModelsFor); err != nil && ctx.Err() == nil {
		server.ModelStoreFailed("collect")
		log.Error(err, "old fleet models not deleted")
	} else if n > 0 {
		log.Info("deleted fleet models nobody wrote for a while", "deleted", n, "after", server.KeepModelsFor)
	}
}

// loadCAFile reads a PEM file of certificate authorities (nil for no file).
func loadCAFile(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// saidOnce says whether an error is worth logging: the first, one that differs from the last
// logged, or the same an hour later (a store refused every minute is one line an hour, its
// metric counts every failure).
type saidOnce struct {
	msg string
	at  time.Time
}

func (s *saidOnce) first(err error, now time.Time) bool {
	if err.Error() == s.msg && now.Sub(s.at) < time.Hour {
		return false
	}
	s.msg, s.at = err.Error(), now
	return true
}
