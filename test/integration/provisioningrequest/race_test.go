package provisioningrequest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestRequestAndGangNeverShareGPUs: a check-capacity request and a gang created at once, both
// for the 8 GPUs of the one node that has them. Gang admission and ProvisioningRequests used to
// keep their own ideas of what was promised — the request counted bound pods only, admission
// counted no other request's seat until it bound — so both could be promised the same GPUs.
// They decide on one ledger now: in every round at most one of them gets the node, and the
// other says it waits.
func TestRequestAndGangNeverShareGPUs(t *testing.T) {
	c := rigtest.Current().Client
	for round := range 5 {
		ns := rigtest.Namespace(t, "race")
		pool := fmt.Sprintf("race-%d", round)
		nodes(t, pool, 1)
		pg := builders.PodGroup("train", ns).MinMember(1).Obj()
		member := builders.Pod("train-0", ns).Member("train").GPU(8).NodeSelector("pool", pool).Obj()
		// The gang first or the request first, alternately; both within a few milliseconds.
		if round%2 == 0 {
			create(t, pg, member)
		}
		pr := request(t, ns, "check", autoscalingv1.ProvisioningClassCheckCapacity, pool, 8, 1, true)
		if round%2 == 1 {
			create(t, pg, member)
		}
		var gangGot, requestGot bool
		var state string
		rigtest.Eventually(t, 30*time.Second, 100*time.Millisecond, "both decided", func(ctx context.Context) (bool, string, error) {
			var got autoscalingv1.ProvisioningRequest
			if err := c.Get(ctx, client.ObjectKeyFromObject(pr), &got); err != nil {
				return false, "", err
			}
			var g berthv1alpha1.PodGroup
			if err := c.Get(ctx, client.ObjectKeyFromObject(pg), &g); err != nil {
				return false, "", err
			}
			prov := meta.FindStatusCondition(got.Status.Conditions, autoscalingv1.Provisioned)
			sched := meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionScheduled)
			requestGot = prov != nil && prov.Status == metav1.ConditionTrue
			gangGot = sched != nil && sched.Status == metav1.ConditionTrue
			state = fmt.Sprintf("request Provisioned %+v; gang Scheduled %+v", prov, sched)
			return prov != nil && sched != nil, state, nil
		})
		time.Sleep(2 * time.Second) // anything still to happen happens
		var got autoscalingv1.ProvisioningRequest
		var g berthv1alpha1.PodGroup
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(pr), &got); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(pg), &g); err != nil {
			t.Fatal(err)
		}
		requestGot = meta.IsStatusConditionTrue(got.Status.Conditions, autoscalingv1.Provisioned)
		gangGot = meta.IsStatusConditionTrue(g.Status.Conditions, berthv1alpha1.ConditionScheduled)
		t.Logf("round %d: request provisioned %v, gang admitted %v", round, requestGot, gangGot)
		if requestGot && gangGot {
			t.Errorf("round %d: the request and the gang were both promised the node's 8 GPUs: %s", round, state)
		}
		if !requestGot && !gangGot {
			t.Errorf("round %d: neither got the free node: %s", round, state)
		}
		// The round's objects go, and so does its node's room.
		_ = c.Delete(context.Background(), &got)
		_ = c.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0))
	}
}

// create creates objects.
func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := rigtest.Current().Client.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}
