package agent

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Liveness is the agent loop's heartbeat, for the kubelet's liveness probe and the
// berth_agent_last_probe_timestamp_seconds gauge: the loop beats after every probe (and while it
// idles without NVML), so a probe that hangs — an NVML call into a wedged driver that never
// returns — stops the beats, the probe fails and the kubelet restarts the agent. The zero value
// is not usable: NewLiveness starts it.
type Liveness struct {
	last atomic.Int64 // Unix nanoseconds of the last beat
}

// NewLiveness starts a heartbeat at now: the agent's start counts as its first beat, so opening
// NVML and reading the inventory are covered too.
func NewLiveness(now time.Time) *Liveness {
	l := &Liveness{}
	l.Beat(now)
	return l
}

// Beat records that the loop made progress at now.
func (l *Liveness) Beat(now time.Time) {
	l.last.Store(now.UnixNano())
	lastProbe.Set(float64(now.UnixMilli()) / 1e3)
}

// Check reports an error when the last beat is older than maxAge at now.
func (l *Liveness) Check(now time.Time, maxAge time.Duration) error {
	last := time.Unix(0, l.last.Load())
	if age := now.Sub(last); age > maxAge {
		return fmt.Errorf("the GPU health loop last made progress %s ago (at %s), more than %s: a probe is hung", age.Round(time.Second), last.UTC().Format(time.RFC3339), maxAge)
	}
	return nil
}

// MaxLoopAge is how old the last beat may be before the agent counts as hung at a given probe
// interval: three intervals and a minute, so a slow API server or a long NVML call is not a
// restart.
func MaxLoopAge(interval time.Duration) time.Duration {
	return 3*interval + time.Minute
}
