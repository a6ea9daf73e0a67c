package restart_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/admission"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestKillMidRecreationLosesNoMember: a bare member (no controller to recreate it) is released
// onto a node whose GPUs a pod bound there directly takes before kube-scheduler binds the
// member: stranded, berth deletes it to create it again unpinned — and is killed between the
// deletion and the creation. Before, the pod was held only in that process's memory and the
// member was lost for good; now the PodGroup's status.recreating holds it, and the next
// controller creates it, admits it and it runs once the GPUs are free.
func TestKillMidRecreationLosesNoMember(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	c := r.Client
	node := "recreate-0"
	n := builders.Node(node).GPU(2).Allocatable(corev1.ResourceCPU, "96").Obj()
	n.Annotations = map[string]string{berthv1alpha1.KwokNodeAnnotation: "fake"}
	n.Status.Conditions = nil
	if err := c.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "recreate-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	berth.Args = []string{"--stranded-after=2s"}
	defer func() { berth.Args = nil }()

	// kube-scheduler stops; berth releases the one-member gang onto the node's 2 GPUs.
	if err := r.StopComponent(rig.BinKubeScheduler, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	schedulerUp := false
	defer func() {
		if !schedulerUp {
			_ = r.StartScheduler(context.Background())
		}
	}()
	if err := berth.Start(ctx, admission.FaultEnv+"=mid-recreate"); err != nil {
		t.Fatal(err)
	}
	first := berth.Running
	if err := c.Create(ctx, builders.PodGroup("solo", ns.Name).MinMember(1).Obj()); err != nil {
		t.Fatal(err)
	}
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "run-config", Namespace: ns.Name}}
	if err := c.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	member := builders.Pod("solo-0", ns.Name).Member("solo").GPU(2).Obj()
	member.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}
	if err := c.Create(ctx, member); err != nil {
		t.Fatal(err)
	}
	var oldUID types.UID
	rigtest.Eventually(t, 15*time.Second, 50*time.Millisecond, "the member released onto "+node, func(ctx context.Context) (bool, string, error) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(member), &p); err != nil {
			return false, "", err
		}
		oldUID = p.UID
		return len(p.Spec.SchedulingGates) == 0 && p.Annotations[berthv1alpha1.PinnedNodeAnnotation] == node, fmt.Sprintf("gates %v", p.Spec.SchedulingGates), nil
	})
	// A pod bound to the node directly takes its GPUs before kube-scheduler binds the member.
	racer := builders.Pod("racer", ns.Name).GPU(2).Node(node).Tolerate(berthv1alpha1.GPUResource, "", corev1.TaintEffectNoSchedule).Obj()
	if err := c.Create(ctx, racer); err != nil {
		t.Fatal(err)
	}
	if err := r.StartScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	schedulerUp = true

	rigtest.Eventually(t, 60*time.Second, 100*time.Millisecond, "controller killed between deleting and recreating the member", func(context.Context) (bool, string, error) {
		return berth.Exited(first), "still running", nil
	})
	log, err := os.ReadFile(filepath.Join(r.LogDir(), first+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "fault injection: exiting at mid-recreate") {
		t.Fatalf("controller exited, but not at the fault point:\n%s", lastLines(string(log), 20))
	}
	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(member), &p); err == nil && p.UID == oldUID {
		t.Fatalf("the stranded member was not deleted (deletion timestamp %v)", p.DeletionTimestamp)
	}
	var pg berthv1alpha1.PodGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "solo"}, &pg); err != nil {
		t.Fatal(err)
	}
	if len(pg.Status.Recreating) != 1 || pg.Status.Recreating[0].Pod != member.Name || pg.Status.Recreating[0].UID != oldUID {
		t.Fatalf("status.recreating = %+v, want the deleted member's record", pg.Status.Recreating)
	}

	// The GPUs come free; the next controller creates the member from the record and admits it.
	if err := c.Delete(ctx, racer, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	if err := berth.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = berth.Stop() }()
	rigtest.Eventually(t, 30*time.Second, 100*time.Millisecond, "the member recreated and bound to "+node, func(ctx context.Context) (bool, string, error) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(member), &p); err != nil {
			return false, "not there", client.IgnoreNotFound(err)
		}
		if p.UID == oldUID {
			return false, "the old pod", nil
		}
		return p.Spec.NodeName == node, fmt.Sprintf("node %q, gates %v", p.Spec.NodeName, p.Spec.SchedulingGates), nil
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(member), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != owner.UID {
		t.Errorf("owner references of the recreated member = %+v, want the ConfigMap's", p.OwnerReferences)
	}
	rigtest.Eventually(t, 10*time.Second, 100*time.Millisecond, "the record dropped", func(ctx context.Context) (bool, string, error) {
		var pg berthv1alpha1.PodGroup
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "solo"}, &pg); err != nil {
			return false, "", err
		}
		return len(pg.Status.Recreating) == 0, fmt.Sprintf("%+v", pg.Status.Recreating), nil
	})
}
