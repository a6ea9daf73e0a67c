package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/berth-dev/berth/internal/devcluster"
	"github.com/berth-dev/berth/internal/vllmsim"
)

type vllmSimFlags struct {
	listen     []string
	admin      string
	rate       float64
	cfg        vllmsim.Config
	kubeconfig string
	namespace  string
	selector   string
	port       int
	pool       string
	pattern    string
	seed       uint64
	profile    string
	drain      time.Duration
}

func newVLLMSimCommand() *cobra.Command {
	var f vllmSimFlags
	cmd := &cobra.Command{
		Use:   "vllm-sim",
		Short: "Emulate vLLM servers: queueing, KV cache and vLLM's Prometheus metrics, on loopback",
		Long: `Emulate vLLM inference servers for tests and demos. Each replica queues requests FIFO,
runs at most --max-num-seqs at once when --kv-blocks-per-seq blocks of --kv-blocks are free,
finishes each after --service-time, and serves vLLM's real metrics on /metrics (plus /health
and /v1/models). Requests arrive at --rate per second, spread round-robin over the replicas.

With --profile each replica runs vLLM's continuous-batching loop token by token as a given GPU
serving a given model (l4-llama-3.1-8b, h100x2-llama-3.3-70b-fp8): every step's time follows
its batch (reading the weights and the KV cache, or computing a prefill chunk), prompts are
prefilled in chunks within vLLM's token budget, KV grows with every token and the newest
sequence is preempted when it runs out, and request lengths are drawn like Azure's LLM
inference trace (chat). It also reports vllm:inter_token_latency_seconds and
vllm:request_time_per_output_token_seconds.

Replicas listen on every --listen address or, with --selector, on <podIP>:--port of every
Running pod that matches (the dev cluster gives its fake pods loopback IPs, 127.<n>.x.y), so a
Deployment scaled by berth's scaler gains and loses emulated servers as its pods come and go.

Change the load while it runs on the admin address:
  curl -X PUT 'http://127.0.0.1:8099/load?rate=12.5'
  curl -X PUT 'http://127.0.0.1:8099/load?rate=6&pattern=bursty&seed=7'
  curl http://127.0.0.1:8099/load
  curl http://127.0.0.1:8099/latency     # time to first token over every replica that served

With --inference-pool an endpoint picker (llm-d's, with flow control) stands in front: while
no replica serves, requests wait in its queue instead of being dropped, and
http://127.0.0.1:8099/metrics serves llm_d_epp_flow_control_queue_size for a Prometheus to
scrape — demand that exists at zero replicas.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runVLLMSim(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.listen, "listen", []string{"127.0.0.1:8000"}, "address a replica listens on (repeatable; ignored with --selector)")
	fl.StringVar(&f.admin, "admin-address", "127.0.0.1:8099", "address of the control API (GET/PUT /load)")
	fl.StringVar(&f.cfg.Model, "model", vllmsim.DefaultModel, "served model name")
	fl.Float64Var(&f.rate, "rate", 0, "initial arrival rate in requests per second over all replicas")
	fl.StringVar(&f.pattern, "pattern", string(vllmsim.PatternSteady), "how requests arrive around the rate: steady (exact), poisson, or bursty (Poisson bursts of ~10 s at 4× the rate, lulls of ~30 s)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the poisson and bursty patterns and of --profile's request lengths (the same seed, the same arrivals)")
	fl.StringVar(&f.profile, "profile", "", "run each replica token by token as a GPU serving a model: "+strings.Join(vllmsim.ProfileNames(), " or ")+
		" (step time from the batch, chunked prefill, growing KV with preemption, request lengths of Azure's LLM trace); --model, --max-num-seqs, --kv-blocks and --engines still apply when given")
	fl.DurationVar(&f.drain, "drain-timeout", 0, "a replica whose pod goes away (deleted, scaled down) takes no new request and finishes what it holds for up to this long, as vLLM does on SIGTERM within terminationGracePeriodSeconds; what is left is lost (GET /load counts it). 0: lost at once")
	fl.IntVar(&f.cfg.MaxNumSeqs, "max-num-seqs", vllmsim.DefaultMaxNumSeqs, "sequences running at once per engine")
	fl.IntVar(&f.cfg.KVBlocksTotal, "kv-blocks", vllmsim.DefaultKVBlocksTotal, "KV-cache blocks per engine")
	fl.IntVar(&f.cfg.KVBlocksPerSeq, "kv-blocks-per-seq", vllmsim.DefaultKVBlocksPerSeq, "KV-cache blocks a running sequence holds")
	fl.DurationVar(&f.cfg.ServiceTime, "service-time", vllmsim.DefaultServiceTime, "how long a sequence runs once admitted")
	fl.DurationVar(&f.cfg.PrefillTime, "prefill-time", vllmsim.DefaultPrefillTime, "time from admission to the first token")
	fl.IntVar(&f.cfg.Engines, "engines", vllmsim.DefaultEngines, "engine cores per replica (series engine=\"0\", \"1\", ...)")
	fl.BoolVar(&f.cfg.KVGrowth, "kv-growth", false, "grow each sequence's KV from its prompt's share to --kv-blocks-per-seq as it decodes, preempting the newest sequence when the cache runs out (vllm:num_preemptions_total)")
	fl.BoolVar(&f.cfg.LegacyKVName, "legacy-kv-metric", false, "report vllm:gpu_cache_usage_perc (vLLM before 0.9) instead of vllm:kv_cache_usage_perc")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for --selector (default: the dev cluster's if it is up, else the usual lookup)")
	fl.StringVar(&f.namespace, "namespace", "", "namespace of the pods to follow (default all)")
	fl.StringVar(&f.selector, "selector", "", "label selector of the pods to follow, e.g. app=vllm")
	fl.IntVar(&f.port, "port", 8000, "port to serve on at each followed pod's IP")
	fl.StringVar(&f.pool, "inference-pool", "", "put an endpoint picker with flow control in front, for this InferencePool: requests wait in its queue while no replica serves, and the admin address serves its llm_d_epp_* metrics on /metrics (scale from zero with demandPreset: endpoint-picker)")
	return cmd
}

func runVLLMSim(cmd *cobra.Command, f vllmSimFlags) error {
	ctx := cmd.Context()
	logf := func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
	}
	if f.port < 1 || f.port > 65535 {
		return fmt.Errorf("--port must be between 1 and 65535, got %d", f.port)
	}
	pattern, err := vllmsim.ParsePattern(f.pattern)
	if err != nil {
		return fmt.Errorf("--pattern: %w", err)
	}
	if f.cfg, err = withProfile(cmd, f.cfg, f.profile); err != nil {
		return err
	}
	f.cfg.Seed = f.seed
	fleet, err := vllmsim.NewFleet(vllmsim.FleetOptions{Config: f.cfg, Rate: f.rate, Logf: logf, InferencePool: f.pool, DrainTimeout: f.drain})
	if err != nil {
		return err
	}
	fleet.Load().SetPattern(pattern, f.seed)
	var client kubernetes.Interface
	if f.selector != "" {
		if client, err = vllmSimClient(cmd, f.kubeconfig); err != nil {
			return err
		}
	}

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", f.admin)
	if err != nil {
		return fmt.Errorf("--admin-address: %w", err)
	}
	admin := &http.Server{Handler: fleet.AdminHandler(), ReadHeaderTimeout: 10 * time.Second}
	adminDone := make(chan error, 1)
	go func() { adminDone <- admin.Serve(ln) }()
	logf("vLLM emulator control API on http://%s/load (rate %g/s)", ln.Addr(), f.rate)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// watchDone closes when the pod watch ends; its error, if any, ends the run through cancel.
	watchDone := make(chan struct{})
	if client == nil {
		close(watchDone)
		if err := fleet.SetAddresses(ctx, f.listen); err != nil {
			cancel(err)
		}
	} else {
		logf("following pods %q in namespace %q on port %d", f.selector, f.namespace, f.port)
		go func() {
			err := vllmsim.WatchPods(ctx, client, f.namespace, f.selector, f.port, func(addrs []string) {
				if err := fleet.SetAddresses(ctx, addrs); err != nil {
					logf("%v", err) // one pod we cannot serve must not stop the others
				}
			})
			if err != nil {
				cancel(err)
			}
			close(watchDone)
		}()
	}
	go func() {
		if err := <-adminDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
			cancel(fmt.Errorf("control API: %w", err))
		}
	}()

	fleet.Run(ctx) // until SIGINT/SIGTERM or a failure above
	var runErr error
	if cmd.Context().Err() == nil {
		runErr = context.Cause(ctx) // a failure, not a signal
	}
	logf("shutting down the vLLM emulator")
	shutdown, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	err = errors.Join(runErr, fleet.Close(shutdown), admin.Shutdown(shutdown))
	<-watchDone
	return err
}

// withProfile is cfg replaced by profile's parameters (none: cfg), keeping the flags the user
// set that a profile also sets.
func withProfile(cmd *cobra.Command, cfg vllmsim.Config, profile string) (vllmsim.Config, error) {
	if profile == "" {
		return cfg, nil
	}
	p, err := vllmsim.Profile(profile)
	if err != nil {
		return cfg, fmt.Errorf("--profile: %w", err)
	}
	fl := cmd.Flags()
	for _, o := range []struct {
		flag     string
		from, to *int
	}{{"max-num-seqs", &cfg.MaxNumSeqs, &p.MaxNumSeqs}, {"kv-blocks", &cfg.KVBlocksTotal, &p.KVBlocksTotal}, {"engines", &cfg.Engines, &p.Engines}} {
		if fl.Changed(o.flag) {
			*o.to = *o.from
		}
	}
	if fl.Changed("model") {
		p.Model = cfg.Model
	}
	p.LegacyKVName = cfg.LegacyKVName
	for _, ignored := range []string{"kv-blocks-per-seq", "service-time", "prefill-time", "kv-growth"} {
		if fl.Changed(ignored) {
			return cfg, fmt.Errorf("--%s does not apply with --profile (the token model derives it from the batch)", ignored)
		}
	}
	return p, nil
}

// vllmSimClient connects to the cluster whose pods are followed: --kubeconfig if given, else
// the dev cluster's admin kubeconfig when one is up in --state-dir, else the usual lookup.
func vllmSimClient(cmd *cobra.Command, kubeconfig string) (kubernetes.Interface, error) {
	if kubeconfig == "" {
		if dir := cmd.Flag("state-dir"); dir != nil {
			if st, ok, err := devcluster.ReadState(dir.Value.String()); err == nil && ok && st.Ready {
				kubeconfig = st.Kubeconfig
			}
		}
	}
	cfg, err := loadConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	return client, nil
}
