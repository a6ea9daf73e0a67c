package controllers

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
)

// releasingManager gives the leader Lease up once the manager has stopped cleanly (a rolling
// update, a drained node), so the standby leads within a RetryPeriod instead of waiting out the
// Lease. It is not client-go's ReleaseOnCancel: that also gives the Lease up when renewals fail,
// while this replica's reconcilers still run — and admission's fence (LeaseFence) counts on no
// replica taking the Lease before it expires. Here the manager has returned without error:
// every reconciler has stopped, so nothing this replica does can race the next leader.
type releasingManager struct {
	ctrl.Manager
	lock    resourcelock.Interface
	timeout time.Duration
}

// Start runs the manager and, when it stopped cleanly, gives the Lease up if this replica still
// holds it. A Lease that cannot be given up is logged, not returned: it expires on its own, and
// the replica's run did not fail.
func (m releasingManager) Start(ctx context.Context) error {
	if err := m.Manager.Start(ctx); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	released, err := releaseLease(rctx, m.lock, time.Now())
	log := ctrl.Log.WithName("leader-election")
	switch {
	case err != nil:
		log.Error(err, "the Lease is left to expire")
	case released:
		log.Info("gave up the leader Lease", "lock", m.lock.Describe())
	}
	return nil
}

// releaseLease empties the Lease's holder when lock's identity holds it, at the version it
// read (a replica that took it since is left alone), and reports whether it did.
func releaseLease(ctx context.Context, lock resourcelock.Interface, now time.Time) (bool, error) {
	rec, _, err := lock.Get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the leader Lease %s to give it up: %w", lock.Describe(), err)
	case rec.HolderIdentity != lock.Identity():
		return false, nil
	}
	t := metav1.NewTime(now)
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions: rec.LeaderTransitions, LeaseDurationSeconds: 1, AcquireTime: t, RenewTime: t,
	}); err != nil {
		return false, fmt.Errorf("giving up the leader Lease %s: %w", lock.Describe(), err)
	}
	return true, nil
}
