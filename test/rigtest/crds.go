package rigtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	awsapis "github.com/aws/karpenter-provider-aws/pkg/apis"

	"github.com/berth-dev/berth/internal/rig"
)

// CRD sets the tools folder holds under crds/ (hack/build-tools.sh).
const (
	CRDsKarpenter   = "karpenter"
	CRDsKEDA        = "keda"
	CRDsMonitoring  = "monitoring"
	CRDsCertManager = "cert-manager"
)

// InstallToolCRDs installs the named CRD sets from the rig's tools folder.
func InstallToolCRDs(ctx context.Context, r *rig.Rig, sets ...string) error {
	for _, set := range sets {
		if err := r.InstallCRDsFromDir(ctx, filepath.Join(r.ToolsDir(), "crds", set)); err != nil {
			return fmt.Errorf("installing %s CRDs: %w", set, err)
		}
	}
	return nil
}

// InstallKarpenterAWSCRDs installs Karpenter's CRDs from the tools folder (NodePool, NodeClaim,
// KWOKNodeClass, at the version the rig runs), then the AWS provider's EC2NodeClass and its
// NodePool CRD, which replaces the core one: it adds the CEL rules on karpenter.k8s.aws labels
// that an EKS cluster enforces. The AWS CRDs are embedded in the provider's Go module, at the
// version in go.mod.
func InstallKarpenterAWSCRDs(ctx context.Context, r *rig.Rig) error {
	if err := InstallToolCRDs(ctx, r, CRDsKarpenter); err != nil {
		return err
	}
	aws := bytes.Join([][]byte{awsapis.NodePoolCRD, awsapis.EC2NodeClassCRD}, []byte("\n---\n"))
	if err := r.InstallCRDs(ctx, aws); err != nil {
		return fmt.Errorf("installing Karpenter AWS CRDs: %w", err)
	}
	return nil
}

// provisioningRequestAPIModule is the Go module that holds the ProvisioningRequest types and
// CRD (autoscaling.x-k8s.io), at the version in go.mod.
const provisioningRequestAPIModule = "k8s.io/autoscaler/cluster-autoscaler/apis"

// InstallProvisioningRequestCRD installs the ProvisioningRequest CRD from the module berth's
// types come from (the module cache, as go.mod pins it), so the rig serves exactly the API
// berth is built against.
func InstallProvisioningRequestCRD(ctx context.Context, r *rig.Rig) error {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", provisioningRequestAPIModule).Output()
	if err != nil {
		return fmt.Errorf("locating module %s: %w", provisioningRequestAPIModule, err)
	}
	crd, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "autoscaling.x-k8s.io_provisioningrequests.yaml"))
	if err != nil {
		return fmt.Errorf("reading the ProvisioningRequest CRD: %w", err)
	}
	if err := r.InstallCRDs(ctx, crd); err != nil {
		return fmt.Errorf("installing the ProvisioningRequest CRD: %w", err)
	}
	return nil
}
