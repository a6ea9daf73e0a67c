package rigtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/internal/rig"
)

// BerthProcess runs `berth controller` as its own process on the rig, as in production: the
// pod-gate webhook on loopback (registered with the API server once) and one controller
// process at a time, restartable (the restart tests kill and restart it).
type BerthProcess struct {
	r           *rig.Rig
	bin         string
	webhookPort int
	starts      int
	// health is each process's /healthz and /readyz port, by component name.
	health map[string]int
	// Running names the rig component of the controller that runs now ("" when none).
	Running string
	// Args are flags added to every start (after the rig's own).
	Args []string
}

// NewBerthProcess builds the berth binary into the rig's work folder and registers the
// pod-gate webhook configuration pointing at a free loopback port, for berth's own PodGroups and
// the named adapters' pod groups (their --adapters flag is added to every start). It starts
// nothing.
func NewBerthProcess(ctx context.Context, r *rig.Rig, adapters ...gate.Source) (*BerthProcess, error) {
	bin, err := BuildBerth(r)
	if err != nil {
		return nil, err
	}
	port, err := rig.FreePort()
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("https://localhost:%d%s", port, gate.Path)
	if err := r.Client.Create(ctx, gate.Configuration(admissionregistrationv1.WebhookClientConfig{URL: &url}, adapters)); err != nil {
		return nil, fmt.Errorf("creating webhook configuration: %w", err)
	}
	b := &BerthProcess{r: r, bin: bin, webhookPort: port, health: map[string]int{}}
	if len(adapters) > 0 {
		names := make([]string, len(adapters))
		for i, a := range adapters {
			names[i] = a.Name
		}
		b.Args = append(b.Args, "--adapters="+strings.Join(names, ","))
	}
	return b, nil
}

// Start runs a new controller process (named berth-controller-<n>) with env added, and waits
// until it is ready. The caller stops the previous one first.
func (b *BerthProcess) Start(ctx context.Context, env ...string) error {
	name, err := b.start(ctx, false, true, env)
	if err != nil {
		return err
	}
	b.Running = name
	return nil
}

// StartReplica runs one more controller process under leader election (the Lease in the rig's
// berth namespace), serving the pod-gate webhook when webhook is set (one replica at a time
// can: they share its port), and returns its component name once it is ready. Running is not
// changed: replicas are stopped with Rig.StopComponent or signalled through their PID.
func (b *BerthProcess) StartReplica(ctx context.Context, webhook bool, env ...string) (string, error) {
	return b.start(ctx, true, webhook, env)
}

func (b *BerthProcess) start(ctx context.Context, leaderElect, webhook bool, env []string) (string, error) {
	b.starts++
	name := fmt.Sprintf("berth-controller-%d", b.starts)
	health, err := rig.FreePort()
	if err != nil {
		return "", err
	}
	port := 0
	if webhook {
		port = b.webhookPort
	}
	// As the chart runs it: its own ServiceAccount, exactly config/rbac's roles.
	kubeconfig, err := ComponentKubeconfig(ctx, b.r, "controller")
	if err != nil {
		return "", err
	}
	args := []string{
		"controller", "--kubeconfig=" + kubeconfig, "--leader-elect=" + strconv.FormatBool(leaderElect), "--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(health),
		"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(port), "--webhook-hosts=localhost",
		"--webhook-cert-dir=" + filepath.Join(b.r.WorkDir(), name+"-certs"), "--webhook-secret-namespace=" + rig.BerthNamespace,
		"--seat-namespace=" + rig.BerthNamespace,
		"--admission-resync=" + AdmissionResync.String(),
	}
	if leaderElect {
		args = append(args, "--leader-election-namespace="+rig.BerthNamespace)
	}
	if err := b.r.StartComponent(ctx, name, b.bin, append(args, b.Args...), env, fmt.Sprintf("http://127.0.0.1:%d/readyz", health)); err != nil {
		return "", err
	}
	b.health[name] = health
	return name, nil
}

// Readyz is the named process's verbose readiness report (GET /readyz?verbose): one
// "[+]<check> ok" line per check that passes.
func (b *BerthProcess) Readyz(ctx context.Context, name string) (string, error) {
	port, ok := b.health[name]
	if !ok {
		return "", fmt.Errorf("no berth process %s", name)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/readyz?verbose", port), nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("reading %s's readiness: %w", name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("reading %s's readiness: %w", name, err)
	}
	return fmt.Sprintf("HTTP %d\n%s", resp.StatusCode, body), nil
}

// Stop stops the running controller process, if any.
func (b *BerthProcess) Stop() error {
	if b.Running == "" {
		return nil
	}
	err := b.r.StopComponent(b.Running, 5*time.Second)
	b.Running = ""
	return err
}

// Exited reports whether the named controller process has exited.
func (b *BerthProcess) Exited(name string) bool {
	for _, c := range b.r.Components() {
		if c.Name == name {
			return !c.Running
		}
	}
	return false
}
