package rig

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// StartScheduler runs kube-scheduler against the rig and waits for its health check.
func (r *Rig) StartScheduler(ctx context.Context) error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	p, err := r.start(BinKubeScheduler, r.bin(BinKubeScheduler), append([]string{
		"--kubeconfig=" + r.Kubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port), "--v=1",
	}, r.opts.featureGateArgs()...), nil)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	return r.waitHealthy(ctx, p, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz")
}

// StartControllerManager runs kube-controller-manager (node lifecycle, ReplicaSets, Jobs, HPA,
// garbage collection…) against the rig. Its node-lifecycle controller is what removes the
// not-ready taint from kwok nodes once they report Ready.
func (r *Rig) StartControllerManager(ctx context.Context) error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	p, err := r.start(BinKubeControllerManager, r.bin(BinKubeControllerManager), append([]string{
		"--kubeconfig=" + r.Kubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--controllers=*,-serviceaccount-token",
		"--root-ca-file=" + r.pki.path("ca.crt"),
		"--horizontal-pod-autoscaler-sync-period=5s",
		// kwok sends no node heartbeat while a node boots (the node-ready delay, ~70 s for a GPU
		// node) and heartbeats Ready nodes every 20-45 s; a shorter grace would mark booting
		// nodes Unknown (restarting kwok's boot timer) and flap Ready ones.
		"--node-monitor-grace-period=3m", "--v=1",
	}, r.opts.featureGateArgs()...), nil)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	return r.waitHealthy(ctx, p, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz")
}

// KwokOptions configure the fake kubelets.
type KwokOptions struct {
	// NodeReadyDelay is how long a new node takes to report Ready. Zero is immediate; about 70 s
	// looks like a real GPU node (launch to Ready measured for g4dn in
	// awslabs/node-latency-for-k8s).
	NodeReadyDelay time.Duration
}

// StartKwok runs kwok, managing nodes annotated kwok.x-k8s.io/node=fake, with the Stage configs
// from the tools folder and the node-ready delay applied to node initialisation.
func (r *Rig) StartKwok(ctx context.Context, o KwokOptions) error {
	stages, err := r.kwokStages(o)
	if err != nil {
		return err
	}
	cfg := filepath.Join(r.opts.WorkDir, "kwok-stages.yaml")
	if err := os.WriteFile(cfg, stages, 0o644); err != nil {
		return fmt.Errorf("rig: writing kwok stages: %w", err)
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	p, err := r.start(BinKwok, r.bin(BinKwok), []string{
		"--kubeconfig=" + r.Kubeconfig, "--config=" + cfg,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=" + berthv1alpha1.KwokNodeAnnotation + "=fake",
		"--cidr=" + r.PodCIDR(), "--node-ip=127.0.0.2",
		"--server-address=127.0.0.1:" + strconv.Itoa(port),
	}, nil)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	return r.waitHealthy(ctx, p, "http://127.0.0.1:"+strconv.Itoa(port)+"/healthz")
}

// kwokStages joins the Stage files as YAML documents and sets the node-initialize delay.
func (r *Rig) kwokStages(o KwokOptions) ([]byte, error) {
	dir := filepath.Join(r.opts.ToolsDir, "kwok-stages")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("rig: no kwok Stage files in %s (rebuild the tools folder with hack/build-tools.sh)", dir)
	}
	sort.Strings(files)
	var out bytes.Buffer
	for _, f := range files {
		if replacedUpstreamStages[filepath.Base(f)] {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("rig: reading %s: %w", f, err)
		}
		if filepath.Base(f) == "node-initialize.yaml" && o.NodeReadyDelay > 0 {
			if data, err = withStageDelay(data, o.NodeReadyDelay); err != nil {
				return nil, fmt.Errorf("rig: %s: %w", f, err)
			}
		}
		if filepath.Base(f) == "pod-ready.yaml" {
			if data, err = withStartDelay(data); err != nil {
				return nil, fmt.Errorf("rig: %s: %w", f, err)
			}
		}
		// Each document needs its own separator: kwok finds no stages in a plain concatenation.
		out.WriteString("---\n")
		out.Write(data)
		out.WriteString("\n")
	}
	// Lifting the booting taint is needed whatever the delay; registering as not Ready only
	// with one.
	out.WriteString("---\n")
	out.WriteString(nodeBootedStage)
	out.WriteString("---\n")
	out.WriteString(podFinishStages)
	if o.NodeReadyDelay > 0 {
		out.WriteString("---\n")
		out.WriteString(nodeRegisterStage)
	}
	return out.Bytes(), nil
}

