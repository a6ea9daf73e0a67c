package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Fence says whether this process may still promise capacity. With replicas under leader
// election, a replica that lost its lease can still be in the middle of a cycle (a long GC
// pause, a partition from the API server): promises it writes then could give capacity the new
// leader is giving too. Every promise and every release checks the fence first; nil is no
// fence (one replica).
type Fence interface {
	Check(ctx context.Context) error
}

// ErrFenced: this replica may not promise capacity now.
var ErrFenced = errors.New("this replica may not promise capacity")

// DefaultFenceMargin is how long the leader Lease must still be valid for a promise or a
// release to start: the writes that follow a check finish well within it. It is the leader
// election's lease duration minus its renew deadline (15 s − 10 s), so a leader whose renewals
// are failing stops promising before it stops leading.
const DefaultFenceMargin = 5 * time.Second

// LeaseFence fences on the leader-election Lease, read from the API server (not a cache): it
// must be held by Identity and not expire within Margin. No other replica can take the Lease
// before it expires: a contender waits a whole lease duration after it last saw it renewed. The
// renewal time was written by this process, so it is compared with this process's own clock.
type LeaseFence struct {
	// Reader reads the Lease live.
	Reader client.Reader
	// Lease is the leader-election Lease.
	Lease types.NamespacedName
	// Identity is this replica's holder identity in the Lease.
	Identity string
	// Margin is DefaultFenceMargin when zero.
	Margin time.Duration
	// Clock is the real clock when nil.
	Clock clock.PassiveClock
}

// Check returns nil while this replica holds the Lease for at least Margin more, and an error
// wrapping ErrFenced otherwise.
func (f LeaseFence) Check(ctx context.Context) error {
	var l coordinationv1.Lease
	if err := f.Reader.Get(ctx, f.Lease, &l); err != nil {
		return fmt.Errorf("%w: reading the leader Lease %s: %w", ErrFenced, f.Lease, err)
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder != f.Identity {
		return fmt.Errorf("%w: the leader Lease %s is held by %q, not this replica (%s)", ErrFenced, f.Lease, holder, f.Identity)
	}
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return fmt.Errorf("%w: the leader Lease %s has no renewal time or duration", ErrFenced, f.Lease)
	}
	clk, margin := f.Clock, f.Margin
	if clk == nil {
		clk = clock.RealClock{}
	}
	if margin <= 0 {
		margin = DefaultFenceMargin
	}
	left := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second).Sub(clk.Now())
	if left < margin {
		return fmt.Errorf("%w: the leader Lease %s expires in %s (renewals are failing), less than the %s a promise needs", ErrFenced, f.Lease, left.Round(time.Millisecond), margin)
	}
	return nil
}

// fence checks the Reconciler's fence, if any.
func (r *Reconciler) fence(ctx context.Context) error {
	if r.opts.Fence == nil {
		return nil
	}
	if err := r.opts.Fence.Check(ctx); err != nil {
		fenced.Inc()
		return err
	}
	return nil
}
