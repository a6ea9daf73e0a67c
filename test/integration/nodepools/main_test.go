// Package nodepools_test applies every NodePool template `berth nodepools render` produces to a
// real kube-apiserver with Karpenter's CRDs (the AWS provider's NodePool and EC2NodeClass, and
// the kwok provider's KWOKNodeClass): the OpenAPI and CEL validation accept them and keep every
// field.
package nodepools_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	awsapis "github.com/aws/karpenter-provider-aws/pkg/apis"

	"github.com/berth-dev/berth/test/rig"
	"github.com/berth-dev/berth/test/rig/rigtest"
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, installKarpenterCRDs)
}

// installKarpenterCRDs installs Karpenter's CRDs from the tools folder (NodePool, NodeClaim,
// KWOKNodeClass, at the version the rig runs), then the AWS provider's EC2NodeClass and its
// NodePool CRD, which replaces the core one: it adds the CEL rules on karpenter.k8s.aws labels
// that an EKS cluster enforces. The AWS CRDs are embedded in the provider's Go module, at the
// version in go.mod.
func installKarpenterCRDs(ctx context.Context, r *rig.Rig) error {
	if err := r.InstallCRDsFromDir(ctx, filepath.Join(os.Getenv(rig.ToolsDirEnv), "crds", "karpenter")); err != nil {
		return fmt.Errorf("installing Karpenter CRDs: %w", err)
	}
	aws := bytes.Join([][]byte{awsapis.NodePoolCRD, awsapis.EC2NodeClassCRD}, []byte("\n---\n"))
	if err := r.InstallCRDs(ctx, aws); err != nil {
		return fmt.Errorf("installing Karpenter AWS CRDs: %w", err)
	}
	return nil
}