// nodeRegisterStage does what a kubelet does when it registers a node: the node reports
// Ready=False at once (so kube-controller-manager does not mark it Unknown while it boots) and
// carries the not-ready taint; nodeBootedStage lifts berthv1alpha1.DevBootingTaint once the node is Ready.
const nodeRegisterStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-register
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: .status.conditions.[] | select( .type == "Ready" ) | .status
      operator: DoesNotExist
  next:
    patches:
    - subresource: status
      type: merge
      template: |
        {{ $now := Now }}
        status:
          conditions:
          - lastHeartbeatTime: {{ $now | Quote }}
            lastTransitionTime: {{ $now | Quote }}
            message: "node is booting (rig node-ready delay)"
            reason: KubeletNotReady
            status: "False"
            type: Ready
`

// nodeBootedStage lifts berthv1alpha1.DevBootingTaint from a node that kwok reports Ready.
const nodeBootedStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-booted
spec:
  # The heartbeat stage matches a Ready node too, and kwok picks one matching stage by weight:
  # lift the taint first, or it waits for the next heartbeat (20-45 s).
  weight: 10000
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: .status.conditions.[] | select( .type == "Ready" ) | .status
      operator: In
      values: ["True"]
    - key: .spec.taints.[] | select( .key == "` + berthv1alpha1.DevBootingTaint + `" ) | .effect
      operator: Exists
  next:
    patches:
    - type: merge
      template: |
        spec:
          taints:
          {{ range .spec.taints }}{{ if ne .key "` + berthv1alpha1.DevBootingTaint + `" }}
          - key: {{ .key | Quote }}
            effect: {{ .effect | Quote }}
            {{ with .value }}value: {{ . | Quote }}{{ end }}
          {{ end }}{{ end }}
`

// editStage parses a kwok Stage, lets edit change its spec and returns it re-encoded.
func editStage(stage []byte, edit func(spec map[string]any)) ([]byte, error) {
	var obj map[string]any
	if err := yaml.Unmarshal(stage, &obj); err != nil {
		return nil, fmt.Errorf("parsing stage: %w", err)
	}
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("stage has no spec")
	}
	edit(spec)
	return yaml.Marshal(obj)
}

// withStageDelay sets spec.delay of a kwok Stage.
func withStageDelay(stage []byte, d time.Duration) ([]byte, error) {
	return editStage(stage, func(spec map[string]any) {
		spec["delay"] = map[string]any{"durationMilliseconds": d.Milliseconds()}
		// Start the delay only once nodeRegisterStage has reported the node not Ready, so the
		// two stages never race for a new node.
		sel, _ := spec["selector"].(map[string]any)
		if sel == nil {
			sel = map[string]any{}
			spec["selector"] = sel
		}
		exprs, _ := sel["matchExpressions"].([]any)
		sel["matchExpressions"] = append(exprs, map[string]any{
			"key": `.status.conditions.[] | select( .type == "Ready" ) | .status`, "operator": "Exists",
		})
	})
}

