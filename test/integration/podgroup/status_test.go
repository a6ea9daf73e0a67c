package podgroup_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

func newNamespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "pg-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// setPhase moves a pod to a phase through the status subresource, as a kubelet would. It reads
// the pod first and retries on conflict: berth's controllers write to members too (protection
// annotations).
func setPhase(t *testing.T, c client.Client, p *corev1.Pod, phase corev1.PodPhase) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		p.Status.Phase = phase
		return c.Status().Update(context.Background(), p)
	})
	if err != nil {
		t.Fatalf("setting %s to %s: %v", p.Name, phase, err)
	}
}

func TestStatusFollowsMembers(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := newNamespace(t, c)
	pg := builders.PodGroup("train", ns).MinMember(3).Obj()
	if err := c.Create(ctx, pg); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c, pg, func(st berthv1alpha1.PodGroupStatus) bool {
		return st.Phase == berthv1alpha1.PodGroupPending && st.ObservedGeneration == 1
	})

	var pods []*corev1.Pod
	for i := range 3 {
		p := builders.Pod(fmt.Sprintf("train-%d", i), ns).Member("train").GPU(1).Node("node-a").Obj()
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	// An unlabelled pod is not a member.
	if err := c.Create(ctx, builders.Pod("bystander", ns).Node("node-a").Obj()); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c, pg, func(st berthv1alpha1.PodGroupStatus) bool {
		return st.Members == berthv1alpha1.MemberCounts{Total: 3, Scheduled: 3}
	})
	for _, p := range pods {
		setPhase(t, c, p, corev1.PodRunning)
	}
	got := waitStatus(t, c, pg, func(st berthv1alpha1.PodGroupStatus) bool {
		return st.Phase == berthv1alpha1.PodGroupRunning && st.Members.Running == 3
	})
	ready := findCondition(got.Conditions, berthv1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.Message != "3 of 3 members running" || ready.ObservedGeneration != 1 {
		t.Errorf("Ready condition = %+v", ready)
	}
	rigtest.WaitEvent(t, ns, pg.Name, events.ReasonGangRunning)

	// One member fails: the gang is not finished while the others run (a replacement may come).
	setPhase(t, c, pods[0], corev1.PodFailed)
	got = waitStatus(t, c, pg, func(st berthv1alpha1.PodGroupStatus) bool { return st.Members.Failed == 1 && st.Members.Running == 2 })
	if got.Phase == berthv1alpha1.PodGroupFailed || got.Phase == berthv1alpha1.PodGroupSucceeded {
		t.Errorf("phase %s after one failure while two members run; want the gang not finished", got.Phase)
	}
	if ready := findCondition(got.Conditions, berthv1alpha1.ConditionReady); ready == nil || ready.Reason != berthv1alpha1.ReasonTooFewMembersRunning || ready.Message != "2 of 3 members running" {
		t.Errorf("Ready condition after one failure = %+v", ready)
	}
	// Everything ends short of minMember with no workload to recreate members: Failed.
	setPhase(t, c, pods[1], corev1.PodSucceeded)
	setPhase(t, c, pods[2], corev1.PodFailed)
	got = waitStatus(t, c, pg, func(st berthv1alpha1.PodGroupStatus) bool { return st.Phase == berthv1alpha1.PodGroupFailed })
	if got.Members != (berthv1alpha1.MemberCounts{Total: 3, Succeeded: 1, Failed: 2}) {
		t.Errorf("members at the end = %+v", got.Members)
	}
	rigtest.WaitEvent(t, ns, pg.Name, events.ReasonGangFailed)
}

func findCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

func waitStatus(t *testing.T, c client.Client, pg *berthv1alpha1.PodGroup, ok func(berthv1alpha1.PodGroupStatus) bool) berthv1alpha1.PodGroupStatus {
	t.Helper()
	var got berthv1alpha1.PodGroup
	rigtest.Eventually(t, 5*time.Second, 100*time.Millisecond, "PodGroup status", func(ctx context.Context) (bool, string, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), &got); err != nil {
			return false, "", err
		}
		return ok(got.Status), fmt.Sprintf("%+v", got.Status), nil
	})
	return got.Status
}
