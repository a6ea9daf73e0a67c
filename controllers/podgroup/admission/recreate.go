package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
)

// Recreating a member under its name: a stranded member without a controller (a bare pod) is
// deleted and created again without its pin. The pod to create is written to the PodGroup's
// status.recreating before the deletion and stays there until the pod exists again, so a
// controller stopped between the two finishes the recreation when it starts: nothing but
// this record holds the member's spec once the pod is deleted. Nothing waits in between
// either: a pod whose removal is held (a finalizer) is created in the cycle its removal starts.

// recreate records the pod to create in p's place, deletes p (at the preconditions pre) and
// creates the copy when the name is free at once. A pod that changed since it was read (pre
// fails) is left alone, and its record dropped by the next cycle.
func (r *Reconciler) recreate(ctx context.Context, g *berthv1alpha1.PodGroup, p *corev1.Pod, pre client.Preconditions) (bool, error) {
	again := unpinnedCopy(p)
	raw, err := json.Marshal(again)
	if err != nil {
		return false, fmt.Errorf("encoding stranded member %s to recreate it: %w", p.Name, err)
	}
	if err := r.fence(ctx); err != nil {
		return false, fmt.Errorf("not recreating stranded member %s: %w", p.Name, err)
	}
	rec := berthv1alpha1.RecreatingMember{Pod: p.Name, UID: p.UID, Manifest: runtime.RawExtension{Raw: raw}}
	if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
		st.Recreating = append(recreatingWithout(st.Recreating, p.Name), rec)
	}); err != nil {
		return false, fmt.Errorf("recording stranded member %s before recreating it: %w", p.Name, err)
	}
	if err := r.client.Delete(ctx, p, pre, client.GracePeriodSeconds(0)); err != nil {
		if apierrors.IsConflict(err) {
			return false, nil // it changed (kube-scheduler bound it?): the next cycle looks again
		}
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("deleting stranded member %s: %w", p.Name, err)
		}
	}
	faultPoint("mid-recreate")
	// An unbound pod without finalizers goes at once; otherwise the name is taken until it goes,
	// and the cycle its removal starts creates the copy.
	_, err = r.createRecorded(ctx, g, rec)
	return true, err
}

// recreation is what to do next about a recorded recreation.
type recreation int

const (
	// recreationCreate: the name is free; the pod is created.
	recreationCreate recreation = iota
	// recreationWait: the old pod is still going (its removal held by a finalizer).
	recreationWait
	// recreationDone: a pod of that name with another UID exists (the recreated one, or one
	// someone else created): the record goes.
	recreationDone
	// recreationCheck: the view shows the old pod, not being deleted: either the deletion never
	// happened (the record goes; the member is intact) or the view is behind; the API server
	// is asked.
	recreationCheck
)

// nextRecreationStep decides a recorded recreation from what is known of the pod of its name:
// cur is that pod, nil when none is known.
func nextRecreationStep(rec berthv1alpha1.RecreatingMember, cur *corev1.Pod) recreation {
	switch {
	case cur == nil:
		return recreationCreate
	case cur.UID != rec.UID:
		return recreationDone
	case cur.DeletionTimestamp != nil:
		return recreationWait
	default:
		return recreationCheck
	}
}

// tendRecreations finishes the gang's recorded recreations: each pod is created once its name
// is free, and a record goes once the pod of its name is another than the one it replaces (or
// the deletion never happened). The gang's members are the view; the API server is asked only
// when the view shows the old pod alive, or a creation finds the name taken.
func (r *Reconciler) tendRecreations(ctx context.Context, gv gangView) error {
	g := gv.group
	if len(g.Status.Recreating) == 0 {
		return nil
	}
	byName := map[string]*corev1.Pod{}
	for _, p := range gv.keyHolders() {
		byName[p.Name] = p
	}
	var done []string
	var errs []error
	for _, rec := range g.Status.Recreating {
		step := nextRecreationStep(rec, byName[rec.Pod])
		if step == recreationCheck {
			var live corev1.Pod
			err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: g.Namespace, Name: rec.Pod}, &live)
			switch {
			case apierrors.IsNotFound(err):
				step = recreationCreate
			case err != nil:
				errs = append(errs, fmt.Errorf("reading member %s being recreated: %w", rec.Pod, err))
				continue
			case live.UID == rec.UID && live.DeletionTimestamp == nil:
				// Its deletion never happened (refused, or the controller stopped first): the
				// member is intact, and is judged stranded again if it still is.
				step = recreationDone
			default:
				step = nextRecreationStep(rec, &live)
			}
		}
		switch step {
		case recreationDone:
			done = append(done, rec.Pod)
		case recreationCreate:
			created, err := r.create(ctx, g, rec)
			errs = append(errs, err)
			if created {
				done = append(done, rec.Pod)
			}
		}
	}
	if len(done) > 0 {
		errs = append(errs, r.dropRecreations(ctx, g, done...))
	}
	return errors.Join(errs...)
}

// createRecorded creates a recorded pod and drops its record once it exists.
func (r *Reconciler) createRecorded(ctx context.Context, g *berthv1alpha1.PodGroup, rec berthv1alpha1.RecreatingMember) (bool, error) {
	created, err := r.create(ctx, g, rec)
	if !created || err != nil {
		return created, err
	}
	return true, r.dropRecreations(ctx, g, rec.Pod)
}

// create creates a recorded pod. It reports whether the record is finished: created now, or the
// name held by a pod other than the one it replaces. The old pod still there is no error: it is
// still going.
func (r *Reconciler) create(ctx context.Context, g *berthv1alpha1.PodGroup, rec berthv1alpha1.RecreatingMember) (bool, error) {
	var p corev1.Pod
	if err := json.Unmarshal(rec.Manifest.Raw, &p); err != nil {
		// Nothing can ever create it from this record: say so, and drop it.
		r.recorder.Warning(g, events.ReasonMemberStranded, fmt.Sprintf("member %s could not be recreated: its recorded manifest does not decode: %v", rec.Pod, err))
		return true, nil
	}
	p.Namespace, p.Name = g.Namespace, rec.Pod
	err := r.client.Create(ctx, &p)
	if err == nil {
		log.FromContext(ctx).Info("recreated stranded member", "pod", client.ObjectKeyFromObject(&p))
		return true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("recreating member %s (its manifest is kept in the status of PodGroup %s/%s): %w", rec.Pod, g.Namespace, g.Name, err)
	}
	var cur corev1.Pod
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(&p), &cur); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil // gone in the meantime: the next cycle creates it
		}
		return false, fmt.Errorf("reading member %s being recreated: %w", rec.Pod, err)
	}
	return cur.UID != rec.UID, nil
}

// dropRecreations removes finished records from the gang's status.
func (r *Reconciler) dropRecreations(ctx context.Context, g *berthv1alpha1.PodGroup, pods ...string) error {
	if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
		for _, p := range pods {
			st.Recreating = recreatingWithout(st.Recreating, p)
		}
	}); err != nil {
		return fmt.Errorf("dropping finished recreations %v: %w", pods, err)
	}
	return nil
}

// recreatingWithout is rs without the record of pod.
func recreatingWithout(rs []berthv1alpha1.RecreatingMember, pod string) []berthv1alpha1.RecreatingMember {
	var out []berthv1alpha1.RecreatingMember
	for _, x := range rs {
		if x.Pod != pod {
			out = append(out, x)
		}
	}
	return out
}
