package lifecycle_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestIndexedJobLifecycle: an Indexed Job of 4 ranks × 2 GPUs, admitted whole.
//
//  1. One rank's pod fails once: the Job controller retries the rank, berth admits the retry
//     into the gang's placement (the node its predecessor ran on), the other ranks keep their
//     do-not-disrupt protection the whole time, and the PodGroup never goes final.
//  2. Every pod is lost at once — evicted (as a node drain or a spot reclaim does), then
//     deleted (as a user or a script does): each time the Job controller recreates all four, and
//     berth admits the new generation whole — no member binds while another is still gated.
func TestIndexedJobLifecycle(t *testing.T) {
	ns := namespace(t, "ranks")
	create(t, builders.PodGroup("ddp", ns).MinMember(4).Obj(),
		indexedJob(ns, "ddp", 4, 4, 6, podTemplate("ddp", "g6e", "1h", container(2, nil))))
	stop := observe(ns, "ddp")
	ranks := waitRunning(t, ns, "ddp", 4, 3*time.Minute)
	stop().check(t)

	t.Run("a rank fails once and its retry joins the gang", func(t *testing.T) {
		victim := ranks[2]
		index := victim.Annotations[batchv1.JobCompletionIndexAnnotation]
		var survivors []string
		for _, r := range ranks {
			if r.Name != victim.Name {
				survivors = append(survivors, r.Name)
			}
		}
		// The ranks just started: protection follows each one's Running within a reconcile.
		// Watch for a loss only once every survivor carries it.
		rigtest.Eventually(t, 10*time.Second, 50*time.Millisecond, "every running rank protected", func(ctx context.Context) (bool, string, error) {
			ms, err := members(ctx, ns, "ddp")
			if err != nil {
				return false, "", err
			}
			var bare []string
			for _, m := range ms {
				if slices.Contains(survivors, m.Name) && m.Annotations[karpv1.DoNotDisruptAnnotationKey] != "true" {
					bare = append(bare, m.Name)
				}
			}
			return len(bare) == 0, fmt.Sprintf("not yet protected: %v", bare), nil
		})
		unprotected := watchProtection(ns, "ddp", survivors)
		failedAt := failPod(t, &victim)
		var retry corev1.Pod
		rigtest.Eventually(t, time.Minute, 50*time.Millisecond, "rank "+index+"'s retry running", func(ctx context.Context) (bool, string, error) {
			ms, err := members(ctx, ns, "ddp")
			if err != nil {
				return false, "", err
			}
			for _, m := range ms {
				if m.Annotations[batchv1.JobCompletionIndexAnnotation] == index && m.UID != victim.UID && m.Status.Phase == corev1.PodRunning {
					retry = m
					return true, "", nil
				}
			}
			_, detail := running(ms)
			return false, detail, nil
		})
		recovery := time.Since(failedAt)
		created := retry.CreationTimestamp.Sub(failedAt)
		t.Logf("rank %s failed; the Job controller created its retry %s %s later (its failure backoff); the retry ran on %s %s after its creation (%s after the failure)",
			index, retry.Name, created.Round(time.Millisecond), retry.Spec.NodeName, (recovery - created).Round(time.Millisecond), recovery.Round(time.Millisecond))
		if retry.Spec.NodeName != victim.Spec.NodeName {
			t.Errorf("the retry runs on %s, its predecessor ran on %s (the gang's placement has room there)", retry.Spec.NodeName, victim.Spec.NodeName)
		}
		if lost := unprotected(); len(lost) > 0 {
			t.Errorf("surviving ranks lost their do-not-disrupt protection while the rank was retried: %v", lost)
		}
		// The status controller follows the retry's Running within a reconcile, and the PodGroup
		// is never final on the way.
		rigtest.Eventually(t, 10*time.Second, 100*time.Millisecond, "the PodGroup Running again with its retried rank", func(ctx context.Context) (bool, string, error) {
			pg, err := getGroup(ctx, ns, "ddp")
			if err != nil {
				return false, "", err
			}
			if pg.Status.Phase == berthv1alpha1.PodGroupFailed || pg.Status.Phase == berthv1alpha1.PodGroupSucceeded {
				return false, "", fmt.Errorf("PodGroup went final (%s) after a rank's retry: %v", pg.Status.Phase, conditionSummary(pg))
			}
			return pg.Status.Phase == berthv1alpha1.PodGroupRunning, fmt.Sprintf("phase %s: %v", pg.Status.Phase, conditionSummary(pg)), nil
		})
		waitRunning(t, ns, "ddp", 4, 10*time.Second)
	})

	for _, loss := range []struct {
		how  string
		lose func(t *testing.T, pods []corev1.Pod)
	}{
		{"evicted", evict},
		{"deleted", deletePods},
	} {
		t.Run("every pod "+loss.how+" at once: the new generation is admitted whole", func(t *testing.T) {
			lossOfEveryRank(t, ns, loss.how, loss.lose)
		})
	}
}

