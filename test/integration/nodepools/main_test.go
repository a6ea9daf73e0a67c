// Package nodepools_test applies every NodePool template `berth nodepools render` produces to a
// real kube-apiserver with Karpenter's CRDs (the AWS provider's NodePool and EC2NodeClass, and
// the kwok provider's KWOKNodeClass): the OpenAPI and CEL validation accept them and keep every
// field.
package nodepools_test

import (
	"testing"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, rigtest.InstallKarpenterAWSCRDs)
}
