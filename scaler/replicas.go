package scaler

import "time"

// DefaultStartupTimeout is how long a replica that is not ready counts as capacity on its way
// unless the trigger sets startupTimeoutSeconds: long enough for a node to launch and a large
// model to load, short enough that a replica that never comes does not freeze the fleet.
const DefaultStartupTimeout = 10 * time.Minute

// Replicas are a scale target's live pods, split by what they mean for a scale-up.
type Replicas struct {
	// Ready pods serve traffic and are sampled.
	Ready []Pod
	// Starting pods may still become ready soon: capacity on its way.
	Starting int
	// Stalled pods will not become ready by themselves, or took longer than the startup
	// timeout: they never hold a scale-up.
	Stalled map[StallReason]int
}

// SplitReplicas sorts pods into ready, starting and stalled. A pod that is not ready is
// starting unless it is stuck (StallCrashLoop, StallUnschedulable) or older than
// startupTimeout (StallStartupTimeout); a startupTimeout of 0 means DefaultStartupTimeout.
func SplitReplicas(pods []Pod, now time.Time, startupTimeout time.Duration) Replicas {
	if startupTimeout <= 0 {
		startupTimeout = DefaultStartupTimeout
	}
	var r Replicas
	for _, p := range pods {
		switch {
		case p.Ready:
			r.Ready = append(r.Ready, p)
		case p.Stuck != "":
			r.stall(p.Stuck)
		case !p.Created.IsZero() && now.Sub(p.Created) > startupTimeout:
			r.stall(StallStartupTimeout)
		default:
			r.Starting++
		}
	}
	return r
}

func (r *Replicas) stall(reason StallReason) {
	if r.Stalled == nil {
		r.Stalled = map[StallReason]int{}
	}
	r.Stalled[reason]++
}

// StartupMemory is how long after a replica became ready its start-up still counts as the
// fleet's recent cold start (RecentStartup).
const StartupMemory = time.Hour

// RecentStartup is the longest start-up, from created to ready, of the ready pods that
// became ready within StartupMemory of now; 0 when none did (or their times are unknown).
func RecentStartup(ready []Pod, now time.Time) time.Duration {
	var longest time.Duration
	for _, p := range ready {
		if p.ReadyAt.IsZero() || p.Created.IsZero() || now.Sub(p.ReadyAt) > StartupMemory {
			continue
		}
		longest = max(longest, p.ReadyAt.Sub(p.Created))
	}
	return longest
}
