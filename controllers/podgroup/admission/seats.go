package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/status"
	"github.com/berth-dev/berth/scheduling"
)

// seatsByGroup indexes seat pods by the UID of the PodGroup they hold capacity for, sorted by
// name, leaving out seats being deleted.
func seatsByGroup(pods []*corev1.Pod) map[types.UID][]*corev1.Pod {
	out := map[types.UID][]*corev1.Pod{}
	for _, p := range pods {
		uid := p.Labels[berthv1alpha1.SeatOfLabel]
		if uid == "" || p.DeletionTimestamp != nil {
			continue
		}
		out[types.UID(uid)] = append(out[types.UID(uid)], p)
	}
	for _, ss := range out {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Name < ss[j].Name })
	}
	return out
}

// ensureSeats makes the attempt's seat set exactly seats 0..want-1: missing ones are created
// (all at once, so Karpenter batches them) for the members sf lacks room for — a seat beyond
// those is kept while it exists, not created again — and extra ones deleted. Seats of members
// that claim devices get copies of their claim templates (res: the cycle's dynamic resources).
func (r *Reconciler) ensureSeats(ctx context.Context, gv gangView, attempt int32, sf scheduling.Shortfall, want int, res *scheduling.DynamicResources) error {
	g, existing := gv.group, gv.seats
	have := map[string]bool{}
	var extra []*corev1.Pod
	wanted := map[string]bool{}
	for i := 0; i < want; i++ {
		wanted[seatName(g, attempt, i)] = true
	}
	for _, s := range existing {
		if wanted[s.Name] {
			have[s.Name] = true
		} else {
			extra = append(extra, s)
		}
	}
	if err := r.deleteSeats(ctx, extra); err != nil {
		return err
	}
	if sf.Domain == "" {
		// Seats created again or added to an attempt go where its first seats were hinted.
		if hint := seatHint(existing, g.Spec.Topology); hint != "" {
			sf.Hint = hint
		}
	}
	image := r.opts.Provisioning.SeatImage
	if image == "" {
		image = DefaultSeatImage
	}
	var create []*corev1.Pod
	for i := 0; i < want; i++ {
		if name := seatName(g, attempt, i); !have[name] && i < len(sf.Missing) {
			var vt scheduling.VolumeTopology
			if i < len(sf.Volumes) {
				vt = sf.Volumes[i]
			}
			create = append(create, seatPod(g, sf.Missing[i], vt, seatIdentity{namespace: r.opts.Provisioning.seatNamespace(), name: name, image: image}, sf))
		}
	}
	if faultArmed("mid-seats") && len(create) > 1 {
		for _, s := range create[:len(create)/2] {
			if err := r.client.Create(ctx, s); err != nil {
				return fmt.Errorf("creating seat %s: %w", s.Name, err)
			}
		}
		faultPoint("mid-seats")
	}
	err := parallel(create, func(_ int, s *corev1.Pod) error {
		if err := r.client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating seat %s: %w", s.Name, err)
		}
		seatsCreated.Inc()
		return nil
	})
	byName := map[string]*corev1.Pod{}
	for _, m := range gv.members {
		byName[m.Name] = m
	}
	memberOf := func(s *corev1.Pod) *corev1.Pod { return byName[s.Annotations[berthv1alpha1.SeatForMemberAnnotation]] }
	kept := slices.DeleteFunc(slices.Clone(existing), func(s *corev1.Pod) bool { return !have[s.Name] })
	return errors.Join(err, r.ensureSeatTemplates(ctx, g, append(kept, create...), memberOf, res))
}

// deleteSeats deletes seats at once (no grace period: a seat holds nothing worth stopping
// for).
func (r *Reconciler) deleteSeats(ctx context.Context, seats []*corev1.Pod) error {
	return parallel(seats, func(_ int, s *corev1.Pod) error {
		if err := r.client.Delete(ctx, s, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting seat %s: %w", s.Name, err)
		}
		return nil
	})
}

// sweepSeats deletes seats whose gang no longer needs them: seats live only while their gang's
// capacity request runs, so the seats of a PodGroup that is gone, or whose request ended
// (admitted, withdrawn, timed out), go.
func (r *Reconciler) sweepSeats(ctx context.Context, cy *cycle) error {
	var stale []*corev1.Pod
	for uid, ss := range cy.seats {
		if g := cy.groupByUID(uid); g != nil && g.Status.Provisioning.Active() && !status.TimedOutForGood(g) {
			continue
		}
		stale = append(stale, ss...)
	}
	return r.deleteSeats(ctx, stale)
}

// giveWay deletes an admitted gang's seats and reports whether the members must wait for
// them: a seat deleted only now still holds its capacity in the view of kube-scheduler until
// the deletion reaches it, so the release goes on (the key last) in the cycle that deletion
// starts, once this controller's store no longer shows the seat. Nothing blocks meanwhile (the
// cycle used to poll up to 2 s per gang). A seat already terminating — deleted by an earlier
// cycle, its removal held by someone else's finalizer — is not waited for: kube-scheduler
// counts it until it goes and binds the members then, so a seat that never goes cannot hold
// the gang gated for good.
func (r *Reconciler) giveWay(ctx context.Context, seats []*corev1.Pod) (wait bool, err error) {
	var leaving []*corev1.Pod
	for _, s := range seats {
		if s.DeletionTimestamp == nil {
			leaving = append(leaving, s)
		}
	}
	return len(leaving) > 0, r.deleteSeats(ctx, leaving)
}
