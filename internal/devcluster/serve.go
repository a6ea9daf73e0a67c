package devcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/config"
	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/internal/gpu"
	"github.com/berth-dev/berth/internal/rig"
)

// Options configure the dev cluster.
type Options struct {
	// StateDir holds state.json, the rig's work folder and logs. Removed by Down.
	StateDir string
	// ToolsDir is the folder made by hack/build-tools.sh.
	ToolsDir string
	// Kubeconfig is where the admin kubeconfig is written; <StateDir>/kubeconfig when empty.
	Kubeconfig string
	// NodeReadyDelay is how long new nodes take to become Ready (0: immediately).
	NodeReadyDelay time.Duration
	// GenericWorkload turns on Kubernetes' native gang scheduling in the control plane.
	GenericWorkload bool
	// Kueue also runs Kueue (with the ProvisioningRequest API, which berth then serves).
	Kueue bool
	// DRA runs the rig's DRA mode: GPU nodes publish their GPUs as gpu.nvidia.com
	// ResourceSlices and Karpenter sizes pods' resource claims against them.
	DRA bool
	// BerthBinary is the berth executable run for berth's own components.
	BerthBinary string
	// Logf reports progress.
	Logf func(format string, args ...any)
}

func (o *Options) defaults() {
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir()
	}
	if o.Kubeconfig == "" {
		o.Kubeconfig = filepath.Join(o.StateDir, "kubeconfig")
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// Serve brings the whole dev cluster up in this process, records it in state.json and holds it
// until ctx ends; then it stops every component and removes the state folder. It is what the
// background process started by Up runs.
func Serve(ctx context.Context, o Options) error {
	o.defaults()
	start := time.Now()
	st := State{PID: os.Getpid(), StartedAt: start, Kubeconfig: o.Kubeconfig, Endpoints: map[string]string{}}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return fmt.Errorf("creating state folder: %w", err)
	}
	if err := writeState(o.StateDir, st); err != nil {
		return err
	}
	r, err := bringUp(ctx, o, &st)
	if r != nil {
		st.LogDir = r.LogDir()
		st.Components = components(r)
	}
	if err != nil {
		st.Error = err.Error()
		_ = writeState(o.StateDir, st)
		if r != nil {
			_ = r.Stop()
		}
		return err
	}
	st.Ready = true
	st.ReadyAfter = time.Since(start).Round(100 * time.Millisecond).String()
	if err := writeState(o.StateDir, st); err != nil {
		_ = r.Stop()
		return err
	}
	o.Logf("dev cluster ready after %s", st.ReadyAfter)

	// Hold the cluster; report a component that dies, but keep the rest up for inspection.
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	reported := false
	for {
		select {
		case <-ctx.Done():
			o.Logf("stopping dev cluster")
			_ = r.Stop()
			if err := os.RemoveAll(o.StateDir); err != nil {
				return fmt.Errorf("removing state folder: %w", err)
			}
			return nil
		case <-tick.C:
			if _, waiting := st.Pending[pendingKEDA]; waiting && rig.KEDABuilt(o.ToolsDir) {
				startPendingKEDA(ctx, o, r, &st)
			}
			if name, err, dead := r.Exited(); dead && !reported {
				o.Logf("component %s exited: %v (see %s)", name, err, r.LogDir())
				reported = true
			}
		}
	}
}

// pendingKEDA names KEDA in State.Pending.
const pendingKEDA = "keda"

// startPendingKEDA starts KEDA once its binaries exist and records it in the state; a start
// that fails is recorded as the reason it is still pending (and retried on the next tick).
func startPendingKEDA(ctx context.Context, o Options, r *rig.Rig, st *State) {
	o.Logf("KEDA's binaries are built: starting KEDA")
	if err := r.StartKEDA(ctx); err != nil {
		st.Pending[pendingKEDA] = "starting failed, retrying: " + err.Error()
		o.Logf("starting KEDA: %v", err)
	} else {
		delete(st.Pending, pendingKEDA)
		st.Components = components(r)
		o.Logf("KEDA started")
	}
	if err := writeState(o.StateDir, *st); err != nil {
		o.Logf("recording KEDA's start: %v", err)
	}
}