// lossOfEveryRank loses every live rank of the ddp gang at once (lose) and checks that the
// ranks the Job recreates are admitted whole as one new generation.
func lossOfEveryRank(t *testing.T, ns, how string, lose func(*testing.T, []corev1.Pod)) {
	t.Helper()
	ctx := context.Background()
	pg, err := getGroup(ctx, ns, "ddp")
	if err != nil {
		t.Fatal(err)
	}
	restarts := pg.Status.Restarts
	stop := observe(ns, "ddp")
	lost := liveOnly(mustMembers(t, ns, "ddp"))
	evictedAt := time.Now()
	lose(t, lost)
	again := waitRunningOr(t, ns, "ddp", 4, 2*time.Minute, func(ctx context.Context) string {
		var job batchv1.Job
		if err := rigtest.Current().Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ddp"}, &job); err != nil {
			return err.Error()
		}
		var all corev1.PodList
		if err := rigtest.Current().Client.List(ctx, &all, client.InNamespace(ns)); err != nil {
			return err.Error()
		}
		var pods []string
		for _, p := range all.Items {
			pods = append(pods, fmt.Sprintf("%s %s deleting=%v finalizers=%v", p.Name, p.Status.Phase, p.DeletionTimestamp != nil, p.Finalizers))
		}
		var evs corev1.EventList
		if err := rigtest.Current().Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err.Error()
		}
		var said []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Job" {
				said = append(said, e.Reason+": "+e.Message)
			}
		}
		return fmt.Sprintf("Job: active %d, failed %d, terminating %v, conditions %v; pods %v; Job events %v",
			job.Status.Active, job.Status.Failed, ptr.Deref(job.Status.Terminating, -1), job.Status.Conditions, pods, said)
	})
	stop().check(t)
	var lastCreated time.Time
	for _, m := range again {
		if m.CreationTimestamp.After(lastCreated) {
			lastCreated = m.CreationTimestamp.Time
		}
	}
	t.Logf("all 4 ranks %s; the Job controller recreated them within %s; all 4 ran %s after the last was created",
		how, lastCreated.Sub(evictedAt).Round(time.Millisecond), time.Since(lastCreated).Round(time.Millisecond))
	rigtest.Eventually(t, 10*time.Second, 100*time.Millisecond, "the restart counted", func(ctx context.Context) (bool, string, error) {
		pg, err := getGroup(ctx, ns, "ddp")
		if err != nil {
			return false, "", err
		}
		return pg.Status.Restarts == restarts+1 && pg.Status.Phase == berthv1alpha1.PodGroupRunning,
			fmt.Sprintf("restarts %d (was %d), phase %s", pg.Status.Restarts, restarts, pg.Status.Phase), nil
	})
}

