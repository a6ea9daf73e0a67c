package rigtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/vllmsim"
)

// BuildBerth builds the berth binary into the rig's work folder (once per rig) and returns
// its path.
func BuildBerth(r *rig.Rig) (string, error) {
	bin := filepath.Join(r.WorkDir(), "berth")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/berth-dev/berth/cmd/berth").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building berth: %w\n%s", err, out)
	}
	return bin, nil
}

// Scaler is `berth scaler` running as a rig component.
type Scaler struct {
	// GRPCAddress is where KEDA reaches it (a ScaledObject's scalerAddress).
	GRPCAddress string
	// MetricsURL serves its Prometheus metrics.
	MetricsURL string

	bin, health string
	args        []string
}

// Restart stops the scaler as a rollout does (SIGTERM, up to grace to finish) and starts it
// again with the same flags at the same addresses, waiting until it serves.
func (s *Scaler) Restart(ctx context.Context, r *rig.Rig, grace time.Duration) error {
	if err := r.StopComponent("berth-scaler", grace); err != nil {
		return err
	}
	return r.StartComponent(ctx, "berth-scaler", s.bin, s.args, nil, s.health)
}

// StartScaler runs `berth scaler` on loopback with extra flags and waits until it serves.
func StartScaler(ctx context.Context, r *rig.Rig, bin string, flags ...string) (*Scaler, error) {
	grpcPort, err := rig.FreePort()
	if err != nil {
		return nil, err
	}
	metricsPort, err := rig.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Scaler{GRPCAddress: "127.0.0.1:" + strconv.Itoa(grpcPort), MetricsURL: "http://127.0.0.1:" + strconv.Itoa(metricsPort) + "/metrics"}
	health := s.MetricsURL
	if slices.Contains(flags, "--metrics-secure") {
		// Secure metrics answer only authorized callers: the test waits for the endpoint.
		s.MetricsURL, health = "https://127.0.0.1:"+strconv.Itoa(metricsPort)+"/metrics", ""
	}
	// As the chart runs it: its own ServiceAccount, exactly config/rbac/scaler.yaml and
	// scaler-models.yaml (and scaler-warm-seats.yaml with --warm-seats).
	component := "scaler"
	if slices.Contains(flags, "--warm-seats") {
		component = "scaler-warm-seats"
	}
	kubeconfig, err := ComponentKubeconfig(ctx, r, component)
	if err != nil {
		return nil, err
	}
	args := append([]string{"scaler", "--kubeconfig=" + kubeconfig, "--grpc-address=" + s.GRPCAddress,
		"--metrics-address=127.0.0.1:" + strconv.Itoa(metricsPort)}, flags...)
	if err := r.StartComponent(ctx, "berth-scaler", bin, args, nil, health); err != nil {
		return nil, err
	}
	s.bin, s.args, s.health = bin, args, health
	return s, nil
}

// VLLMSim is `berth dev vllm-sim` following a Deployment's pods: it serves vLLM's metrics on
// each Running pod's loopback IP and spreads a request rate over them.
type VLLMSim struct {
	// Admin is the control endpoint (GET/PUT /load).
	Admin string
}

// StartVLLMSim runs the emulator for the pods matching selector in namespace, on port, with
// extra flags (model shape, initial rate).
func StartVLLMSim(ctx context.Context, r *rig.Rig, bin, namespace, selector string, port int, flags ...string) (*VLLMSim, error) {
	adminPort, err := rig.FreePort()
	if err != nil {
		return nil, err
	}
	v := &VLLMSim{Admin: "http://127.0.0.1:" + strconv.Itoa(adminPort)}
	args := append([]string{"dev", "vllm-sim", "--kubeconfig=" + r.Kubeconfig, "--namespace=" + namespace, "--selector=" + selector,
		"--port=" + strconv.Itoa(port), "--admin-address=127.0.0.1:" + strconv.Itoa(adminPort)}, flags...)
	if err := r.StartComponent(ctx, "vllm-sim-"+namespace, bin, args, nil, v.Admin+"/load"); err != nil {
		return nil, err
	}
	return v, nil
}