func components(r *rig.Rig) []ComponentState {
	var out []ComponentState
	for _, c := range r.Components() {
		out = append(out, ComponentState{Name: c.Name, PID: c.PID, Log: c.LogPath})
	}
	return out
}

// bringUp starts every component in dependency order.
func bringUp(ctx context.Context, o Options, st *State) (*rig.Rig, error) {
	r, err := rig.Start(ctx, rig.Options{ToolsDir: o.ToolsDir, WorkDir: filepath.Join(o.StateDir, "rig"), Logf: o.Logf, GenericWorkload: o.GenericWorkload})
	if err != nil {
		return nil, err
	}
	st.APIServer = r.APIServerURL
	st.PodCIDR = r.PodCIDR()
	data, err := os.ReadFile(r.Kubeconfig)
	if err != nil {
		return r, fmt.Errorf("reading rig kubeconfig: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(o.Kubeconfig), 0o755); err != nil {
		return r, fmt.Errorf("creating kubeconfig folder: %w", err)
	}
	if err := os.WriteFile(o.Kubeconfig, data, 0o600); err != nil {
		return r, fmt.Errorf("writing kubeconfig: %w", err)
	}
	crds, err := config.CRDs()
	if err != nil {
		return r, err
	}
	if err := r.InstallCRDs(ctx, crds); err != nil {
		return r, err
	}
	if err := r.StartControllerManager(ctx); err != nil {
		return r, err
	}
	if err := r.StartScheduler(ctx); err != nil {
		return r, err
	}
	if err := r.StartKwok(ctx, rig.KwokOptions{NodeReadyDelay: o.NodeReadyDelay}); err != nil {
		return r, err
	}
	types, err := gpu.KwokInstanceTypesJSON()
	if err != nil {
		return r, err
	}
	typesFile := filepath.Join(r.WorkDir(), "instance-types.json")
	if err := os.WriteFile(typesFile, types, 0o644); err != nil {
		return r, fmt.Errorf("writing instance types: %w", err)
	}
	if o.DRA {
		if err := r.StartDRADriver(ctx, typesFile); err != nil {
			return r, err
		}
	}
	if err := r.StartKarpenter(ctx, rig.KarpenterOptions{InstanceTypesFile: typesFile, DRA: o.DRA}); err != nil {
		return r, err
	}
	if err := r.InstallDevNodePools(ctx); err != nil {
		return r, err
	}
	if rig.KEDABuilt(o.ToolsDir) {
		if err := r.StartKEDA(ctx); err != nil {
			return r, err
		}
	} else {
		// make demo builds KEDA (~15 min cold on 2 cores) while the first scenes play: KEDA
		// starts once its binaries exist (Serve's loop), and the autoscale scene waits for it.
		// Its CRDs now (they come with the tools' assets): ScaledObjects can be read before it runs.
		if err := r.InstallCRDsFromDir(ctx, filepath.Join(o.ToolsDir, "crds", "keda")); err != nil {
			return r, err
		}
		st.Pending = map[string]string{pendingKEDA: "its binaries are not built yet (hack/build-tools.sh keda-operator keda-adapter); it starts once they are"}
		o.Logf("KEDA is not built yet: the cluster comes up without it and starts it once hack/build-tools.sh has built it")
	}
	// Multi-node inference (the lws scene): the LeaderWorkerSet controller, when built.
	if rig.LWSBuilt(o.ToolsDir) {
		if err := r.StartLWS(ctx); err != nil {
			return r, err
		}
	} else {
		o.Logf("the LeaderWorkerSet controller is not built (hack/build-tools.sh lws-controller): the cluster comes up without it")
	}
	// Before berth: berth serves ProvisioningRequests where their API is served when it starts.
	if o.Kueue {
		if err := r.StartKueue(ctx); err != nil {
			return r, err
		}
	}
	if err := startBerth(ctx, o, r, st); err != nil {
		return r, err
	}
	return r, startInference(ctx, o, r, st)
}

// startBerth runs berth's own components against the rig as separate processes, as in a real
// cluster.
func startBerth(ctx context.Context, o Options, r *rig.Rig, st *State) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	metrics := "127.0.0.1:" + strconv.Itoa(ports[0])
	health := "127.0.0.1:" + strconv.Itoa(ports[1])
	// The pod-gate webhook listens on loopback; the apiserver reaches it by URL.
	url := fmt.Sprintf("https://localhost:%d%s", ports[2], gate.Path)
	adapters := gate.Adapters()
	names := make([]string, len(adapters))
	for i, a := range adapters {
		names[i] = a.Name // the webhook calls the controller for every adapter it registers
	}
	if err := r.Client.Create(ctx, gate.Configuration(admissionregistrationv1.WebhookClientConfig{URL: &url}, adapters)); err != nil {
		return fmt.Errorf("installing webhook configuration: %w", err)
	}
	if err := r.StartComponent(ctx, "berth-controller", o.BerthBinary, []string{
		"controller", "--kubeconfig=" + r.Kubeconfig, "--leader-elect=false", "--development",
		"--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + health,
		"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(ports[2]),
		"--webhook-cert-dir=" + filepath.Join(r.WorkDir(), "webhook-certs"), "--webhook-secret-namespace=" + rig.BerthNamespace,
		"--seat-namespace=" + rig.BerthNamespace,
		"--webhook-hosts=localhost", "--adapters=" + strings.Join(names, ","),
	}, nil, "http://"+health+"/readyz"); err != nil {
		return err
	}
	st.Endpoints["controller-metrics"] = "http://" + metrics + "/metrics"
	return nil
}