// deletePods deletes pods through the API, as a user or a script does (no eviction: the Job
// counts them as failed).
func deletePods(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	for i := range pods {
		if err := rigtest.Current().Client.Delete(context.Background(), &pods[i]); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
}

func mustMembers(t *testing.T, ns, group string) []corev1.Pod {
	t.Helper()
	ms, err := members(context.Background(), ns, group)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// watchProtection polls the gang's members until the returned function is called and reports
// every one of the named members seen running without karpenter.sh/do-not-disrupt.
func watchProtection(ns, group string, names []string) func() []string {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var lost []string
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			ms, err := members(ctx, ns, group)
			if err == nil {
				for _, m := range ms {
					if slices.Contains(names, m.Name) && m.Status.Phase == corev1.PodRunning && m.Annotations[karpv1.DoNotDisruptAnnotationKey] != "true" {
						lost = append(lost, m.Name)
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return func() []string {
		cancel()
		<-done
		return lost
	}
}

// TestWavesAsGangs: an Indexed Job with completions 8 and parallelism 4 runs two waves of four;
// each wave is admitted as a gang (never a member bound while another of its wave is gated),
// the second only once the first has finished (no second-wave index bound while a first-wave
// one is live), and the PodGroup succeeds with the Job after exactly one new generation. With
// completions 6 the last wave has 2 members, fewer than minMember 4: it is admitted at its own
// size instead of waiting forever.
func TestWavesAsGangs(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		completions, parallelism int32
	}{
		// Two waves of 4.
		{"even", 8, 4},
		// A wave of 4, then a last wave of 2: smaller than minMember, admitted at its own size.
		{"last wave smaller than minMember", 6, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t, "waves")
			create(t, builders.PodGroup("waves", ns).MinMember(4).Obj(),
				indexedJob(ns, "waves", tc.completions, tc.parallelism, 0, podTemplate("waves", "g6e", "5s", container(1, nil))))
			stop := observe(ns, "waves")
			defer func() { stop().check(t) }()
			stopWaves := watchWaves(ns, "waves", int(tc.parallelism))
			defer func() {
				for _, v := range stopWaves() {
					t.Errorf("waves overlap: %s", v)
				}
			}()
			rigtest.Eventually(t, 4*time.Minute, 200*time.Millisecond, "the Job completes", func(ctx context.Context) (bool, string, error) {
				var job batchv1.Job
				if err := rigtest.Current().Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "waves"}, &job); err != nil {
					return false, "", err
				}
				ms, err := members(ctx, ns, "waves")
				if err != nil {
					return false, "", err
				}
				_, detail := running(ms)
				if job.Status.Failed > 0 {
					return false, "", fmt.Errorf("the Job has %d failed pods, conditions %v; %s", job.Status.Failed, job.Status.Conditions, detail)
				}
				pg, err := getGroup(ctx, ns, "waves")
				if err != nil {
					return false, "", err
				}
				return job.Status.Succeeded == tc.completions, fmt.Sprintf("succeeded %d, active %d; %s; PodGroup %v", job.Status.Succeeded, job.Status.Active, detail, conditionSummary(pg)), nil
			})
			rigtest.Eventually(t, 20*time.Second, 200*time.Millisecond, "PodGroup Succeeded after exactly two generations", func(ctx context.Context) (bool, string, error) {
				pg, err := getGroup(ctx, ns, "waves")
				if err != nil {
					return false, "", err
				}
				if pg.Status.Restarts > 1 {
					return false, "", fmt.Errorf("%d generations after the first; two waves make one", pg.Status.Restarts)
				}
				return pg.Status.Phase == berthv1alpha1.PodGroupSucceeded && pg.Status.Restarts == 1,
					fmt.Sprintf("phase %s, restarts %d %v", pg.Status.Phase, pg.Status.Restarts, conditionSummary(pg)), nil
			})
		})
	}
}

