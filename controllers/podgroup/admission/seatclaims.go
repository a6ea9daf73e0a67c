package admission

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	seatpkg "github.com/berth-dev/berth/internal/seat"
	"github.com/berth-dev/berth/scheduling"
)

// Seats for members that claim devices (DRA): a seat carries its member's claims, so Karpenter's
// DRA-aware provisioning (--ignore-dra-requests=false) launches instance types whose devices
// satisfy them and kube-scheduler allocates them on the seat's node. Seats live in berth's own
// namespace and a pod's claim templates must be in its own, so each seat gets copies of its
// member's templates, owned by the seat (they go with it; kube-controller-manager's claims from
// them too, freeing the devices for the members). Claims a member names (shared with other
// pods) are not carried: scheduling.ComputeShortfall orders no seats for such members.

// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaimtemplates,verbs=create;delete

// seatClaims gives seat the member's claims made from templates, each from the seat's own copy
// of the template (seatTemplates), numbered by the member's claim index.
func seatClaims(seat, m *corev1.Pod) {
	for i, pc := range m.Spec.ResourceClaims {
		if pc.ResourceClaimTemplateName != nil {
			seatpkg.CarryClaim(seat, pc.Name, i)
		}
	}
}

// seatTemplates are the copies of member m's claim templates (from templates, by
// namespace/name) that seat (created: it has its UID) refers to, owned by it. A template that
// does not exist is an error (placement already holds the gang for it).
func seatTemplates(g *berthv1alpha1.PodGroup, seat, m *corev1.Pod, templates map[string]*resourceapi.ResourceClaimTemplate) ([]*resourceapi.ResourceClaimTemplate, error) {
	var out []*resourceapi.ResourceClaimTemplate
	for i, pc := range m.Spec.ResourceClaims {
		if pc.ResourceClaimTemplateName == nil {
			continue
		}
		t := templates[m.Namespace+"/"+*pc.ResourceClaimTemplateName]
		if t == nil {
			return nil, fmt.Errorf("member %s's ResourceClaimTemplate %s/%s does not exist", m.Name, m.Namespace, *pc.ResourceClaimTemplateName)
		}
		out = append(out, seatpkg.TemplateCopy(seat, i, &t.Spec, map[string]string{berthv1alpha1.SeatOfLabel: string(g.UID)}))
	}
	return out, nil
}

// templateIndex indexes res's templates by namespace/name (empty when res is nil).
func templateIndex(res *scheduling.DynamicResources) map[string]*resourceapi.ResourceClaimTemplate {
	idx := map[string]*resourceapi.ResourceClaimTemplate{}
	if res != nil {
		for _, t := range res.Templates {
			idx[t.Namespace+"/"+t.Name] = t
		}
	}
	return idx
}

// ensureSeatTemplates creates the template copies of seats that carry claims and are not on a
// node yet, unless the cycle's cache already shows them owned by the seat: those created in
// this cycle, and those of an earlier one whose copies a crash or a failed call may have left
// missing — until they exist, kube-controller-manager makes no claim and the seat waits. A copy
// left by an earlier seat of the same name (deleted, then made again) is replaced: the garbage
// collector takes it with its old owner.
func (r *Reconciler) ensureSeatTemplates(ctx context.Context, g *berthv1alpha1.PodGroup, seats []*corev1.Pod, memberOf func(*corev1.Pod) *corev1.Pod, res *scheduling.DynamicResources) error {
	idx := templateIndex(res)
	var ts, stale []*resourceapi.ResourceClaimTemplate
	var errs []error
	for _, s := range seats {
		if len(s.Spec.ResourceClaims) == 0 || s.Spec.NodeName != "" || s.UID == "" || s.DeletionTimestamp != nil {
			continue
		}
		m := memberOf(s)
		if m == nil {
			continue // its member is gone: the seat goes with the attempt
		}
		mine, err := seatTemplates(g, s, m, idx)
		if err != nil {
			errs = append(errs, fmt.Errorf("seat %s: %w", s.Name, err))
			continue
		}
		for _, t := range mine {
			switch have := idx[t.Namespace+"/"+t.Name]; {
			case have == nil: // the cache has not seen it
				ts = append(ts, t)
			case !metav1.IsControlledBy(have, s) && !ownedBy(have, s.UID):
				stale = append(stale, have)
				ts = append(ts, t)
			}
		}
	}
	for _, t := range stale {
		if err := r.client.Delete(ctx, t); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting a stale seat template %s/%s: %w", t.Namespace, t.Name, err))
		}
	}
	errs = append(errs, parallel(ts, func(_ int, t *resourceapi.ResourceClaimTemplate) error {
		if err := r.client.Create(ctx, t); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ResourceClaimTemplate %s/%s for a seat: %w", t.Namespace, t.Name, err)
		}
		return nil
	}))
	return errors.Join(errs...)
}

// ownedBy reports whether obj has an owner reference to uid.
func ownedBy(obj metav1.Object, uid types.UID) bool {
	for _, o := range obj.GetOwnerReferences() {
		if o.UID == uid {
			return true
		}
	}
	return false
}
