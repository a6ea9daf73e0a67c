package gang_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestVolcanoAnnotation: Volcano names a pod's gang in an annotation, and that is where berth
// reads it; the same key as a label is not Volcano's and leaves the pod alone.
func TestVolcanoAnnotation(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	kwokNode(t, "volcano-a", 8, nil)
	if err := c.Create(ctx, builders.PodGroup("vc", ns).MinMember(2).Obj()); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		p := builders.Pod(fmt.Sprintf("vc-%d", i), ns).GPU(1).Obj()
		p.Annotations = map[string]string{berthv1alpha1.VolcanoGroupNameKey: "vc"}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	labelled := builders.Pod("labelled", ns).Label(berthv1alpha1.VolcanoGroupNameKey, "vc").Obj()
	if err := c.Create(ctx, labelled); err != nil {
		t.Fatal(err)
	}
	waitAllBound(t, ns, "vc", 2, 15*time.Second)
	if err := c.Get(ctx, client.ObjectKeyFromObject(labelled), labelled); err != nil {
		t.Fatal(err)
	}
	if len(labelled.Spec.SchedulingGates) != 0 || labelled.Labels[berthv1alpha1.PodGroupLabel] != "" {
		t.Errorf("a pod with Volcano's key as a label was adopted: gates %v, labels %v", labelled.Spec.SchedulingGates, labelled.Labels)
	}
}

// TestAdaptedGangsBelongToOneSubmission: an adapted PodGroup is owned by its members'
// controller (deleted with it), or by the members themselves; a re-submission of the same gang
// name gets a PodGroup of its own, never the earlier one's (whose status and assignments are
// about pods that are gone).
func TestAdaptedGangsBelongToOneSubmission(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	kwokNode(t, "adapt-owned", 8, nil)
	kueuePod := func(name, group string) *corev1.Pod {
		p := builders.Pod(name, ns).Label(berthv1alpha1.KueuePodGroupNameLabel, group).GPU(1).Obj()
		p.Annotations = map[string]string{berthv1alpha1.KueuePodGroupTotalCountAnnotation: "2"}
		return p
	}
	// Submission 1: plain pods. The PodGroup is owned by both.
	first := []*corev1.Pod{kueuePod("a-0", "kq"), kueuePod("a-1", "kq")}
	for _, p := range first {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	waitAllBound(t, ns, "kq", 2, 15*time.Second)
	pg1 := waitOwners(t, ns, "kq", first[0].UID, first[1].UID)

	// Submission 2 of the same name, right after the first one's pods are deleted.
	for _, p := range first {
		if err := c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	second := []*corev1.Pod{kueuePod("b-0", "kq"), kueuePod("b-1", "kq")}
	for _, p := range second {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	pg2 := waitOwners(t, ns, "kq", second[0].UID, second[1].UID)
	if pg2.UID == pg1.UID {
		t.Fatalf("the re-submission reuses PodGroup %s of the first submission", pg1.UID)
	}
	waitAllBound(t, ns, "kq", 2, 15*time.Second)

	// A controller-owned gang: its PodGroup is owned by the controller and goes with it.
	owner := &corev1.ConfigMap{ObjectMeta: metaName("trainer")}
	owner.Namespace = ns
	if err := c.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		p := kueuePod(fmt.Sprintf("c-%d", i), "kc")
		p.OwnerReferences = ownedByController(owner)
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	waitOwners(t, ns, "kc", owner.UID)
	waitAllBound(t, ns, "kc", 2, 15*time.Second)
	if err := c.Delete(ctx, owner); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "the controller's PodGroup is deleted with it", func(ctx context.Context) (bool, string, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kc"}, &berthv1alpha1.PodGroup{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err), client.IgnoreNotFound(err)
	})
}

// waitOwners waits until PodGroup ns/name is owned by exactly the given UIDs and returns it.
func waitOwners(t *testing.T, ns, name string, uids ...types.UID) *berthv1alpha1.PodGroup {
	t.Helper()
	var pg berthv1alpha1.PodGroup
	rigtest.Eventually(t, 15*time.Second, 100*time.Millisecond, "PodGroup "+name+" owned by its submission", func(ctx context.Context) (bool, string, error) {
		if err := rigtest.Current().Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pg); err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		have := map[types.UID]bool{}
		for _, o := range pg.OwnerReferences {
			have[o.UID] = true
		}
		ok := len(have) == len(uids)
		for _, u := range uids {
			ok = ok && have[u]
		}
		return ok, fmt.Sprintf("owners %v", pg.OwnerReferences), nil
	})
	return &pg
}

// ownedByController is a controller reference to a ConfigMap standing in for a workload
// controller (nothing acts on it; the garbage collector deletes what it owns).
func ownedByController(cm *corev1.ConfigMap) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID, Controller: ptr.To(true)}}
}