// watchWaves polls the gang every 20 ms for a pod of a later wave (completion index ≥
// parallelism) bound while a pod of the first wave is neither finished nor gone.
func watchWaves(ns, group string, parallelism int) func() []string {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var violations []string
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			ms, err := members(ctx, ns, group)
			if err == nil {
				var live, bound []string
				for _, m := range ms {
					idx, err := strconv.Atoi(m.Annotations[batchv1.JobCompletionIndexAnnotation])
					if err != nil {
						continue
					}
					finished := m.Status.Phase == corev1.PodSucceeded || m.Status.Phase == corev1.PodFailed
					if idx < parallelism && !finished {
						live = append(live, m.Name)
					}
					if idx >= parallelism && m.Spec.NodeName != "" {
						bound = append(bound, m.Name)
					}
				}
				if len(live) > 0 && len(bound) > 0 && len(violations) < 5 {
					violations = append(violations, fmt.Sprintf("%v bound while %v of the first wave live", bound, live))
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() []string {
		cancel()
		<-done
		return violations
	}
}

// TestLostRankGetsCapacityInTheGangsZone: a 2-rank × 8-GPU Indexed Job placed in one zone loses
// a rank's node (cordoned and drained, as node repair or a spot reclaim does). Nothing left fits
// the retry, so berth asks Karpenter for a node for it — in the gang's zone — and admits it there;
// the surviving rank keeps running, protected, and the PodGroup never goes final.
func TestLostRankGetsCapacityInTheGangsZone(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t, "reclaim")
	pg := builders.PodGroup("big", ns).MinMember(2).Topology(corev1.LabelTopologyZone).Obj()
	create(t, pg, indexedJob(ns, "big", 2, 2, 3, podTemplate("big", "g6e", "1h", container(8, nil))))
	ranks := waitRunning(t, ns, "big", 2, 3*time.Minute)
	zoneOf := func(node string) string {
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			t.Fatal(err)
		}
		return n.Labels[corev1.LabelTopologyZone]
	}
	zone := zoneOf(ranks[0].Spec.NodeName)
	lost, survivor := ranks[1], ranks[0]
	var node corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: lost.Spec.NodeName}, &node); err != nil {
		t.Fatal(err)
	}
	node.Spec.Unschedulable = true
	if err := c.Update(ctx, &node); err != nil {
		t.Fatal(err)
	}
	unprotected := watchProtection(ns, "big", []string{survivor.Name})
	lostAt := time.Now()
	evict(t, []corev1.Pod{lost})
	var retry corev1.Pod
	rigtest.Eventually(t, 3*time.Minute, 100*time.Millisecond, "the lost rank's retry running", func(ctx context.Context) (bool, string, error) {
		ms, err := members(ctx, ns, "big")
		if err != nil {
			return false, "", err
		}
		for _, m := range ms {
			if m.Annotations[batchv1.JobCompletionIndexAnnotation] == "1" && m.UID != lost.UID && m.Status.Phase == corev1.PodRunning {
				retry = m
				return true, "", nil
			}
		}
		g, err := getGroup(ctx, ns, "big")
		if err != nil {
			return false, "", err
		}
		if g.Status.Phase == berthv1alpha1.PodGroupFailed || g.Status.Phase == berthv1alpha1.PodGroupSucceeded {
			return false, "", fmt.Errorf("PodGroup went final (%s) after losing a rank: %v", g.Status.Phase, conditionSummary(g))
		}
		_, detail := running(ms)
		return false, fmt.Sprintf("%s; %s %v", detail, g.Status.Phase, conditionSummary(g)), nil
	})
	t.Logf("rank 1's node was lost; its retry runs on the new node %s %s later", retry.Spec.NodeName, time.Since(lostAt).Round(time.Millisecond))
	if retry.Spec.NodeName == lost.Spec.NodeName || retry.Spec.NodeName == survivor.Spec.NodeName {
		t.Errorf("the retry runs on %s; want a new node (the lost one is cordoned, the survivor's is full)", retry.Spec.NodeName)
	}
	if z := zoneOf(retry.Spec.NodeName); z != zone {
		t.Errorf("the retry's node is in %s, the gang's zone is %s", z, zone)
	}
	if lost := unprotected(); len(lost) > 0 {
		t.Errorf("the surviving rank lost its do-not-disrupt protection: %v", lost)
	}
	var s corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(&survivor), &s); err != nil || s.UID != survivor.UID || s.Status.Phase != corev1.PodRunning {
		t.Errorf("the surviving rank did not keep running: %s %v", s.Status.Phase, err)
	}
}

