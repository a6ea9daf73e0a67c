// Package ha_test runs two berth controller replicas under leader election, kills the leader in
// the middle of releasing a gang, and checks what the replica that takes over does: it finishes
// that release and never promises the capacity the dead leader promised to another gang.
package ha_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers"
	"github.com/berth-dev/berth/controllers/podgroup/admission"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

var berth *rigtest.BerthProcess

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartCluster(ctx, r, rig.KwokOptions{}); err != nil {
			return err
		}
		var err error
		berth, err = rigtest.NewBerthProcess(ctx, r)
		return err
	})
}

// TestNewLeaderFinishesTheReleaseAndPromisesNothingTwice: replica A leads and serves the
// webhook, replica B waits. A admits a 4-GPU gang on an 8-GPU node and dies half-way through
// its release. A 5-GPU gang asks for the same node while no one leads. B takes the Lease,
// releases the rest of the first gang onto the node A promised, and keeps the 5-GPU gang
// waiting: the 4 GPUs A promised are not given again. Once the first gang is gone, B admits the
// second.
func TestNewLeaderFinishesTheReleaseAndPromisesNothingTwice(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	c := r.Client
	ns := rigtest.Namespace(t, "ha")
	node := builders.Node("ha-a").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj()
	node.Annotations = map[string]string{berthv1alpha1.KwokNodeAnnotation: "fake"}
	node.Status.Conditions = nil
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), node) })

	// A replica of an earlier test may still hold the Lease (one killed, or stopped past its
	// grace): A leads once the holder is someone new, and A is the only replica running.
	before := holderNow(t)
	a, err := berth.StartReplica(ctx, true, admission.FaultEnv+"=mid-release")
	if err != nil {
		t.Fatal(err)
	}
	leaderA := waitHolder(t, before, "replica A leads")
	b, err := berth.StartReplica(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.StopComponent(a, 5*time.Second)
		_ = r.StopComponent(b, 5*time.Second)
	})

	// The rival's member exists (gated by A's webhook) before the first gang; its PodGroup comes
	// only once A is dead, so A never decides on it.
	rival := builders.Pod("rival-0", ns).Member("rival").GPU(5).Obj()
	if err := c.Create(ctx, rival); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, builders.PodGroup("ddp", ns).MinMember(4).Obj()); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := c.Create(ctx, builders.Pod(fmt.Sprintf("ddp-%d", i), ns).Member("ddp").GPU(1).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	rigtest.Eventually(t, 60*time.Second, 100*time.Millisecond, "replica A dies half-way through the release", func(context.Context) (bool, string, error) {
		return berth.Exited(a), "still running", nil
	})
	logA, err := os.ReadFile(filepath.Join(r.LogDir(), a+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logA), "fault injection: exiting at mid-release") {
		t.Fatalf("replica A exited, but not at the fault point")
	}
	if err := c.Create(ctx, builders.PodGroup("rival", ns).MinMember(1).Obj()); err != nil {
		t.Fatal(err)
	}

	// B takes over once A's Lease expires (15 s), and finishes A's release.
	waitHolder(t, leaderA, "replica B takes the Lease")
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "replica B releases the rest of ddp onto ha-a", func(ctx context.Context) (bool, string, error) {
		pods := groupPods(t, ns, "ddp")
		bound := 0
		for _, p := range pods {
			if p.Spec.NodeName == "ha-a" {
				bound++
			}
		}
		return bound == 4, fmt.Sprintf("%d of %d bound to ha-a", bound, len(pods)), nil
	})
	// The rival must not get the GPUs A promised: it waits, and says why.
	rigtest.Eventually(t, 15*time.Second, 200*time.Millisecond, "the rival waits for room", func(ctx context.Context) (bool, string, error) {
		var pg berthv1alpha1.PodGroup
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rival"}, &pg); err != nil {
			return false, "", err
		}
		cond := meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionScheduled)
		if len(pg.Status.Assignments) > 0 {
			return false, "", fmt.Errorf("the rival was promised %v while ddp holds 4 of ha-a's 8 GPUs", pg.Status.Assignments)
		}
		return cond != nil && cond.Reason == berthv1alpha1.ReasonUnschedulable, fmt.Sprintf("%+v", cond), nil
	})
	for _, p := range groupPods(t, ns, "rival") {
		if p.Spec.NodeName != "" || len(p.Spec.SchedulingGates) == 0 {
			t.Errorf("rival member %s released (node %q) while ddp holds the room", p.Name, p.Spec.NodeName)
		}
	}

	// Once ddp is gone, B admits the rival.
	for _, p := range groupPods(t, ns, "ddp") {
		if err := c.Delete(ctx, &p, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delete(ctx, &berthv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ddp"}}); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "replica B admits the rival once ddp is gone", func(ctx context.Context) (bool, string, error) {
		pods := groupPods(t, ns, "rival")
		return len(pods) == 1 && pods[0].Spec.NodeName == "ha-a", fmt.Sprintf("%d pods, node %q", len(pods), func() string {
			if len(pods) == 0 {
				return ""
			}
			return pods[0].Spec.NodeName
		}()), nil
	})
}

// waitHolder waits until the controller's Lease is held by someone other than not, and returns
// the holder.
func waitHolder(t *testing.T, not, what string) string {
	t.Helper()
	var holder string
	rigtest.Eventually(t, 45*time.Second, 200*time.Millisecond, what, func(ctx context.Context) (bool, string, error) {
		var l coordinationv1.Lease
		err := rigtest.Current().Client.Get(ctx, client.ObjectKey{Namespace: rig.BerthNamespace, Name: controllers.LeaderElectionID}, &l)
		if err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		holder = ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return holder != "" && holder != not, "holder " + holder, nil
	})
	return holder
}

// holderNow is the controller's Lease holder now: "" when there is no Lease or no holder.
func holderNow(t *testing.T) string {
	t.Helper()
	var l coordinationv1.Lease
	err := rigtest.Current().Client.Get(context.Background(), client.ObjectKey{Namespace: rig.BerthNamespace, Name: controllers.LeaderElectionID}, &l)
	if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func groupPods(t *testing.T, ns, group string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := rigtest.Current().Client.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: group}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// TestCleanStopHandsOverAtOnce: the leader stopped cleanly (SIGTERM, as a rolling update
// stops it) gives the Lease up once its reconcilers have stopped, so the standby leads well
// within the 15 s the Lease would otherwise hold.
func TestCleanStopHandsOverAtOnce(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	before := holderNow(t)
	first, err := berth.StartReplica(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	leader := waitHolder(t, before, "the first replica leads")
	standby, err := berth.StartReplica(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.StopComponent(first, 5*time.Second)
		_ = r.StopComponent(standby, 5*time.Second)
	})
	if err := r.StopComponent(first, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Without the hand-over the stopped leader's name stays on the Lease until it expires,
	// 15 s after its last renewal.
	stopped := time.Now()
	if h := holderNow(t); h == leader {
		t.Errorf("the Lease still names the leader that stopped cleanly (%s)", h)
	}
	waitHolder(t, leader, "the standby takes the Lease")
	// The standby retries every 2 s (RetryPeriod, with jitter).
	if took := time.Since(stopped); took > 8*time.Second {
		t.Errorf("the standby led %v after the leader stopped cleanly: the Lease was not given up", took.Round(100*time.Millisecond))
	}
	logFirst, err := os.ReadFile(filepath.Join(r.LogDir(), first+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logFirst), "gave up the leader Lease") {
		t.Error("the stopped leader's log does not say it gave up the Lease")
	}
}
