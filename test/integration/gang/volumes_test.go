package gang_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestVolumeTopology: a member whose claim is bound to a volume in one zone (an EBS volume) is
// placed in that zone, with its gang; a gang whose member's claim waits to be bound by an
// Immediate StorageClass waits and names the claim; its member is never pinned.
func TestVolumeTopology(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	kwokNode(t, "vol-a", 8, map[string]string{corev1.LabelTopologyZone: "vol-zone-a", "pool": "vol"})
	kwokNode(t, "vol-b", 8, map[string]string{corev1.LabelTopologyZone: "vol-zone-b", "pool": "vol"})

	// A pre-provisioned volume in zone b, bound to a claim (static binding).
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "ckpt-" + ns},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("100Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: "vol-0123"}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"vol-zone-b"}}},
			}}}},
			ClaimRef: &corev1.ObjectReference{Namespace: ns, Name: "ckpt"},
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "ckpt", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(""), VolumeName: pv.Name,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("100Gi")}},
		},
	}
	for _, o := range []client.Object{pv, pvc} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pv) })
	rigtest.Eventually(t, 30*time.Second, 100*time.Millisecond, "the claim bound", func(ctx context.Context) (bool, string, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc)
		return pvc.Status.Phase == corev1.ClaimBound, string(pvc.Status.Phase), err
	})
	if err := c.Create(ctx, builders.PodGroup("zoned", ns).MinMember(2).Topology(corev1.LabelTopologyZone).Obj()); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		b := builders.Pod(fmt.Sprintf("zoned-%d", i), ns).Member("zoned").GPU(1).NodeSelector("pool", "vol")
		if i == 0 {
			b.PVC("ckpt", "ckpt")
		}
		if err := c.Create(ctx, b.Obj()); err != nil {
			t.Fatal(err)
		}
	}
	waitAllBound(t, ns, "zoned", 2, 15*time.Second)
	for i := range 2 {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("zoned-%d", i)}, &p); err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "vol-b" {
			t.Errorf("%s runs on %s, want vol-b: the gang's volume is in zone b", p.Name, p.Spec.NodeName)
		}
	}

	// A claim of an Immediate class that no provisioner binds: the gang waits and says why.
	immediate := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "slow-" + ns}, Provisioner: "example.com/none",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	if err := c.Create(ctx, immediate); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), immediate) })
	waiting := pvc.DeepCopy()
	waiting.ObjectMeta = metav1.ObjectMeta{Name: "data", Namespace: ns}
	waiting.Spec.VolumeName, waiting.Spec.StorageClassName = "", ptr.To(immediate.Name)
	if err := c.Create(ctx, waiting); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, builders.PodGroup("unbound", ns).MinMember(1).Obj()); err != nil {
		t.Fatal(err)
	}
	member := builders.Pod("unbound-0", ns).Member("unbound").GPU(1).NodeSelector("pool", "vol").PVC("data", "data").Obj()
	if err := c.Create(ctx, member); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 10*time.Second, 100*time.Millisecond, "WaitingForVolumes named", func(ctx context.Context) (bool, string, error) {
		cond := scheduledCondition(t, ns, "unbound")
		return cond != nil && cond.Reason == berthv1alpha1.ReasonWaitingForVolumes && strings.Contains(cond.Message, ns+"/data"),
			fmt.Sprintf("%+v", cond), nil
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(member), member); err != nil {
		t.Fatal(err)
	}
	if member.Annotations[berthv1alpha1.PinnedNodeAnnotation] != "" {
		t.Errorf("a member whose claim waits to be bound was pinned to %s", member.Annotations[berthv1alpha1.PinnedNodeAnnotation])
	}
}