// TestRestartGang: with onMemberLoss RestartGang, one failed rank of a running 2-rank Indexed
// Job makes berth delete the surviving rank (a framework whose ranks cannot rejoin a running
// job); the Job recreates both and they are admitted whole as the next generation — no rank of
// the old generation left running beside the new one, no member bound while another is gated,
// one restart counted and a GangRestarting Event.
func TestRestartGang(t *testing.T) {
	ns := namespace(t, "restartgang")
	create(t, builders.PodGroup("rg", ns).MinMember(2).OnMemberLoss(berthv1alpha1.MemberLossRestartGang).Obj(),
		indexedJob(ns, "rg", 2, 2, 3, podTemplate("rg", "g6e", "1h", container(1, nil))))
	ranks := waitRunning(t, ns, "rg", 2, 3*time.Minute)
	old := map[types.UID]bool{ranks[0].UID: true, ranks[1].UID: true}
	stop := observe(ns, "rg")
	defer func() { stop().check(t) }()
	failedAt := failPod(t, &ranks[0])
	rigtest.Eventually(t, 2*time.Minute, 100*time.Millisecond, "both ranks recreated and running as a new generation", func(ctx context.Context) (bool, string, error) {
		ms, err := members(ctx, ns, "rg")
		if err != nil {
			return false, "", err
		}
		fresh, survivors := 0, 0
		var detail []string
		for _, m := range ms {
			detail = append(detail, fmt.Sprintf("%s %s", m.Name, m.Status.Phase))
			switch {
			case old[m.UID] && m.Status.Phase == corev1.PodRunning && m.DeletionTimestamp == nil:
				survivors++
			case !old[m.UID] && m.Status.Phase == corev1.PodRunning:
				fresh++
			}
		}
		pg, err := getGroup(ctx, ns, "rg")
		if err != nil {
			return false, "", err
		}
		if survivors > 0 && fresh > 0 {
			return false, "", fmt.Errorf("an old rank runs beside a new one: %v", detail)
		}
		return fresh == 2 && survivors == 0 && pg.Status.Restarts == 1 && pg.Status.Phase == berthv1alpha1.PodGroupRunning,
			fmt.Sprintf("members %v; restarts %d, phase %s %v", detail, pg.Status.Restarts, pg.Status.Phase, conditionSummary(pg)), nil
	})
	t.Logf("rank 0 failed; both ranks of the new generation ran %s later", time.Since(failedAt).Round(time.Millisecond))
	var evs corev1.EventList
	if err := rigtest.Current().Client.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	restarting := 0
	for _, e := range evs.Items {
		if e.Reason == events.ReasonGangRestarting && e.InvolvedObject.Name == "rg" {
			restarting++
		}
	}
	// At least one: a cycle that runs before the cache shows the survivor's deletion deletes it
	// again (a no-op) and says so again; the restart itself is counted once (restarts 1 above).
	if restarting == 0 {
		t.Errorf("no GangRestarting Event on the PodGroup")
	}
}

// TestRestartGangDoesNotFailTheJob: an 8-rank Indexed Job with the default backoffLimit (6) and
// a pod failure policy that ignores disruptions, under onMemberLoss RestartGang: one rank
// fails, berth deletes the 7 others to restart the gang whole — marking each DisruptionTarget
// first, as an eviction does — and the Job counts one failure, not 8, and does not fail (a plain
// DELETE counted each as a failure: 8 > 6, the Job failed). The Job controller recreates the
// ranks only after its pod failure backoff, which counts the 7 ignored failures too (8 failed
// pods: 10 minutes); meanwhile the gang says what it waits for, and then the new generation is
// admitted whole.
func TestRestartGangDoesNotFailTheJob(t *testing.T) {
	ns := namespace(t, "restart8")
	job := indexedJob(ns, "r8", 8, 8, 0, podTemplate("r8", "g6e", "1h", container(1, nil)))
	job.Spec.BackoffLimit, job.Spec.BackoffLimitPerIndex = nil, nil // the default: 6 for the whole Job
	create(t, builders.PodGroup("r8", ns).MinMember(8).OnMemberLoss(berthv1alpha1.MemberLossRestartGang).Obj(), job)
	ranks := waitRunning(t, ns, "r8", 8, 4*time.Minute)
	old := map[types.UID]bool{}
	for _, r := range ranks {
		old[r.UID] = true
	}
	failedAt := failPod(t, &ranks[0])
	c := rigtest.Current().Client
	// jobState reads the Job, failing the test the moment it fails.
	jobState := func(ctx context.Context) (batchv1.Job, error) {
		var j batchv1.Job
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), &j); err != nil {
			return j, err
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
				return j, fmt.Errorf("the Job failed: %s: %s (failed %d)", cond.Reason, cond.Message, j.Status.Failed)
			}
		}
		return j, nil
	}
	rigtest.Eventually(t, 2*time.Minute, 200*time.Millisecond, "the gang restarted: the 7 live ranks deleted, the Job counting only the rank that failed", func(ctx context.Context) (bool, string, error) {
		var all corev1.PodList
		if err := c.List(ctx, &all, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		var left []string
		for _, p := range all.Items {
			if old[p.UID] && p.Status.Phase != corev1.PodFailed {
				left = append(left, p.Name)
			}
		}
		j, err := jobState(ctx)
		if err != nil {
			return false, "", err
		}
		settled := j.Status.UncountedTerminatedPods == nil || len(j.Status.UncountedTerminatedPods.Failed) == 0
		settled = settled && ptr.Deref(j.Status.Terminating, 0) == 0 && j.Status.Active == 0
		return len(left) == 0 && settled, fmt.Sprintf("old ranks left %v; Job active %d failed %d terminating %d", left, j.Status.Active, j.Status.Failed, ptr.Deref(j.Status.Terminating, 0)), nil
	})
	j, err := jobState(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The pod failure policy's only rule ignores DisruptionTarget: exactly one failure counted
	// means the 7 ranks berth deleted carried the condition when they ended.
	if j.Status.Failed != 1 {
		t.Errorf("the Job counts %d failures, want 1 (the rank that failed; the 7 berth deleted are disruptions)", j.Status.Failed)
	}
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "the gang says it waits for its workload", func(ctx context.Context) (bool, string, error) {
		pg, err := getGroup(ctx, ns, "r8")
		if err != nil {
			return false, "", err
		}
		cond := meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionScheduled)
		return cond != nil && cond.Reason == berthv1alpha1.ReasonWaitingForMembers && strings.Contains(cond.Message, "recreate"), fmt.Sprintf("Scheduled %+v", cond), nil
	})
	// The Job controller's backoff after 8 failed pods is its 10-minute maximum.
	rigtest.Eventually(t, 13*time.Minute, time.Second, "all 8 ranks recreated and running as a new generation", func(ctx context.Context) (bool, string, error) {
		ms, err := members(ctx, ns, "r8")
		if err != nil {
			return false, "", err
		}
		fresh := 0
		for _, m := range ms {
			if !old[m.UID] && m.Status.Phase == corev1.PodRunning {
				fresh++
			}
		}
		j, err := jobState(ctx)
		if err != nil {
			return false, "", err
		}
		pg, err := getGroup(ctx, ns, "r8")
		if err != nil {
			return false, "", err
		}
		return fresh == 8 && pg.Status.Restarts == 1, fmt.Sprintf("%d of 8 new ranks running; Job active %d failed %d; restarts %d; conditions %v",
			fresh, j.Status.Active, j.Status.Failed, pg.Status.Restarts, pg.Status.Conditions), nil
	})
	t.Logf("rank 0 failed; all 8 ranks of the new generation ran %s later", time.Since(failedAt).Round(time.Millisecond))
	if j, err = jobState(context.Background()); err != nil {
		t.Fatal(err)
	}
	if j.Status.Failed != 1 {
		t.Errorf("the Job counts %d failures after the restart, want 1", j.Status.Failed)
	}
}

