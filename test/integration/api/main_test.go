// Package api_test checks the PodGroup CRD's OpenAPI and CEL validation on a real
// kube-apiserver: good PodGroups are accepted and defaulted, bad ones are rejected with the
// messages users will see.
package api_test

import (
	"testing"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, rigtest.InstallBerthCRDs)
}
