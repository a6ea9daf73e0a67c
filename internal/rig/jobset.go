package rig

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/berth-dev/berth/internal/certs"
)

// BinJobSet is the JobSet controller (sigs.k8s.io/jobset), built by hack/build-tools.sh.
const BinJobSet = "jobset-controller"

// StartJobSet runs the real JobSet controller against the rig with JobSet's CRDs. Its webhooks
// (defaulting, validation, exclusive-placement pod mutation) are served but not registered
// with the apiserver — the rig has no Service to route them — so JobSets given to it must be
// complete: network, successPolicy, and each ReplicatedJob's Job template with completionMode
// and the pods' restartPolicy set, as JobSet's defaulting webhook would leave them.
func (r *Rig) StartJobSet(ctx context.Context) error {
	if err := r.InstallCRDsFromDir(ctx, filepath.Join(r.opts.ToolsDir, "crds", "jobset")); err != nil {
		return err
	}
	dir := filepath.Join(r.opts.WorkDir, "jobset")
	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	// Its webhook server needs a serving certificate to start, even unregistered.
	kp, err := certs.Issue(certs.Serving("jobset-webhook", []string{"127.0.0.1"}, time.Time{}, time.Now().Add(24*time.Hour)), nil)
	if err != nil {
		return fmt.Errorf("rig: jobset webhook certificate: %w", err)
	}
	for name, data := range map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM} {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			return fmt.Errorf("rig: %w", err)
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	health := "127.0.0.1:" + strconv.Itoa(ports[1])
	cfg := fmt.Sprintf(`apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: %s
`, ports[0], certDir, health)
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	return r.StartComponent(ctx, BinJobSet, r.bin(BinJobSet), []string{"--kubeconfig=" + r.Kubeconfig, "--config=" + cfgFile}, nil,
		"http://"+health+"/readyz")
}
