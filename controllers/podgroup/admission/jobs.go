package admission

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A Job's last wave. A Job with completions runs at most min(parallelism, completions −
// succeeded) pods at once, so its final wave can be smaller than minMember (completions 6,
// parallelism 4, minMember 4: a wave of 4, then one of 2). Waiting for minMember members there
// would hold the last wave forever; the gang instead waits for as many members as its Jobs
// will still run at once, never more than minMember.

// jobRecheck is how soon a gang whose Jobs bound its wave is looked at again: a Job's status
// (its succeeded count) can trail the pods that created the wave.
const jobRecheck = 2 * time.Second

// jobTTL is how long a Job read is reused across cycles.
const jobTTL = time.Second

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get

// jobWave is what a Job will still run at once.
type jobWave struct {
	// running is min(parallelism, completions − succeeded); 0 once the Job finished.
	running int
	// full is min(parallelism, completions): the size of its waves but the last.
	full int
	// bounded is false for a Job without completions (a work queue: its pods stop on their
	// own, and it starts no new wave).
	bounded bool
}

// waveOf is the wave a Job will still run (pure).
func waveOf(job *batchv1.Job) jobWave {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return jobWave{running: 0, bounded: true}
		}
	}
	if job.Spec.Completions == nil {
		return jobWave{}
	}
	parallelism := int32(1)
	if job.Spec.Parallelism != nil {
		parallelism = *job.Spec.Parallelism
	}
	left := *job.Spec.Completions - job.Status.Succeeded
	return jobWave{running: int(max(0, min(parallelism, left))), full: int(min(parallelism, *job.Spec.Completions)), bounded: true}
}

// jobReads reads members' Jobs around the cache (berth watches no Jobs), each reused for
// jobTTL.
type jobReads struct {
	mu   sync.Mutex
	seen map[types.UID]jobRead
}

type jobRead struct {
	at   time.Time
	wave jobWave
	// gone: the Job does not exist (any more).
	gone bool
}

// waveNeed is how many fresh members a gang without an admitted generation waits for: its
// minMember, or fewer when the gang is one Job of its own (no workload above it: a JobSet's
// Jobs start at different moments, so one Job's wave says nothing about the gang) whose
// remaining completions run fewer pods at once (the last wave). bounded says the Job set the
// number (look again in jobRecheck: its status may trail its pods).
func (r *Reconciler) waveNeed(ctx context.Context, gv gangView, gen generation) (need int, bounded bool, err error) {
	need = int(gv.group.Spec.MinMember)
	if len(gen.fresh) == 0 || len(gen.fresh) >= need {
		return need, false, nil
	}
	var job *metav1.OwnerReference
	for _, p := range gv.members {
		ref := metav1.GetControllerOf(p)
		switch {
		case ref == nil || ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String():
			// A member the Job does not account for: the gang needs minMember.
			return need, false, nil
		case job == nil:
			job = ref
		case job.UID != ref.UID:
			return need, false, nil // several Jobs: a workload above them
		}
	}
	for _, ps := range [][]*corev1.Pod{gen.fresh, gen.held} {
		for _, p := range ps {
			if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != job.UID {
				return need, false, nil
			}
		}
	}
	w, err := r.jobWave(ctx, types.NamespacedName{Namespace: gv.group.Namespace, Name: job.Name}, job.UID)
	if err != nil || !w.bounded || w.full < need {
		// A Job whose full wave cannot fill the gang is not the whole gang: its other members
		// (another Job, a launcher) have not been created yet.
		return need, false, err
	}
	if w.running >= need {
		return need, true, nil
	}
	return max(1, w.running), true, nil
}

// jobWave reads a Job's wave (reused for jobTTL). A Job that is gone (or replaced: another
// UID) runs nothing more; a Job with a controller of its own (a JobSet's) is not bounded.
func (r *Reconciler) jobWave(ctx context.Context, key types.NamespacedName, uid types.UID) (jobWave, error) {
	now := r.clock.Now()
	r.jobs.mu.Lock()
	seen, ok := r.jobs.seen[uid]
	r.jobs.mu.Unlock()
	if ok && now.Sub(seen.at) < jobTTL {
		return seen.wave, nil
	}
	var job batchv1.Job
	read := jobRead{at: now}
	switch err := r.apiReader.Get(ctx, key, &job); {
	case apierrors.IsNotFound(err) || (err == nil && job.UID != uid):
		// Gone (or replaced): its orphaned pods say nothing about a wave.
		read.gone, read.wave = true, jobWave{}
	case err != nil:
		return jobWave{}, fmt.Errorf("reading Job %s: %w", key, err)
	case metav1.GetControllerOf(&job) != nil:
		read.wave = jobWave{} // part of a larger workload
	default:
		read.wave = waveOf(&job)
	}
	r.jobs.mu.Lock()
	if r.jobs.seen == nil {
		r.jobs.seen = map[types.UID]jobRead{}
	}
	r.jobs.seen[uid] = read
	r.jobs.mu.Unlock()
	return read.wave, nil
}

// forgetJobs drops reads older than jobTTL (called once per cycle).
func (r *Reconciler) forgetJobs(now time.Time) {
	r.jobs.mu.Lock()
	defer r.jobs.mu.Unlock()
	for k, v := range r.jobs.seen {
		if now.Sub(v.at) >= jobTTL {
			delete(r.jobs.seen, k)
		}
	}
}
