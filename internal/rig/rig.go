package rig

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Binary names the rig expects in Options.ToolsDir/bin.
const (
	BinEtcd                  = "etcd"
	BinKubeAPIServer         = "kube-apiserver"
	BinKubeScheduler         = "kube-scheduler"
	BinKubeControllerManager = "kube-controller-manager"
	BinKwok                  = "kwok"
	BinKarpenterKwok         = "karpenter-kwok"
	// BinKarpenterKwokDRA is Karpenter's kwok provider with the GPU instance types' devices
	// (hack/tools/dra/karpenter-kwok-dra).
	BinKarpenterKwokDRA = "karpenter-kwok-dra"
)

// ToolsDirEnv names the environment variable that points at the folder built by
// hack/build-tools.sh (binaries in bin/, Karpenter CRDs in crds/karpenter/, kwok stages in
// kwok-stages/).
const ToolsDirEnv = "BERTH_TOOLS_DIR"

// Options configure a rig.
type Options struct {
	// ToolsDir is the folder made by hack/build-tools.sh. Defaults to $BERTH_TOOLS_DIR.
	ToolsDir string
	// WorkDir holds certificates, etcd data, kubeconfig and logs. Created if missing; a fresh
	// temporary folder when empty.
	WorkDir string
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any)
	// HandleSignals stops every live rig and exits on SIGINT/SIGTERM/SIGHUP. Tests want this;
	// a daemon that handles signals itself does not.
	HandleSignals bool
	// StartTimeout bounds the start of each component. Default 2 minutes.
	StartTimeout time.Duration
	// GenericWorkload turns on Kubernetes' native gang scheduling (feature gate GenericWorkload,
	// beta and off by default in 1.37) in kube-apiserver, kube-scheduler and
	// kube-controller-manager, and serves its API, scheduling.k8s.io/v1beta1 Workload and
	// PodGroup.
	GenericWorkload bool
	// DRAWorkloadResourceClaims turns on native PodGroups' resourceClaims (feature gate
	// DRAWorkloadResourceClaims, beta and off by default in 1.37; it needs GenericWorkload):
	// claims a whole gang shares.
	DRAWorkloadResourceClaims bool
}

// GenericWorkloadGate is Kubernetes' feature gate for Workload and PodGroup (native gangs).
const GenericWorkloadGate = "GenericWorkload"

// DRAWorkloadResourceClaimsGate is Kubernetes' feature gate for PodGroups' resourceClaims.
const DRAWorkloadResourceClaimsGate = "DRAWorkloadResourceClaims"

// featureGateArgs are the flags every Kubernetes component of the rig gets for opts' gates.
func (o Options) featureGateArgs() []string {
	var gates []string
	if o.GenericWorkload {
		gates = append(gates, GenericWorkloadGate+"=true")
	}
	if o.DRAWorkloadResourceClaims {
		gates = append(gates, DRAWorkloadResourceClaimsGate+"=true")
	}
	if len(gates) == 0 {
		return nil
	}
	return []string{"--feature-gates=" + strings.Join(gates, ",")}
}

// Rig is a running control plane on loopback.
type Rig struct {
	opts Options

	// Kubeconfig is the path of an admin kubeconfig for the rig.
	Kubeconfig string
	// Config is an admin REST config for the rig.
	Config *rest.Config
	// Client is an admin controller-runtime client with core, berth and Karpenter types.
	Client client.Client
	// Scheme is the client's scheme.
	Scheme *runtime.Scheme
	// APIServerURL is the apiserver's https URL.
	APIServerURL string

	pki  *rigPKI
	pods podRange

	// apiArgs are kube-apiserver's flags, apiName the component running it now (RestartAPIServer).
	apiArgs  []string
	apiName  string
	restarts int

	mu      sync.Mutex
	procs   []*process
	stopped bool
	// loops stop the rig's in-process components (StartDRADriver), before its processes.
	loops []func()
}

