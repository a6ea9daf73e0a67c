package admission

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// mapVolumes is a volumeReader over maps.
type mapVolumes struct {
	claims  map[string]*corev1.PersistentVolumeClaim
	volumes map[string]*corev1.PersistentVolume
	classes map[string]*storagev1.StorageClass
}

func notFound(kind, name string) error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: kind}, name)
}

func (m mapVolumes) claim(_ context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	if c, ok := m.claims[ns+"/"+name]; ok {
		return c, nil
	}
	return nil, notFound("persistentvolumeclaims", name)
}

func (m mapVolumes) volume(_ context.Context, name string) (*corev1.PersistentVolume, error) {
	if v, ok := m.volumes[name]; ok {
		return v, nil
	}
	return nil, notFound("persistentvolumes", name)
}

func (m mapVolumes) class(_ context.Context, name string) (*storagev1.StorageClass, error) {
	if c, ok := m.classes[name]; ok {
		return c, nil
	}
	return nil, notFound("storageclasses", name)
}

func zoneTerm(zones ...string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: zones}}}
}

func TestResolveVolumes(t *testing.T) {
	claim := func(name, class, volume string) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: volume}}
		if class != "-" {
			c.Spec.StorageClassName = ptr.To(class)
		}
		return c
	}
	wffc, immediate := storagev1.VolumeBindingWaitForFirstConsumer, storagev1.VolumeBindingImmediate
	rd := mapVolumes{
		claims: map[string]*corev1.PersistentVolumeClaim{
			"ml/ebs-bound":   claim("ebs-bound", "gp3", "pv-ebs"),
			"ml/efs":         claim("efs", "efs-sc", "pv-efs"),
			"ml/gp3-new":     claim("gp3-new", "gp3", ""),
			"ml/zoned-new":   claim("zoned-new", "gp3-zoned", ""),
			"ml/slow":        claim("slow", "immediate", ""),
			"ml/no-class":    claim("no-class", "-", ""),
			"ml/local":       claim("local", "local", ""),
			"ml/w-0-scratch": claim("w-0-scratch", "gp3", ""),
			"ml/dangling":    claim("dangling", "gp3", "pv-gone"),
		},
		volumes: map[string]*corev1.PersistentVolume{
			"pv-ebs": {Spec: corev1.PersistentVolumeSpec{NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{zoneTerm("us-west-2a")}}}}},
			"pv-efs": {},
		},
		classes: map[string]*storagev1.StorageClass{
			"gp3":       {Provisioner: "ebs.csi.aws.com", VolumeBindingMode: &wffc},
			"immediate": {Provisioner: "ebs.csi.aws.com", VolumeBindingMode: &immediate},
			"local":     {Provisioner: noProvisioner, VolumeBindingMode: &wffc},
			"gp3-zoned": {Provisioner: "ebs.csi.aws.com", VolumeBindingMode: &wffc, AllowedTopologies: []corev1.TopologySelectorTerm{
				{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: corev1.LabelTopologyZone, Values: []string{"us-west-2b", "us-west-2c"}}}},
			}},
		},
	}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		want    []corev1.NodeSelector
		blocked string
	}{
		{name: "bound EBS volume: its zone", pod: builders.Pod("w-0", "ml").PVC("ckpt", "ebs-bound").Obj(),
			want: []corev1.NodeSelector{{NodeSelectorTerms: []corev1.NodeSelectorTerm{zoneTerm("us-west-2a")}}}},
		{name: "EFS, FSx: no topology", pod: builders.Pod("w-0", "ml").PVC("data", "efs").Obj()},
		{name: "WaitForFirstConsumer without allowedTopologies: anywhere", pod: builders.Pod("w-0", "ml").PVC("data", "gp3-new").Obj()},
		{name: "WaitForFirstConsumer with allowedTopologies", pod: builders.Pod("w-0", "ml").PVC("data", "zoned-new").Obj(),
			want: []corev1.NodeSelector{{NodeSelectorTerms: []corev1.NodeSelectorTerm{zoneTerm("us-west-2b", "us-west-2c")}}}},
		{name: "several claims: all apply", pod: builders.Pod("w-0", "ml").PVC("a", "ebs-bound").PVC("b", "efs").PVC("c", "zoned-new").Obj(),
			want: []corev1.NodeSelector{
				{NodeSelectorTerms: []corev1.NodeSelectorTerm{zoneTerm("us-west-2a")}},
				{NodeSelectorTerms: []corev1.NodeSelectorTerm{zoneTerm("us-west-2b", "us-west-2c")}},
			}},
		{name: "generic ephemeral volume: its claim <pod>-<volume>", pod: builders.Pod("w-0", "ml").Ephemeral("scratch", "gp3").Obj()},
		{name: "ephemeral claim not created yet", pod: builders.Pod("w-1", "ml").Ephemeral("scratch", "gp3").Obj(),
			blocked: "waits for its PersistentVolumeClaim ml/w-1-scratch to be created"},
		{name: "Immediate binding, not bound yet", pod: builders.Pod("w-0", "ml").PVC("d", "slow").Obj(),
			blocked: "StorageClass immediate binds Immediately"},
		{name: "no class", pod: builders.Pod("w-0", "ml").PVC("d", "no-class").Obj(), blocked: "names no StorageClass"},
		{name: "missing class", pod: builders.Pod("w-0", "ml").PVC("d", "missing").Obj(), blocked: "ml/missing to be created"},
		{name: "local volumes", pod: builders.Pod("w-0", "ml").PVC("d", "local").Obj(), blocked: "has no provisioner"},
		{name: "bound to a volume that is gone", pod: builders.Pod("w-0", "ml").PVC("d", "dangling").Obj(), blocked: "pv-gone that does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vt, err := resolveVolumes(context.Background(), rd, tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			if tt.blocked != "" {
				if !strings.Contains(vt.Blocked, tt.blocked) {
					t.Errorf("blocked %q, want it to say %q", vt.Blocked, tt.blocked)
				}
				return
			}
			if diff := cmp.Diff(scheduling.VolumeTopology{Required: tt.want}, vt); diff != "" {
				t.Errorf("topology (-want +got):\n%s", diff)
			}
		})
	}
}
