package rig

import (
	"context"
	"path/filepath"
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
	// Its webhook server needs a serving certificate to start, even unregistered.
	wc, err := r.prepareWebhookController("jobset", "config.jobset.x-k8s.io")
	if err != nil {
		return err
	}
	return r.StartComponent(ctx, BinJobSet, r.bin(BinJobSet), []string{"--kubeconfig=" + r.Kubeconfig, "--config=" + wc.configFile}, nil,
		"http://"+wc.health+"/readyz")
}