// Start runs etcd and kube-apiserver and returns once the apiserver is ready.
func Start(ctx context.Context, opts Options) (*Rig, error) {
	if err := CheckPlatform(); err != nil {
		return nil, err
	}
	if opts.ToolsDir == "" {
		opts.ToolsDir = os.Getenv(ToolsDirEnv)
	}
	if opts.ToolsDir == "" {
		return nil, fmt.Errorf("rig: no tools folder: set %s to the folder printed by hack/build-tools.sh (or run through make)", ToolsDirEnv)
	}
	if _, err := os.Stat(filepath.Join(opts.ToolsDir, "bin", BinKubeAPIServer)); err != nil {
		return nil, fmt.Errorf("rig: %s is not a tools folder made by hack/build-tools.sh: %w", opts.ToolsDir, err)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.WorkDir == "" {
		dir, err := os.MkdirTemp("", "berth-rig-")
		if err != nil {
			return nil, fmt.Errorf("rig: creating work folder: %w", err)
		}
		opts.WorkDir = dir
	}
	if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("rig: creating work folder: %w", err)
	}
	pods, err := allocatePodRange()
	if err != nil {
		return nil, fmt.Errorf("rig: %w", err)
	}
	r := &Rig{opts: opts, pods: pods}
	track(r)
	if err := r.startControlPlane(ctx); err != nil {
		_ = r.Stop()
		return nil, err
	}
	return r, nil
}

// PodCIDR is the loopback range kwok hands this rig's pod IPs from (see podcidr.go).
func (r *Rig) PodCIDR() string { return r.pods.cidr }

// ToolsDir is the folder made by hack/build-tools.sh the rig runs from.
func (r *Rig) ToolsDir() string { return r.opts.ToolsDir }

// WorkDir is the folder with the rig's state and logs.
func (r *Rig) WorkDir() string { return r.opts.WorkDir }

// LogDir is the folder with one log file per component.
func (r *Rig) LogDir() string { return filepath.Join(r.opts.WorkDir, "logs") }

func (r *Rig) bin(name string) string { return filepath.Join(r.opts.ToolsDir, "bin", name) }

// Component is a running rig process, as reported by Components.
type Component struct {
	Name    string
	PID     int
	LogPath string
	Running bool
	// Stopped: the process was stopped or killed on purpose (StopComponent, KillComponent), so
	// its not running is no fault.
	Stopped bool
}

// Components lists the processes the rig started, in start order.
func (r *Rig) Components() []Component {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Component, 0, len(r.procs))
	for _, p := range r.procs {
		done, _ := p.exited()
		out = append(out, Component{Name: p.name, PID: p.pid(), LogPath: p.logPath, Running: !done, Stopped: p.stopped.Load()})
	}
	return out
}

// StopComponent stops the running component called name (SIGTERM, then SIGKILL after grace);
// stopping one that is not running is not an error.
func (r *Rig) StopComponent(name string, grace time.Duration) error {
	p, err := r.component(name)
	if err != nil {
		return err
	}
	return p.stop(grace)
}

// KillComponent sends SIGKILL to the component called name and waits until it is gone: a crash
// on purpose. Killing one that is not running is not an error.
func (r *Rig) KillComponent(name string) error {
	p, err := r.component(name)
	if err != nil {
		return err
	}
	p.kill()
	return nil
}

// component is the process the rig started last under name.
func (r *Rig) component(name string) (*process, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var p *process
	for _, q := range r.procs {
		if q.name == name {
			p = q
		}
	}
	if p == nil {
		return nil, fmt.Errorf("rig: no component %s", name)
	}
	return p, nil
}

// Exited returns the first component that has exited, if any.
func (r *Rig) Exited() (string, error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		if done, err := p.exited(); done {
			return p.name, err, true
		}
	}
	return "", nil, false
}

