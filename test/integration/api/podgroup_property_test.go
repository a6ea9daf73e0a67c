package api_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/rigtest"
)

// PropertySeedEnv sets the seed of TestRandomPodGroupSpecs (default 1; a long run: any other).
const PropertySeedEnv = "BERTH_PROPERTY_SEED"

var (
	nodePoolPattern    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	requiredKeyPattern = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

// invalidFields is the PodGroup spec's validation as documented on its fields: the fields of
// spec that break a rule.
func invalidFields(s berthv1alpha1.PodGroupSpec) []string {
	var bad []string
	if s.MinMember < 1 {
		bad = append(bad, "spec.minMember")
	}
	if s.ScheduleTimeoutSeconds != nil && *s.ScheduleTimeoutSeconds < 0 {
		bad = append(bad, "spec.scheduleTimeoutSeconds")
	}
	if s.ProvisioningTimeoutSeconds != nil && *s.ProvisioningTimeoutSeconds < 10 {
		bad = append(bad, "spec.provisioningTimeoutSeconds")
	}
	switch s.OnScheduleTimeout {
	case "", berthv1alpha1.ScheduleTimeoutRetry, berthv1alpha1.ScheduleTimeoutFail:
	default:
		bad = append(bad, "spec.onScheduleTimeout")
	}
	switch s.OnMemberLoss {
	case "", berthv1alpha1.MemberLossReplace, berthv1alpha1.MemberLossRestartGang:
	default:
		bad = append(bad, "spec.onMemberLoss")
	}
	if s.NodePool != "" && (len(s.NodePool) > 253 || !nodePoolPattern.MatchString(s.NodePool)) {
		bad = append(bad, "spec.nodePool")
	}
	if s.Topology != nil {
		k := s.Topology.RequiredKey
		if len(k) < 1 || len(k) > 316 || !requiredKeyPattern.MatchString(k) {
			bad = append(bad, "spec.topology.requiredKey")
		}
	}
	return bad
}

// TestRandomPodGroupSpecs sends random PodGroup specs to the real API server: it accepts exactly
// the specs the documented rules allow, and a rejection names a field that breaks one.
func TestRandomPodGroupSpecs(t *testing.T) {
	seed := int64(1)
	if v := os.Getenv(PropertySeedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", PropertySeedEnv, v, err)
		}
	}
	rng := rand.New(rand.NewSource(seed))
	// Each field breaks its rule one time in eight, so about a third of the specs are valid.
	pick := func(valid, invalid []string) string {
		if rng.Intn(8) == 0 {
			return invalid[rng.Intn(len(invalid))]
		}
		return valid[rng.Intn(len(valid))]
	}
	pickInt := func(valid, invalid []int32) *int32 {
		switch {
		case rng.Intn(4) == 0:
			return nil
		case rng.Intn(8) == 0:
			return ptr.To(invalid[rng.Intn(len(invalid))])
		}
		return ptr.To(valid[rng.Intn(len(valid))])
	}
	ctx := context.Background()
	c := rigtest.Current().Client
	accepted, rejected := 0, 0
	for i := range 300 {
		minMember := pickInt([]int32{1, 2, 8, 1 << 30}, []int32{-1, 0})
		if minMember == nil {
			minMember = ptr.To[int32](4)
		}
		spec := berthv1alpha1.PodGroupSpec{
			MinMember:                  *minMember,
			ScheduleTimeoutSeconds:     pickInt([]int32{0, 5, 600}, []int32{-1}),
			ProvisioningTimeoutSeconds: pickInt([]int32{10, 3600}, []int32{-5, 0, 9}),
			OnScheduleTimeout:          berthv1alpha1.ScheduleTimeoutPolicy(pick([]string{"", "Retry", "Fail"}, []string{"retry", "Never"})),
			OnMemberLoss:               berthv1alpha1.MemberLossPolicy(pick([]string{"", "Replace", "RestartGang"}, []string{"Ignore", "replace"})),
			NodePool:                   pick([]string{"", "gpu-h100", "a.b", strings.Repeat("p", 253)}, []string{"GPU", "-x", "x-", strings.Repeat("p", 254)}),
		}
		if rng.Intn(2) == 0 {
			spec.Topology = &berthv1alpha1.TopologySpec{RequiredKey: pick(
				[]string{"topology.kubernetes.io/zone", "Zone", "example.com/x_y", strings.Repeat("k", 316)},
				[]string{"", "a/b/c", "example.com/", "/x", "UPPER.example.com/x", strings.Repeat("k", 317)})}
		}
		pg := &berthv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("prop-%d-%03d", seed, i), Namespace: "default"}, Spec: spec}
		bad := invalidFields(spec)
		err := c.Create(ctx, pg)
		switch {
		case err == nil && len(bad) > 0:
			t.Errorf("spec %d accepted, but %v break the documented rules: %+v", i, bad, spec)
		case err == nil:
			accepted++
			_ = c.Delete(ctx, pg)
		case len(bad) == 0:
			t.Errorf("spec %d rejected, though it keeps every documented rule: %v; spec %+v", i, err, spec)
		case !apierrors.IsInvalid(err):
			t.Errorf("spec %d rejected with %v, want Invalid (422)", i, err)
		default:
			rejected++
			named := false
			for _, f := range bad {
				named = named || strings.Contains(err.Error(), f)
			}
			if !named {
				t.Errorf("spec %d rejected with %q, which names none of %v", i, err, bad)
			}
		}
	}
	t.Logf("seed %d: %d accepted, %d rejected", seed, accepted, rejected)
	if accepted < 20 || rejected < 20 {
		t.Errorf("%d accepted and %d rejected of 300: the generator no longer covers both", accepted, rejected)
	}
}
