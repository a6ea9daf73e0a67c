package admission

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
)

// Failure isolation: the admission cycle is one cluster-wide work item, so an error returned to
// controller-runtime backs every gang off together — up to 1000 s, its rate limiter's cap —
// and one gang whose writes are refused delays every other gang's timeouts, retries and
// stranded timers. Instead a gang whose step fails backs off alone (gangBackoffBase doubling up
// to gangBackoffMax), says so once per distinct error (an Event; the admission error counter),
// and the cycle still returns the other gangs' next deadline. The cluster-wide sweeps back off
// the same way.

// Backoff of a gang (or the sweeps) whose step failed.
const (
	gangBackoffBase = time.Second
	gangBackoffMax  = 5 * time.Minute
)

// failure is a gang's run of failed steps.
type failure struct {
	count   int
	retryAt time.Time
	last    string
}

// backoffOf is how long a run of n failures waits before the next try.
func backoffOf(n int) time.Duration {
	d := gangBackoffBase
	for i := 1; i < n && d < gangBackoffMax; i++ {
		d *= 2
	}
	return min(d, gangBackoffMax)
}

// backingOff reports whether the step of key (a gang's UID, or sweepsKey) is backing off at
// now, and how long it still waits.
func (r *Reconciler) backingOff(key types.UID, now time.Time) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.failures[key]
	if !ok || !now.Before(f.retryAt) {
		return 0, false
	}
	return f.retryAt.Sub(now), true
}

// recovered ends key's run of failures.
func (r *Reconciler) recovered(key types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.failures, key)
}

// fail records a failed step of key at now and returns its backoff, and whether the error is
// new for the run (to be reported).
func (r *Reconciler) fail(key types.UID, err error, now time.Time) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.failures[key]
	f.count++
	wait := backoffOf(f.count)
	f.retryAt = now.Add(wait)
	fresh := f.last != err.Error()
	f.last = err.Error()
	r.failures[key] = f
	return wait, fresh
}

// gangFailed isolates a failed step of gang g: its own backoff, the error logged and counted,
// and an Event when the error is new. It returns the backoff.
func (r *Reconciler) gangFailed(ctx context.Context, g *berthv1alpha1.PodGroup, err error, now time.Time) time.Duration {
	wait, fresh := r.fail(g.UID, err, now)
	admissionErrors.WithLabelValues(g.Namespace, g.Name).Inc()
	log.FromContext(ctx).Error(err, "gang step failed; it backs off alone", "podgroup", client.ObjectKeyFromObject(g), "retryIn", wait)
	if fresh {
		r.recorder.Warning(g, events.ReasonGangStepFailed, fmt.Sprintf("berth could not move the gang forward (%v); it tries again in %s, and every other gang goes on", err, wait))
	}
	return wait
}

// sweepsKey keys the cluster-wide sweeps' failures.
const sweepsKey = types.UID("sweeps")

// remembersPods reports whether anything is remembered by pod UID (forgetGone,
// forgetUnschedulable prune it).
func (r *Reconciler) remembersPods() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.unschedulableSeen)+len(r.orphansSeen) > 0
}

// forgetGone prunes what the reconciler remembers across cycles of gangs and pods that are
// gone: all-bound latencies observed (by gang UID and generation), orphans reported (by pod
// UID) and failure runs (by gang UID). Kept otherwise, they grew with every gang, generation and
// pod a long-lived controller ever saw. pods says which pod UIDs exist.
func (r *Reconciler) forgetGone(live map[types.UID]*berthv1alpha1.PodGroup, pods map[types.UID]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key := range r.boundSeen {
		if uid, _, _ := strings.Cut(key, "/"); live[types.UID(uid)] == nil {
			delete(r.boundSeen, key)
		}
	}
	for uid := range r.orphansSeen {
		if !pods[uid] {
			delete(r.orphansSeen, uid)
		}
	}
	for uid := range r.failures {
		if uid != sweepsKey && live[uid] == nil {
			delete(r.failures, uid)
		}
	}
}