// TestRestartGangReplacesBarePods: onMemberLoss RestartGang restarts gangs whose members have a
// controller to recreate them; members without one are replaced as with Replace, as the API
// promises. A 2-pod gang of bare pods loses one; its replacement (a new pod of the gang) is
// admitted into the gang's placement and runs, and the survivor is left running — before,
// the replacement stayed gated for good and nothing said why.
func TestRestartGangReplacesBarePods(t *testing.T) {
	ns := namespace(t, "restartbare")
	pod := func(name string) *corev1.Pod {
		p := builders.Pod(name, ns).GPU(1).NodeSelector(awsv1.LabelInstanceFamily, "g6e").
			Tolerate(berthv1alpha1.GPUResource, "", corev1.TaintEffectNoSchedule).Obj()
		p.Labels[berthv1alpha1.PodGroupLabel] = "bare"
		return p
	}
	create(t, builders.PodGroup("bare", ns).MinMember(2).OnMemberLoss(berthv1alpha1.MemberLossRestartGang).Obj(), pod("bare-0"), pod("bare-1"))
	ranks := waitRunning(t, ns, "bare", 2, 3*time.Minute)
	failPod(t, &ranks[0])
	create(t, pod("bare-0-again"))
	rigtest.Eventually(t, 2*time.Minute, 100*time.Millisecond, "the replacement runs beside the survivor", func(ctx context.Context) (bool, string, error) {
		ms, err := members(ctx, ns, "bare")
		if err != nil {
			return false, "", err
		}
		running := map[string]bool{}
		var detail []string
		for _, m := range ms {
			detail = append(detail, fmt.Sprintf("%s %s gated=%v", m.Name, m.Status.Phase, gated(&m)))
			running[m.Name] = m.Status.Phase == corev1.PodRunning
		}
		return running["bare-0-again"] && running["bare-1"], fmt.Sprint(detail), nil
	})
	var survivor corev1.Pod
	if err := rigtest.Current().Client.Get(context.Background(), client.ObjectKeyFromObject(&ranks[1]), &survivor); err != nil || survivor.UID != ranks[1].UID {
		t.Errorf("the survivor was not kept: %v", err)
	}
}