// VLLMSimPort is where the dev cluster's vLLM emulator serves vLLM's metrics: every Running pod
// labelled berthv1alpha1.VLLMSimLabel=true, in any namespace, on <podIP>:VLLMSimPort.
const VLLMSimPort = 8000

// EndpointsConfigMap (in kube-system) publishes the dev cluster's own endpoints to clients such
// as the demo: scaler-grpc, scaler-metrics, vllm-sim-admin, controller-metrics.
const EndpointsConfigMap = "berth-dev-endpoints"

// startInference runs berth's KEDA scaler and the vLLM emulator that stands in for the GPU
// inference servers of labelled pods.
func startInference(ctx context.Context, o Options, r *rig.Rig, st *State) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	grpcAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	metrics := "127.0.0.1:" + strconv.Itoa(ports[1])
	admin := "127.0.0.1:" + strconv.Itoa(ports[2])
	if err := r.StartComponent(ctx, "berth-scaler", o.BerthBinary, []string{
		"scaler", "--kubeconfig=" + r.Kubeconfig, "--grpc-address=" + grpcAddr, "--metrics-address=" + metrics,
	}, nil, "http://"+metrics+"/metrics"); err != nil {
		return err
	}
	if err := r.StartComponent(ctx, "vllm-sim", o.BerthBinary, []string{
		"dev", "vllm-sim", "--kubeconfig=" + r.Kubeconfig, "--selector=" + berthv1alpha1.VLLMSimLabel + "=true", "--port=" + strconv.Itoa(VLLMSimPort),
		"--admin-address=" + admin, "--max-num-seqs=8", "--service-time=2s", "--kv-blocks=1000", "--kv-blocks-per-seq=110",
	}, nil, "http://"+admin+"/load"); err != nil {
		return err
	}
	st.Endpoints["scaler-grpc"] = grpcAddr
	st.Endpoints["scaler-metrics"] = "http://" + metrics + "/metrics"
	st.Endpoints["vllm-sim-admin"] = "http://" + admin + "/load"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: EndpointsConfigMap}, Data: st.Endpoints}
	if err := r.Client.Create(ctx, cm); err != nil {
		return fmt.Errorf("publishing the dev cluster's endpoints: %w", err)
	}
	return nil
}

func freePorts(n int) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for len(out) < n {
		p, err := rig.FreePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}
