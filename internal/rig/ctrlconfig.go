package rig

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/berth-dev/berth/internal/certs"
)

// webhookController is what a controller configured the kubebuilder way (a Configuration file
// of its own API group: JobSet's, LeaderWorkerSet's) needs on the rig: a serving certificate for
// its webhook server on loopback (signed by a CA of its own, whose bundle webhook
// configurations routed to it carry), its webhook port, its health address, and the
// configuration file with leader election, internal certificate management and metrics off.
type webhookController struct {
	configFile, health string
	webhookPort        int
	caPEM              []byte
}

// prepareWebhookController writes component's certificates and configuration (API group
// configGroup, e.g. config.jobset.x-k8s.io) under the rig's work folder.
func (r *Rig) prepareWebhookController(component, configGroup string) (webhookController, error) {
	dir := filepath.Join(r.opts.WorkDir, component)
	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return webhookController{}, fmt.Errorf("rig: %w", err)
	}
	now := time.Now()
	ca, err := certs.Issue(certs.CA(component+"-webhook-ca", now.Add(-time.Hour), now.Add(24*time.Hour)), nil)
	if err != nil {
		return webhookController{}, fmt.Errorf("rig: %s webhook CA: %w", component, err)
	}
	kp, err := certs.Issue(certs.Serving(component+"-webhook", []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(24*time.Hour)), ca)
	if err != nil {
		return webhookController{}, fmt.Errorf("rig: %s webhook certificate: %w", component, err)
	}
	for name, data := range map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM} {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			return webhookController{}, fmt.Errorf("rig: %w", err)
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return webhookController{}, fmt.Errorf("rig: %w", err)
	}
	wc := webhookController{configFile: filepath.Join(dir, "config.yaml"), health: "127.0.0.1:" + strconv.Itoa(ports[1]), webhookPort: ports[0], caPEM: ca.CertPEM}
	cfg := fmt.Sprintf(`apiVersion: %s/v1alpha1
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
`, configGroup, wc.webhookPort, certDir, wc.health)
	if err := os.WriteFile(wc.configFile, []byte(cfg), 0o600); err != nil {
		return webhookController{}, fmt.Errorf("rig: %w", err)
	}
	return wc, nil
}
