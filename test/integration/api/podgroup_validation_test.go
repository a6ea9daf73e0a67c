package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

func TestPodGroupDefaults(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	pg := builders.PodGroup("defaults", "default").MinMember(4).Obj()
	if err := c.Create(ctx, pg); err != nil {
		t.Fatalf("creating a minimal PodGroup: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, pg) })
	want := berthv1alpha1.PodGroupSpec{
		MinMember:                  4,
		ScheduleTimeoutSeconds:     ptr.To[int32](600),
		ProvisioningTimeoutSeconds: ptr.To[int32](600),
		OnScheduleTimeout:          berthv1alpha1.ScheduleTimeoutRetry,
		OnMemberLoss:               berthv1alpha1.MemberLossReplace,
		Disruption:                 &berthv1alpha1.DisruptionSpec{Protect: ptr.To(true)},
	}
	if diff := cmp.Diff(want, pg.Spec); diff != "" {
		t.Errorf("defaulted spec (-want +got):\n%s", diff)
	}
}

func TestPodGroupAcceptsFullSpec(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	pg := builders.PodGroup("full", "default").MinMember(16).
		Topology(corev1.LabelTopologyZone).NodePool("gpu-h100").ScheduleTimeout(0).Protect(false).
		OnScheduleTimeout(berthv1alpha1.ScheduleTimeoutFail).OnMemberLoss(berthv1alpha1.MemberLossRestartGang).Obj()
	if err := c.Create(ctx, pg); err != nil {
		t.Fatalf("creating a full PodGroup: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, pg) })
	if got := *pg.Spec.ScheduleTimeoutSeconds; got != 0 {
		t.Errorf("scheduleTimeoutSeconds = %d, want 0 (wait forever) kept", got)
	}
	if *pg.Spec.Disruption.Protect {
		t.Error("disruption.protect = true, want false kept")
	}
	if pg.Spec.OnScheduleTimeout != berthv1alpha1.ScheduleTimeoutFail || pg.Spec.OnMemberLoss != berthv1alpha1.MemberLossRestartGang {
		t.Errorf("policies = %s, %s; want Fail, RestartGang kept", pg.Spec.OnScheduleTimeout, pg.Spec.OnMemberLoss)
	}
}

func TestPodGroupRejectsBadSpecs(t *testing.T) {
	tests := []struct {
		name string
		spec map[string]any
		want string
	}{
		{"minMember missing", map[string]any{}, "spec.minMember: Required value"},
		{"minMember zero", map[string]any{"minMember": int64(0)}, "spec.minMember in body should be greater than or equal to 1"},
		{"minMember negative", map[string]any{"minMember": int64(-3)}, "spec.minMember in body should be greater than or equal to 1"},
		{"minMember not a number", map[string]any{"minMember": "eight"}, `spec.minMember: Invalid value: "string": spec.minMember in body must be of type integer`},
		{"timeout negative", map[string]any{"minMember": int64(2), "scheduleTimeoutSeconds": int64(-1)}, "spec.scheduleTimeoutSeconds in body should be greater than or equal to 0"},
		{"provisioning timeout too short", map[string]any{"minMember": int64(2), "provisioningTimeoutSeconds": int64(5)}, "spec.provisioningTimeoutSeconds in body should be greater than or equal to 10"},
		{"topology key invalid", map[string]any{"minMember": int64(2), "topology": map[string]any{"requiredKey": "not a key!"}}, "requiredKey must be a valid label key, for example topology.kubernetes.io/zone"},
		{"topology key empty", map[string]any{"minMember": int64(2), "topology": map[string]any{"requiredKey": ""}}, "spec.topology.requiredKey in body should be at least 1 chars long"},
		{"minResources is gone", map[string]any{"minMember": int64(2), "minResources": map[string]any{"nvidia.com/gpu": "8"}}, `unknown field "spec.minResources"`},
		{"onScheduleTimeout unknown", map[string]any{"minMember": int64(2), "onScheduleTimeout": "Ignore"}, `spec.onScheduleTimeout: Unsupported value: "Ignore": supported values: "Retry", "Fail"`},
		{"onMemberLoss unknown", map[string]any{"minMember": int64(2), "onMemberLoss": "Wait"}, `spec.onMemberLoss: Unsupported value: "Wait": supported values: "Replace", "RestartGang"`},
		{"nodePool not a name", map[string]any{"minMember": int64(2), "nodePool": "GPU_Pool"}, "spec.nodePool in body should match"},
		{"protect not a boolean", map[string]any{"minMember": int64(2), "disruption": map[string]any{"protect": "yes"}}, "spec.disruption.protect in body must be of type boolean"},
	}
	ctx := context.Background()
	c := rigtest.Current().Client
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": berthv1alpha1.GroupVersion.String(), "kind": "PodGroup",
				"metadata": map[string]any{"name": "bad", "namespace": "default"},
				"spec":     tt.spec,
			}}
			// Strict, as kubectl apply validates: an unknown field is an error, not a warning.
			err := c.Create(ctx, obj, client.FieldValidation("Strict"))
			if err == nil {
				_ = c.Delete(ctx, obj)
				t.Fatalf("created a PodGroup with %s; want rejection containing %q", tt.name, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("rejection = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestPodGroupImmutableFields(t *testing.T) {
	tests := []struct {
		name   string
		before *berthv1alpha1.PodGroup
		mutate func(*berthv1alpha1.PodGroup)
		want   string
	}{
		{"minMember changed", builders.PodGroup("imm-min", "default").MinMember(8).Obj(),
			func(pg *berthv1alpha1.PodGroup) { pg.Spec.MinMember = 4 }, "minMember is immutable"},
		{"topology added", builders.PodGroup("imm-topo-add", "default").MinMember(8).Obj(),
			func(pg *berthv1alpha1.PodGroup) {
				pg.Spec.Topology = &berthv1alpha1.TopologySpec{RequiredKey: "topology.kubernetes.io/zone"}
			}, "topology is immutable"},
		{"topology key changed", builders.PodGroup("imm-topo-chg", "default").MinMember(8).Topology("topology.kubernetes.io/zone").Obj(),
			func(pg *berthv1alpha1.PodGroup) { pg.Spec.Topology.RequiredKey = "kubernetes.io/hostname" }, "topology is immutable"},
		{"topology removed", builders.PodGroup("imm-topo-del", "default").MinMember(8).Topology("topology.kubernetes.io/zone").Obj(),
			func(pg *berthv1alpha1.PodGroup) { pg.Spec.Topology = nil }, "topology is immutable"},
	}
	ctx := context.Background()
	c := rigtest.Current().Client
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pg := tt.before
			if err := c.Create(ctx, pg); err != nil {
				t.Fatalf("creating: %v", err)
			}
			t.Cleanup(func() { _ = c.Delete(ctx, pg) })
			tt.mutate(pg)
			err := c.Update(ctx, pg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("update error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	t.Run("mutable fields change", func(t *testing.T) {
		pg := builders.PodGroup("mutable", "default").MinMember(2).Obj()
		if err := c.Create(ctx, pg); err != nil {
			t.Fatalf("creating: %v", err)
		}
		t.Cleanup(func() { _ = c.Delete(ctx, pg) })
		pg.Spec.NodePool = "gpu-a100"
		pg.Spec.ScheduleTimeoutSeconds = ptr.To[int32](60)
		if err := c.Update(ctx, pg); err != nil {
			t.Errorf("changing nodePool and scheduleTimeoutSeconds: %v", err)
		}
	})
}

func TestPodGroupStatusSubresource(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	pg := builders.PodGroup("status", "default").MinMember(2).Obj()
	if err := c.Create(ctx, pg); err != nil {
		t.Fatalf("creating: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, pg) })
	stored := pg.DeepCopy()
	pg.Status.Phase = "Exploded"
	err := c.Status().Patch(ctx, pg, client.MergeFrom(stored))
	if err == nil || !strings.Contains(err.Error(), `Unsupported value: "Exploded"`) {
		t.Errorf("status phase outside the enum: err = %v, want Unsupported value", err)
	}
	pg = stored.DeepCopy()
	pg.Status.Phase = berthv1alpha1.PodGroupPending
	pg.Status.Conditions = []metav1.Condition{{Type: berthv1alpha1.ConditionScheduled, Status: metav1.ConditionFalse, Reason: "Waiting", Message: "m", LastTransitionTime: metav1.Now()}}
	if err := c.Status().Patch(ctx, pg, client.MergeFrom(stored)); err != nil {
		t.Errorf("valid status patch: %v", err)
	}
}
