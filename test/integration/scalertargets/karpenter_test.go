package scalertargets_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/berth-dev/berth/scaler/targets"
	"github.com/berth-dev/berth/test/rigtest"
)

// karpenterEvent records an event about p as Karpenter's recorder does (source component
// karpenter), at.
func karpenterEvent(t *testing.T, p *corev1.Pod, source, reason string, at time.Time) {
	t.Helper()
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: p.Name + ".", Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID, APIVersion: "v1"},
		Reason:         reason, Message: reason + " (test)", Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: source},
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1,
	}
	if err := rigtest.Current().Client.Create(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

// TestKarpenterVerdicts: the scaler follows Karpenter's events about pods: FailedScheduling
// means no node is coming (an unschedulable replica then never holds a scale-up), a later
// Nominated means one is; kube-scheduler's own FailedScheduling says nothing about Karpenter.
func TestKarpenterVerdicts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := rigtest.Current()
	v := targets.NewKarpenterVerdicts(kubernetes.NewForConfigOrDie(r.Config), ns)
	go v.Run(ctx)
	stockout := pod("stockout", map[string]string{"app": "verdicts"}, false)
	scheduler := pod("scheduler-only", map[string]string{"app": "verdicts"}, false)
	for _, p := range []*corev1.Pod{stockout, scheduler} {
		if err := r.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().Truncate(time.Second)
	karpenterEvent(t, stockout, "karpenter", "Nominated", now.Add(-time.Minute))
	karpenterEvent(t, stockout, "karpenter", "FailedScheduling", now)
	karpenterEvent(t, scheduler, "default-scheduler", "FailedScheduling", now)
	rigtest.Eventually(t, 10*time.Second, 50*time.Millisecond, "Karpenter's failure is seen", func(context.Context) (bool, string, error) {
		return v.NoCapacity(stockout.UID), "", nil
	})
	if v.NoCapacity(scheduler.UID) {
		t.Error("kube-scheduler's FailedScheduling was read as Karpenter's")
	}
	// An older nomination arriving late changes nothing; a newer one means a node is coming.
	karpenterEvent(t, stockout, "karpenter", "Nominated", now.Add(-30*time.Second))
	time.Sleep(time.Second)
	if !v.NoCapacity(stockout.UID) {
		t.Error("an older Nomination overrode a newer FailedScheduling")
	}
	karpenterEvent(t, stockout, "karpenter", "Nominated", now.Add(time.Second))
	rigtest.Eventually(t, 10*time.Second, 50*time.Millisecond, "a later nomination is seen", func(context.Context) (bool, string, error) {
		return !v.NoCapacity(stockout.UID), fmt.Sprintf("no capacity: %v", v.NoCapacity(stockout.UID)), nil
	})
}