// start launches a component and records it for Stop.
func (r *Rig) start(name, binary string, args, env []string) (*process, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return nil, errStopped
	}
	p, err := startProcess(name, binary, args, env, r.LogDir())
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, p)
	r.opts.Logf("rig: started %s (pid %d), log %s", name, p.pid(), p.logPath)
	return p, nil
}

// Stop stops every component, newest first. It is safe to call more than once.
func (r *Rig) Stop() error {
	r.mu.Lock()
	r.stopped = true
	procs, loops := r.procs, r.loops
	r.procs, r.loops = nil, nil
	r.mu.Unlock()
	for _, stop := range loops {
		stop()
	}
	for i := len(procs) - 1; i >= 0; i-- {
		grace := 5 * time.Second
		if procs[i].name == BinKubeAPIServer || procs[i].name == BinEtcd {
			grace = 15 * time.Second
		}
		_ = procs[i].stop(grace)
	}
	untrack(r)
	if r.pods.release != nil {
		r.pods.release()
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func freePorts(n int) ([]int, error) {
	// Hold all listeners open together so the same port is not handed out twice.
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding free ports: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (r *Rig) startControlPlane(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.StartTimeout)
	defer cancel()
	var err error
	if r.pki, err = newPKI(filepath.Join(r.opts.WorkDir, "pki")); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]

	// 1. etcd, with fsync off: the rig's data is disposable and fsync dominates on small disks.
	etcdURL, err := r.startEtcd(ctx, etcdClient, etcdPeer)
	if err != nil {
		return err
	}

	// 2. kube-apiserver, with the aggregation layer's front-proxy settings so aggregated APIs
	// (KEDA's external metrics) can be served.
	p := r.pki.path
	r.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	r.apiName = BinKubeAPIServer
	r.apiArgs = []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(apiPort),
		"--tls-cert-file=" + p("apiserver.crt"), "--tls-private-key-file=" + p("apiserver.key"),
		"--client-ca-file=" + p("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p("sa.pub"), "--service-account-signing-key-file=" + p("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=RBAC", "--allow-privileged=true",
		"--endpoint-reconciler-type=none",
		// ExtendedResourceToleration is what EKS runs: a pod requesting nvidia.com/gpu tolerates
		// the nvidia.com/gpu taint of GPU nodes without saying so.
		"--enable-admission-plugins=ExtendedResourceToleration",
		"--disable-admission-plugins=ServiceAccount",
		"--requestheader-client-ca-file=" + p("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p("front-proxy-client.crt"), "--proxy-client-key-file=" + p("front-proxy-client.key"),
		"--profiling=false", "--v=1",
	}
	if r.opts.GenericWorkload {
		// A beta API is not served by default even with its gate on.
		r.apiArgs = append(r.apiArgs, "--runtime-config=scheduling.k8s.io/v1beta1=true")
	}
	r.apiArgs = append(r.apiArgs, r.opts.featureGateArgs()...)
	api, err := r.start(r.apiName, r.bin(BinKubeAPIServer), r.apiArgs, nil)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	if err := r.writeKubeconfig(); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	httpc, err := rest.HTTPClientFor(r.Config)
	if err != nil {
		return fmt.Errorf("rig: admin http client: %w", err)
	}
	if err := api.waitFor(ctx, "ready", httpOK(httpc, r.APIServerURL+"/readyz")); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	if r.Scheme, err = NewScheme(); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	if r.Client, err = client.New(r.Config, client.Options{Scheme: r.Scheme}); err != nil {
		return fmt.Errorf("rig: admin client: %w", err)
	}
	// The default namespace and service account may not exist before kube-controller-manager
	// runs; tests create objects there right away.
	if err := r.ensureDefaultNamespace(ctx); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	r.opts.Logf("rig: kube-apiserver ready at %s", r.APIServerURL)
	return nil
}

// RestartAPIServer stops kube-apiserver (SIGTERM, SIGKILL after 10 s), leaves it down for
// down, and starts it again with the same flags, port and etcd, returning once it is ready: what
// a control-plane upgrade or an apiserver crash looks like to every client. Each restart is a
// component of its own (kube-apiserver-1, -2, …).
func (r *Rig) RestartAPIServer(ctx context.Context, down time.Duration) error {
	if err := r.StopComponent(r.apiName, 10*time.Second); err != nil {
		return fmt.Errorf("rig: stopping kube-apiserver: %w", err)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	r.restarts++
	r.apiName = fmt.Sprintf("%s-%d", BinKubeAPIServer, r.restarts)
	api, err := r.start(r.apiName, r.bin(BinKubeAPIServer), r.apiArgs, nil)
	if err != nil {
		return fmt.Errorf("rig: restarting kube-apiserver: %w", err)
	}
	httpc, err := rest.HTTPClientFor(r.Config)
	if err != nil {
		return fmt.Errorf("rig: admin http client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.StartTimeout)
	defer cancel()
	if err := api.waitFor(ctx, "ready", httpOK(httpc, r.APIServerURL+"/readyz")); err != nil {
		return fmt.Errorf("rig: restarted kube-apiserver: %w", err)
	}
	r.opts.Logf("rig: kube-apiserver restarted (%s)", r.apiName)
	return nil
}

// startEtcd runs etcd on the client and peer ports and waits until it is healthy; it returns
// the client URL.
func (r *Rig) startEtcd(ctx context.Context, clientPort, peerPort int) (string, error) {
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	etcd, err := r.start(BinEtcd, r.bin(BinEtcd), []string{
		"--name=rig", "--data-dir=" + filepath.Join(r.opts.WorkDir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=rig=" + peerURL, "--unsafe-no-fsync=true", "--log-level=warn",
		"--listen-metrics-urls=", "--quota-backend-bytes=4294967296",
	}, nil)
	if err != nil {
		return "", fmt.Errorf("rig: %w", err)
	}
	if err := etcd.waitFor(ctx, "healthy", httpOK(http.DefaultClient, etcdURL+"/health")); err != nil {
		return "", fmt.Errorf("rig: %w", err)
	}
	return etcdURL, nil
}

// NewScheme returns a scheme with core Kubernetes, berth, Karpenter (incl. kwok) and
// ProvisioningRequest types.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, KarpenterGroupVersion)
	s.AddKnownTypes(KarpenterGroupVersion, &karpv1.NodePool{}, &karpv1.NodePoolList{}, &karpv1.NodeClaim{}, &karpv1.NodeClaimList{})
	metav1.AddToGroupVersion(s, KwokGroupVersion)
	s.AddKnownTypes(KwokGroupVersion, &kwokv1alpha1.KWOKNodeClass{}, &kwokv1alpha1.KWOKNodeClassList{})
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding core types: %w", err)
	}
	if err := berthv1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding berth types: %w", err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding apiextensions types: %w", err)
	}
	if err := autoscalingv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding ProvisioningRequest types: %w", err)
	}
	return s, nil
}

func (r *Rig) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["berth-dev"] = &clientcmdapi.Cluster{Server: r.APIServerURL, CertificateAuthorityData: r.pki.ca.CertPEM}
	cfg.AuthInfos["berth-dev-admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: r.pki.admin.CertPEM, ClientKeyData: r.pki.admin.KeyPEM}
	cfg.Contexts["berth-dev"] = &clientcmdapi.Context{Cluster: "berth-dev", AuthInfo: "berth-dev-admin", Namespace: "default"}
	cfg.CurrentContext = "berth-dev"
	r.Kubeconfig = filepath.Join(r.opts.WorkDir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, r.Kubeconfig); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("building REST config: %w", err)
	}
	rc.QPS, rc.Burst = 200, 400
	r.Config = rc
	return nil
}

// httpOK is a readiness check: GET url answers 200.
func httpOK(c *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// insecureHTTP talks to components' self-signed health endpoints on loopback.
var insecureHTTP = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback health checks of self-signed rig components