// Status is the emulator's fleet-wide load: rate, serving replicas, waiting and running requests.
func (v *VLLMSim) Status(ctx context.Context) (vllmsim.LoadStatus, error) {
	var st vllmsim.LoadStatus
	return st, v.get(ctx, "/load", &st)
}

// TTFT is the emulator's time-to-first-token histogram over every replica that ever served.
func (v *VLLMSim) TTFT(ctx context.Context) (vllmsim.Histogram, error) {
	var out map[string]vllmsim.Histogram
	err := v.get(ctx, "/latency", &out)
	return out["ttft"], err
}

// SetLoad sets the request rate and how requests arrive around it (vllmsim.Pattern* names),
// from seed.
func (v *VLLMSim) SetLoad(ctx context.Context, rate float64, pattern string, seed uint64) error {
	return v.putLoad(ctx, url.Values{"rate": {strconv.FormatFloat(rate, 'f', -1, 64)}, "pattern": {pattern}, "seed": {strconv.FormatUint(seed, 10)}})
}

// SetRate sets the request rate (requests per second) the emulator spreads over the replicas.
func (v *VLLMSim) SetRate(ctx context.Context, rate float64) error {
	return v.putLoad(ctx, url.Values{"rate": {strconv.FormatFloat(rate, 'f', -1, 64)}})
}

// putLoad is PUT /load with query q.
func (v *VLLMSim) putLoad(ctx context.Context, q url.Values) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, v.Admin+"/load?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("setting the vllm-sim load %s: %w", q.Encode(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("setting the vllm-sim load %s: %s", q.Encode(), resp.Status)
	}
	return nil
}

// get decodes the JSON the admin API answers on path into out.
func (v *VLLMSim) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.Admin+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reading the vllm-sim %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reading the vllm-sim %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("reading the vllm-sim %s: %w", path, err)
	}
	return nil
}

// Replay replays a request trace over the emulator's replicas from now (PUT /replay).
func (v *VLLMSim) Replay(ctx context.Context, trace []vllmsim.TraceRequest) (vllmsim.ReplayStatus, error) {
	var body bytes.Buffer
	if err := vllmsim.WriteAzureTrace(&body, trace); err != nil {
		return vllmsim.ReplayStatus{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, v.Admin+"/replay", &body)
	if err != nil {
		return vllmsim.ReplayStatus{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return vllmsim.ReplayStatus{}, fmt.Errorf("starting the vllm-sim replay: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return vllmsim.ReplayStatus{}, fmt.Errorf("starting the vllm-sim replay: %s: %s", resp.Status, msg)
	}
	var st vllmsim.ReplayStatus
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// ReplayReport is the replay's progress and its requests' exact TTFT quantiles (GET /replay).
func (v *VLLMSim) ReplayReport(ctx context.Context) (vllmsim.ReplayReport, error) {
	var r vllmsim.ReplayReport
	return r, v.get(ctx, "/replay", &r)
}

// StartAutoscalingRig brings up what berth's scaler is tested against end to end: the cluster
// with Karpenter's kwok provider (GPU instance types from instanceTypesFile), the real KEDA,
// the berth binary and `berth scaler` with flags. It returns the binary and the scaler.
func StartAutoscalingRig(ctx context.Context, r *rig.Rig, kwok rig.KwokOptions, instanceTypesFile string, flags ...string) (string, *Scaler, error) {
	if err := StartKarpenterCluster(ctx, r, kwok, instanceTypesFile); err != nil {
		return "", nil, err
	}
	if err := r.StartKEDA(ctx); err != nil {
		return "", nil, err
	}
	bin, err := BuildBerth(r)
	if err != nil {
		return "", nil, err
	}
	s, err := StartScaler(ctx, r, bin, flags...)
	return bin, s, err
}
