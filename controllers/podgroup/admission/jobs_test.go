package admission

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

func TestWaveOf(t *testing.T) {
	job := func(completions *int32, parallelism int32, succeeded int32, done batchv1.JobConditionType) *batchv1.Job {
		j := &batchv1.Job{Spec: batchv1.JobSpec{Completions: completions, Parallelism: ptr.To(parallelism)}, Status: batchv1.JobStatus{Succeeded: succeeded}}
		if done != "" {
			j.Status.Conditions = []batchv1.JobCondition{{Type: done, Status: corev1.ConditionTrue}}
		}
		return j
	}
	tests := []struct {
		name string
		job  *batchv1.Job
		want jobWave
	}{
		{"first wave", job(ptr.To[int32](6), 4, 0, ""), jobWave{running: 4, full: 4, bounded: true}},
		{"last wave smaller than parallelism", job(ptr.To[int32](6), 4, 4, ""), jobWave{running: 2, full: 4, bounded: true}},
		{"status trailing the pods", job(ptr.To[int32](6), 4, 3, ""), jobWave{running: 3, full: 4, bounded: true}},
		{"every completion done", job(ptr.To[int32](6), 4, 6, ""), jobWave{running: 0, full: 4, bounded: true}},
		{"finished", job(ptr.To[int32](6), 4, 2, batchv1.JobFailed), jobWave{running: 0, bounded: true}},
		{"work queue: no completions", job(nil, 4, 1, ""), jobWave{}},
		{"fewer completions than parallelism", job(ptr.To[int32](2), 4, 0, ""), jobWave{running: 2, full: 2, bounded: true}},
		{"parallelism unset is 1", &batchv1.Job{Spec: batchv1.JobSpec{Completions: ptr.To[int32](3)}}, jobWave{running: 1, full: 1, bounded: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := waveOf(tt.job); got != tt.want {
				t.Errorf("waveOf = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestLastWaveOfAJobIsAdmitted: a Job with completions 6 and parallelism 4 under minMember 4
// runs a wave of 4, then one of 2. The second wave is admitted whole as soon as the Job's
// status says only 2 completions are left — not held forever for 4 members that will never
// exist — and not before (a trailing status waits and looks again).
func TestLastWaveOfAJobIsAdmitted(t *testing.T) {
	ctx := context.Background()
	node := builders.Node("n0").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj()
	pg := builders.PodGroup("w", "ml").MinMember(4).Obj()
	pg.Status.Assignments = nil
	var objs []client.Object
	for i := range 4 {
		pg.Status.Assignments = append(pg.Status.Assignments, berthv1alpha1.MemberAssignment{Pod: fmt.Sprintf("w-%d", i), Node: "n0"})
		objs = append(objs, builders.Pod(fmt.Sprintf("w-%d", i), "ml").Member("w").GPU(1).Node("n0").Phase(corev1.PodSucceeded).ControlledBy("batch/v1", "Job", "w").Obj())
	}
	for i := 4; i < 6; i++ {
		objs = append(objs, builders.Pod(fmt.Sprintf("w-%d", i), "ml").Member("w").Gated().GPU(1).ControlledBy("batch/v1", "Job", "w").Obj())
	}
	pg.Status.AdmittedAt = &metav1.Time{Time: time.Date(2026, 1, 1, 11, 0, 0, 0, time.UTC)}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ml", UID: "uid-w"},
		Spec:       batchv1.JobSpec{Completions: ptr.To[int32](6), Parallelism: ptr.To[int32](4)},
		// The Job controller has not counted the last success yet.
		Status: batchv1.JobStatus{Succeeded: 3},
	}
	objs = append(objs, node, pg, job)
	r, base, _, clk, _ := budgetHarness(t, objs...)

	if wait := cycleOnce(t, r); wait <= 0 || wait > jobRecheck {
		t.Errorf("a gang whose Job status trails asks to be looked at again in %v, want within %v", wait, jobRecheck)
	}
	got := read(t, base, pg)
	if cond := meta.FindStatusCondition(got.Status.Conditions, berthv1alpha1.ConditionScheduled); cond == nil || cond.Reason != berthv1alpha1.ReasonWaitingForMembers || cond.Message != "2 of 3 members exist" {
		t.Fatalf("with the Job's status trailing: Scheduled = %+v, want WaitingForMembers \"2 of 3 members exist\"", cond)
	}
	// The first wave's generation ended; the second is not admitted on a status that allows 3.
	if len(got.Status.Assignments) != 0 || got.Status.Restarts != 1 {
		t.Fatalf("after the first wave: assignments %v, restarts %d; want none yet, restarts 1", got.Status.Assignments, got.Status.Restarts)
	}

	job.Status.Succeeded = 4
	if err := base.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
	clk.Step(jobRecheck)
	cycleOnce(t, r)
	got = read(t, base, pg)
	var admitted []string
	for _, a := range got.Status.Assignments {
		admitted = append(admitted, a.Pod)
	}
	if fmt.Sprint(admitted) != "[w-4 w-5]" || got.Status.Restarts != 1 {
		t.Fatalf("last wave: assignments %v, restarts %d; want [w-4 w-5] admitted as the next generation", admitted, got.Status.Restarts)
	}
	for _, name := range []string{"w-4", "w-5"} {
		var p corev1.Pod
		if err := base.Get(ctx, client.ObjectKey{Namespace: "ml", Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.SchedulingGates) != 0 || p.Annotations[berthv1alpha1.PinnedNodeAnnotation] != "n0" {
			t.Errorf("%s: gates %v, pinned %q; want released to n0", name, p.Spec.SchedulingGates, p.Annotations[berthv1alpha1.PinnedNodeAnnotation])
		}
	}
}

// TestWaveNeedKeepsMinMember: only a gang that is one Job of its own (no JobSet above it), with
// completions, lowers the number it waits for; a pod without a Job, several Jobs, a JobSet's Job
// or a work-queue Job keep minMember.
func TestWaveNeedKeepsMinMember(t *testing.T) {
	ctx := context.Background()
	job := func(name string, completions *int32, owner *metav1.OwnerReference) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name)},
			Spec: batchv1.JobSpec{Completions: completions, Parallelism: ptr.To[int32](4)}}
		if owner != nil {
			j.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		return j
	}
	inSet := &metav1.OwnerReference{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "js", UID: "uid-js", Controller: ptr.To(true)}
	last := job("last", ptr.To[int32](6), nil)
	last.Status.Succeeded = 4
	r, _, _, _, _ := budgetHarness(t, job("b", ptr.To[int32](2), nil), job("q", nil, nil), job("s", ptr.To[int32](6), inSet), last)
	pg := builders.PodGroup("g", "ml").MinMember(4).Obj()
	pod := func(name, job string) *corev1.Pod {
		b := builders.Pod(name, "ml").Member("g").Gated()
		if job != "" {
			b = b.ControlledBy("batch/v1", "Job", job)
		}
		return b.Obj()
	}
	tests := []struct {
		name   string
		fresh  []*corev1.Pod
		need   int
		byJobs bool
	}{
		{"a Job's last wave of 2", []*corev1.Pod{pod("a", "last")}, 2, true},
		// Its full wave (2) cannot fill the gang (4): the gang's other members are not here yet
		// (a second Job, a launcher), so the first wave is not shrunk.
		{"a Job smaller than the gang", []*corev1.Pod{pod("a", "b")}, 4, false},
		{"a pod without a Job", []*corev1.Pod{pod("a", "last"), pod("c", "")}, 4, false},
		{"two Jobs", []*corev1.Pod{pod("a", "last"), pod("c", "q")}, 4, false},
		{"a JobSet's Job: its sibling may not have started", []*corev1.Pod{pod("a", "s")}, 4, false},
		{"a work-queue Job", []*corev1.Pod{pod("a", "q")}, 4, false},
		{"a Job that is gone: orphans say nothing", []*corev1.Pod{pod("a", "gone")}, 4, false},
		{"enough fresh members: no read", []*corev1.Pod{pod("a", "x"), pod("b", "x"), pod("c", "x"), pod("d", "x")}, 4, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			need, byJobs, err := r.waveNeed(ctx, gangView{group: pg, members: tt.fresh}, generation{fresh: tt.fresh})
			if err != nil || need != tt.need || byJobs != tt.byJobs {
				t.Errorf("waveNeed = %d, %v, %v; want %d, %v", need, byJobs, err, tt.need, tt.byJobs)
			}
		})
	}
}
