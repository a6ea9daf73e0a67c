package warmseats

import (
	"sync"
	"time"
)

// Key names a ScaledObject.
type Key struct{ Namespace, Name string }

// Want is how many seats the scaler's latest evaluation of a ScaledObject asked for: exactly
// Seats, or at least Seats and keep any more there are (AtLeast: the scaler held its decision).
type Want struct {
	Seats   int
	AtLeast bool
	At      time.Time
	// Source is the connection of the KEDA client whose call set it ("" when unknown): when
	// that connection ends, the want goes with it (Disconnected).
	Source string
}

// Wants is what the scaler's evaluations ask of the keeper, per ScaledObject. The engine sets
// it on every GetMetrics evaluation (the call whose answer sets the replicas, and the split
// between serving replicas and seats); the keeper reads it. Safe for concurrent use.
type Wants struct {
	mu sync.Mutex
	m  map[Key]Want
	// refused says why the keeper keeps no seats for a ScaledObject that asks for them (a
	// LeaderWorkerSet target, a target without a pod template, a target that is not there).
	refused map[Key]string
	// ended are the connections that ended, and when: a call still running on one when it
	// ended sets no want after it (gRPC tells of the end before the connection's calls return).
	ended map[string]time.Time
}

// endedFor is how long an ended connection is remembered: far longer than a call runs.
const endedFor = 2 * time.Minute

// Refuse records that the keeper keeps no seats for k, and why ("" withdraws it): the policy
// then holds none of k's headroom as seats (Engine).
func (w *Wants) Refuse(k Key, why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if why == "" {
		delete(w.refused, k)
		return
	}
	if w.refused == nil {
		w.refused = map[Key]string{}
	}
	w.refused[k] = why
}

// Refused says why the keeper keeps no seats for k ("" when it does, or has not looked yet).
func (w *Wants) Refused(k Key) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refused[k]
}

// Set records that the latest evaluation of k at now asked for seats — or, held, for at least
// seats and whatever more there is (then the last exact count asked for stands, if higher).
func (w *Wants) Set(k Key, seats int, held bool, now time.Time) {
	w.SetFrom("", k, seats, held, now)
}

// SetFrom is Set for an evaluation a call over the KEDA connection source asked for.
func (w *Wants) SetFrom(source string, k Key, seats int, held bool, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, gone := w.ended[source]; gone && source != "" {
		return // the call outlived its connection: KEDA asks elsewhere now
	}
	if w.m == nil {
		w.m = map[Key]Want{}
	}
	if old, ok := w.m[k]; ok && held {
		// Through the whole hold, not only its first evaluation: a cold start is several
		// evaluations long, and the seats replicas take in it come back.
		seats = max(seats, old.Seats)
	}
	w.m[k] = Want{Seats: seats, AtLeast: held, At: now, Source: source}
}

// Disconnected forgets the wants last set over the connection source, which ended at now, and returns
// their ScaledObjects. KEDA's operator asks one scaler replica over one connection; when it
// asks another (it restarted, or a new leader took over), its old connection ends. The replica
// it left then leaves those fleets alone at once — their wants are another replica's now —
// instead of keeping its last wants against the new replica's until they age out (WantTTL),
// one keeper creating the seats the other deletes. A call on it that is still running sets
// no want when it returns.
func (w *Wants) Disconnected(source string, now time.Time) []Key {
	if source == "" {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended == nil {
		w.ended = map[string]time.Time{}
	}
	for s, at := range w.ended {
		if now.Sub(at) > endedFor {
			delete(w.ended, s)
		}
	}
	w.ended[source] = now
	var gone []Key
	for k, v := range w.m {
		if v.Source == source {
			delete(w.m, k)
			gone = append(gone, k)
		}
	}
	return gone
}

// Fresh returns the wants set at or after since, and forgets the others.
func (w *Wants) Fresh(since time.Time) map[Key]Want {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[Key]Want{}
	for k, v := range w.m {
		if v.At.Before(since) {
			delete(w.m, k)
			delete(w.refused, k)
			continue
		}
		out[k] = v
	}
	return out
}
