package server

import (
	"context"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/berth-dev/berth/scaler/targets"
)

// specShared is how long one read of a scale target's spec.replicas answers the evaluations
// that need it fresh: the HPA asks for each of a ScaledObject's metrics in turn, within
// milliseconds, and one read serves them all; its next sync (15 s on) reads again.
const specShared = time.Second

// specReadTimeout bounds one read of a scale target's /scale: a slow API server delays the
// evaluation by at most this, which then holds at the live replicas.
const specReadTimeout = 2 * time.Second

// specs keeps each ScaledObject's last read of its scale target's spec.replicas, and which
// ScaledObjects were told their read failed (said once until a read succeeds again).
type specs struct {
	mu     sync.Mutex
	m      map[[2]string]specRead
	warned map[[2]string]bool
}

type specRead struct {
	target targets.TargetRef
	n      int
	at     time.Time
}

// replicas is the scale target's spec.replicas for an evaluation of a ScaledObject resolved to
// info: read now for an evaluation whose answer the HPA acts on (fresh; reads within
// specShared shared), the last read for one that only says whether the ScaledObject is active
// — KEDA asks that every second on a stream, and its decision is recorded but never becomes a
// replica count. ok is false with no read (a ScaledJob, a podSelector trigger, a failed read:
// the decision then holds at the live replicas).
func (s *specs) replicas(ctx context.Context, r Resolver, namespace, name string, info targets.Info, fresh bool, now time.Time) (int, bool) {
	if info.Target == nil {
		return 0, false
	}
	k := [2]string{namespace, name}
	s.mu.Lock()
	last, have := s.m[k]
	s.mu.Unlock()
	have = have && last.target == *info.Target // a ScaledObject retargeted reads its new target
	if have && (!fresh || now.Sub(last.at) < specShared) {
		return last.n, true
	}
	if !fresh {
		return 0, false
	}
	rctx, cancel := context.WithTimeout(ctx, specReadTimeout)
	defer cancel()
	n, ok, err := r.Replicas(rctx, namespace, info)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m, s.warned = map[[2]string]specRead{}, map[[2]string]bool{}
	}
	switch {
	case err != nil:
		delete(s.m, k)
		targetReadErrors.WithLabelValues(namespace, name).Inc()
		if !s.warned[k] {
			s.warned[k] = true
			log.FromContext(ctx).Error(err, "reading the scale target's spec.replicas failed; held decisions keep the live replicas until a read succeeds (said once)", "namespace", namespace, "scaledObject", name)
		}
		return 0, false
	case !ok:
		delete(s.m, k)
		return 0, false
	}
	delete(s.warned, k)
	s.m[k] = specRead{target: *info.Target, n: n, at: now}
	return n, true
}

// expire forgets the reads of ScaledObjects not read since before.
func (s *specs) expire(before time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, r := range s.m {
		if r.at.Before(before) {
			delete(s.m, k)
		}
	}
	clear(s.warned) // said again once a period, for the ScaledObjects still failing
}