// withStartDelay makes kwok's pod-ready Stage wait berthv1alpha1.DevStartDelayAnnotation on a
// pod that carries it (none on one that does not): the pod stays ContainerCreating on its node
// that long, as while its image is pulled and its model loaded.
func withStartDelay(stage []byte) ([]byte, error) {
	return editStage(stage, func(spec map[string]any) {
		delay, _ := spec["delay"].(map[string]any)
		if delay == nil {
			delay = map[string]any{"durationMilliseconds": 0}
		}
		delay["durationFrom"] = map[string]any{
			"expressionFrom": `.metadata.annotations["` + berthv1alpha1.DevStartDelayAnnotation + `"]`,
		}
		spec["delay"] = delay
	})
}

// KarpenterOptions configure Karpenter's kwok provider.
type KarpenterOptions struct {
	// InstanceTypesFile is a JSON list of instance types (see test/testdata/gpu-instance-types.json).
	InstanceTypesFile string
	// BatchIdleDuration and BatchMaxDuration set Karpenter's provisioning batch window
	// (Karpenter's defaults, 1 s and 10 s, when zero).
	BatchIdleDuration, BatchMaxDuration time.Duration
	// ExtraEnv is appended to Karpenter's environment (e.g. FEATURE_GATES=...).
	ExtraEnv []string
	// DRA runs the DRA mode's Karpenter (BinKarpenterKwokDRA): its instance types carry the
	// devices their nodes publish (GPUDevices), and it sizes pods' resource claims against them
	// (--ignore-dra-requests=false). StartDRADriver publishes the devices once nodes are up.
	DRA bool
}

// StartKarpenter installs Karpenter's CRDs and runs its kwok provider, waiting for readiness.
func (r *Rig) StartKarpenter(ctx context.Context, o KarpenterOptions) error {
	if err := r.InstallCRDsFromDir(ctx, filepath.Join(r.opts.ToolsDir, "crds", "karpenter")); err != nil {
		return err
	}
	if o.InstanceTypesFile == "" {
		return fmt.Errorf("rig: Karpenter needs an instance-types file")
	}
	abs, err := filepath.Abs(o.InstanceTypesFile)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	env := []string{
		"SYSTEM_NAMESPACE=kube-system", "KUBECONFIG=" + r.Kubeconfig,
		"DISABLE_LEADER_ELECTION=true", "DISABLE_WEBHOOK=true",
		"METRICS_PORT=" + strconv.Itoa(ports[0]), "HEALTH_PROBE_PORT=" + strconv.Itoa(ports[1]),
		"INSTANCE_TYPES_FILE_PATH=" + abs, "LOG_LEVEL=info",
	}
	if o.BatchIdleDuration > 0 {
		env = append(env, "BATCH_IDLE_DURATION="+o.BatchIdleDuration.String())
	}
	if o.BatchMaxDuration > 0 {
		env = append(env, "BATCH_MAX_DURATION="+o.BatchMaxDuration.String())
	}
	bin := BinKarpenterKwok
	if o.DRA {
		bin = BinKarpenterKwokDRA
		env = append(env, "IGNORE_DRA_REQUESTS=false")
		if _, err := os.Stat(r.bin(bin)); err != nil {
			return fmt.Errorf("rig: the DRA mode's Karpenter is not built (hack/build-tools.sh %s): %w", bin, err)
		}
	}
	env = append(env, o.ExtraEnv...)
	p, err := r.start(bin, r.bin(bin), nil, env)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	return r.waitHealthy(ctx, p, "http://127.0.0.1:"+strconv.Itoa(ports[1])+"/readyz")
}

func (r *Rig) waitHealthy(ctx context.Context, p *process, url string) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.StartTimeout)
	defer cancel()
	if err := p.waitFor(ctx, "healthy", httpOK(insecureHTTP, url)); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	r.opts.Logf("rig: %s healthy", p.name)
	return nil
}

// StartComponent runs any other binary as a rig component (berth's own controller, scaler…)
// with the rig's process hygiene, and waits until healthURL answers 200 when it is not empty.
func (r *Rig) StartComponent(ctx context.Context, name, binary string, args, env []string, healthURL string) error {
	p, err := r.start(name, binary, args, env)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	if healthURL == "" {
		return nil
	}
	return r.waitHealthy(ctx, p, healthURL)
}
