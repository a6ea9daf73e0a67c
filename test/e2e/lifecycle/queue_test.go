package lifecycle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// queueGate stands for a queue's admission gate (Kueue's kueue.x-k8s.io/admission): another
// scheduler's gate that holds pods until the queue admits them.
const queueGate = "example.com/queue-admission"

// TestPodGroupOutlivesItsTimeoutWhileAQueueHoldsIt: a PodGroup with a 5 s schedule timeout is
// created long before its pods, whose queue then holds them for longer than the timeout. The
// clock starts only once minMember members exist free of other schedulers' gates: the gang
// never times out, says what it waits for, and is admitted whole when the queue lets go.
func TestPodGroupOutlivesItsTimeoutWhileAQueueHoldsIt(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t, "queued")
	create(t, builders.PodGroup("queued", ns).MinMember(2).ScheduleTimeout(5).Obj())
	scheduled := func(reason, says string) {
		t.Helper()
		rigtest.Eventually(t, 15*time.Second, 100*time.Millisecond, "Scheduled="+reason, func(ctx context.Context) (bool, string, error) {
			pg, err := getGroup(ctx, ns, "queued")
			if err != nil {
				return false, "", err
			}
			cond := meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionScheduled)
			if pg.Status.Phase == berthv1alpha1.PodGroupFailed || pg.Status.ScheduleTimeouts > 0 {
				return false, "", fmt.Errorf("the gang timed out while it waited for its pods or its queue: %v", conditionSummary(pg))
			}
			return cond != nil && cond.Reason == reason && strings.Contains(cond.Message, says), fmt.Sprintf("%v", conditionSummary(pg)), nil
		})
	}
	scheduled(berthv1alpha1.ReasonWaitingForMembers, "0 of 2 members exist")
	time.Sleep(7 * time.Second) // longer than the timeout, before any pod exists

	var pods []*corev1.Pod
	for i := range 2 {
		p := builders.Pod(fmt.Sprintf("queued-%d", i), ns).Member("queued").GPU(1).
			NodeSelector(awsv1.LabelInstanceFamily, "g6e").Tolerate(berthv1alpha1.GPUResource, "", corev1.TaintEffectNoSchedule).Obj()
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: queueGate}}
		create(t, p)
		pods = append(pods, p)
	}
	scheduled(berthv1alpha1.ReasonHeldByOtherScheduler, queueGate)
	time.Sleep(7 * time.Second) // the queue holds them past the timeout too
	scheduled(berthv1alpha1.ReasonHeldByOtherScheduler, queueGate)
	for _, p := range pods {
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			t.Fatal(err)
		}
		// The gate's release term (pod affinity) is there from creation; a pin is node affinity.
		_, pinned := p.Annotations[berthv1alpha1.PinnedNodeAnnotation]
		if _, byHost := p.Spec.NodeSelector[corev1.LabelHostname]; pinned || byHost || (p.Spec.Affinity != nil && p.Spec.Affinity.NodeAffinity != nil) {
			t.Errorf("berth pinned %s while the queue still held it: %v %v", p.Name, p.Spec.NodeSelector, p.Spec.Affinity)
		}
	}

	// The queue admits them: the gang is admitted whole.
	stop := observe(ns, "queued")
	for _, p := range pods {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			p.Spec.SchedulingGates = removeGate(p.Spec.SchedulingGates, queueGate)
			return c.Update(ctx, p)
		})
		if err != nil {
			t.Fatalf("the queue releasing %s: %v", p.Name, err)
		}
	}
	waitRunning(t, ns, "queued", 2, 2*time.Minute)
	stop().check(t)
}

func removeGate(gates []corev1.PodSchedulingGate, name string) []corev1.PodSchedulingGate {
	var out []corev1.PodSchedulingGate
	for _, g := range gates {
		if g.Name != name {
			out = append(out, g)
		}
	}
	return out
}
