package nativegang

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/seat"
)

// Members that claim devices (DRA): each seat carries its member's claims, so Karpenter's
// DRA-aware provisioning launches instance types whose devices satisfy them (internal/seat).
// A member's own claims made from templates are carried by its own seat. A claim of the
// gang's PodGroup (spec.resourceClaims, DRAWorkloadResourceClaims), which every member that
// names it shares, is carried once — by the seat of the first member that names it — and the
// seats of the other members that name it keep to that seat's node (a shared claim's devices
// are on one node). Claims that cannot be carried leave the gang without seats, and say why:
// a claim the gang shares that is allocated already (the members go where its devices are),
// or a ResourceClaim a member names that is not the gang's (other pods may share it).

// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaimtemplates,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims,verbs=get;list;watch

// seatClaim is a claim a seat carries: the member's name for it, and the spec the seat's copy
// of it is made from.
type seatClaim struct {
	name string
	spec *resourceapi.ResourceClaimTemplateSpec
}

// claimPlan is what a gang's seats carry for their members' claims.
type claimPlan struct {
	// carry are, by member, the claims its seat carries, in order (the i-th is made from the
	// seat's copy seat.TemplateName(seat, i)).
	carry map[string][]seatClaim
	// join are, by member, the members whose seats carry a claim of the gang it shares: its
	// seat goes to their seats' node.
	join map[string][]string
	// blocked says why the gang's seats cannot carry its members' claims ("" when they can).
	blocked string
}

// usesClaims reports whether some member claims devices.
func usesClaims(members []*corev1.Pod) bool {
	for _, m := range members {
		if len(m.Spec.ResourceClaims) > 0 {
			return true
		}
	}
	return false
}

// planClaims is what the seats of members (in the batch's order) carry. An error is a read
// that failed; a claim or template that does not exist blocks the gang and says so.
func (r *Reconciler) planClaims(ctx context.Context, pg *schedulingv1beta1.PodGroup, members []*corev1.Pod) (claimPlan, error) {
	p := claimPlan{carry: map[string][]seatClaim{}, join: map[string][]string{}}
	holder := map[string]string{} // the gang's claim → the member whose seat carries it
	for _, m := range members {
		for i := range m.Spec.ResourceClaims {
			pc := &m.Spec.ResourceClaims[i]
			to, err := resourceclaim.BindTo(m, pg, pc)
			if err != nil {
				p.blocked = fmt.Sprintf("member %s's claim %q: %v", m.Name, pc.Name, err)
				return p, nil
			}
			if to.APIGroup == schedulingv1beta1.GroupName && to.Resource == "podgroups" {
				if h, ok := holder[pc.Name]; ok {
					p.join[m.Name] = appendNew(p.join[m.Name], h)
					continue
				}
				spec, why, err := r.groupClaimSpec(ctx, pg, pc.Name)
				if err != nil || why != "" {
					p.blocked = why
					return p, err
				}
				if spec == nil {
					continue // the gang's claim deliberately not made: nothing to carry
				}
				holder[pc.Name] = m.Name
				p.carry[m.Name] = append(p.carry[m.Name], seatClaim{name: pc.Name, spec: spec})
				continue
			}
			if pc.ResourceClaimTemplateName == nil {
				p.blocked = fmt.Sprintf("member %s names ResourceClaim %s, which is not the gang's and other pods may share: berth orders no nodes for such members (they go where its devices are)", m.Name, ptrString(pc.ResourceClaimName))
				return p, nil
			}
			spec, why, err := r.templateSpec(ctx, m.Namespace, *pc.ResourceClaimTemplateName)
			if err != nil || why != "" {
				p.blocked = why
				return p, err
			}
			p.carry[m.Name] = append(p.carry[m.Name], seatClaim{name: pc.Name, spec: spec})
		}
	}
	return p, nil
}

// groupClaimSpec is the spec of the gang's claim name: its ResourceClaim's (named, or made
// for the gang from a template), or its template's before it is made; nil (and no why) when
// the claim is deliberately not made. why is set when the claim cannot be carried (allocated
// already, or missing).
func (r *Reconciler) groupClaimSpec(ctx context.Context, pg *schedulingv1beta1.PodGroup, name string) (*resourceapi.ResourceClaimTemplateSpec, string, error) {
	for i := range pg.Spec.ResourceClaims {
		gc := &pg.Spec.ResourceClaims[i]
		if gc.Name != name {
			continue
		}
		claimName, _, err := resourceclaim.NameFromPodGroup(pg, gc)
		switch {
		case errors.Is(err, resourceclaim.ErrClaimNotFound) && gc.ResourceClaimTemplateName != nil:
			return r.templateSpec(ctx, pg.Namespace, *gc.ResourceClaimTemplateName)
		case err != nil:
			return nil, fmt.Sprintf("the gang's claim %q: %v", name, err), nil
		case claimName == nil:
			return nil, "", nil // deliberately not made: nothing to carry
		}
		var c resourceapi.ResourceClaim
		if err := r.client.Get(ctx, client.ObjectKey{Namespace: pg.Namespace, Name: *claimName}, &c); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Sprintf("the gang's claim %q waits for ResourceClaim %s/%s, which does not exist", name, pg.Namespace, *claimName), nil
			}
			return nil, "", fmt.Errorf("reading ResourceClaim %s/%s: %w", pg.Namespace, *claimName, err)
		}
		if c.Status.Allocation != nil {
			return nil, fmt.Sprintf("the gang's claim %q (ResourceClaim %s) is allocated already: its members go where its devices are, so berth orders no nodes for them", name, c.Name), nil
		}
		return &resourceapi.ResourceClaimTemplateSpec{Spec: c.Spec}, "", nil
	}
	return nil, fmt.Sprintf("the gang has no claim %q", name), nil
}

// templateSpec is the claim spec of template ns/name; why is set when it does not exist.
func (r *Reconciler) templateSpec(ctx context.Context, ns, name string) (*resourceapi.ResourceClaimTemplateSpec, string, error) {
	var t resourceapi.ResourceClaimTemplate
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &t); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("waits for ResourceClaimTemplate %s/%s, which does not exist", ns, name), nil
		}
		return nil, "", fmt.Errorf("reading ResourceClaimTemplate %s/%s: %w", ns, name, err)
	}
	return &t.Spec, "", nil
}

// withClaims gives seat s (the index-th of the batch) member m's claims and its place: the
// claims it carries, its index label, and pod affinity to the node of the seats carrying the
// gang's claims m shares (index: the batch's seat indexes by member).
func withClaims(s *corev1.Pod, pg *schedulingv1beta1.PodGroup, m string, p claimPlan, index map[string]int) {
	s.Labels[berthv1alpha1.NativeSeatIndexLabel] = strconv.Itoa(index[m])
	for i, c := range p.carry[m] {
		seat.CarryClaim(s, c.name, i)
	}
	for _, h := range p.join[m] {
		if s.Spec.Affinity == nil {
			s.Spec.Affinity = &corev1.Affinity{}
		}
		if s.Spec.Affinity.PodAffinity == nil {
			s.Spec.Affinity.PodAffinity = &corev1.PodAffinity{}
		}
		s.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(s.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				berthv1alpha1.SeatForNativeGroupLabel: string(pg.UID),
				berthv1alpha1.NativeSeatIndexLabel:    strconv.Itoa(index[h]),
			}},
			TopologyKey: corev1.LabelHostname,
		})
	}
}

// ensureCopies creates the template copies of seats (created: they have UIDs) not yet on a node
// whose copies do not exist — made with the seat, or missing after a crash or a failed call;
// until they exist kube-controller-manager makes no claim and the seat waits.
func (r *Reconciler) ensureCopies(ctx context.Context, pg *schedulingv1beta1.PodGroup, seats []*corev1.Pod, p claimPlan) error {
	var errs []error
	for _, s := range seats {
		if s.Spec.NodeName != "" || s.UID == "" || s.DeletionTimestamp != nil {
			continue
		}
		carried := p.carry[s.Annotations[berthv1alpha1.SeatForMemberAnnotation]]
		for i, c := range carried {
			if i >= len(s.Spec.ResourceClaims) {
				break // a seat made before its member's claims changed: it goes with the attempt
			}
			var have resourceapi.ResourceClaimTemplate
			err := r.client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: seat.TemplateName(s.Name, i)}, &have)
			if err == nil && metav1.IsControlledBy(&have, s) {
				continue
			}
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("reading seat %s's template copy: %w", s.Name, err))
				continue
			}
			if err == nil { // a copy left by an earlier seat of the same name
				if err := r.client.Delete(ctx, &have); err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("deleting a stale seat template %s/%s: %w", have.Namespace, have.Name, err))
					continue
				}
			}
			t := seat.TemplateCopy(s, i, c.spec, map[string]string{berthv1alpha1.SeatForNativeGroupLabel: string(pg.UID)})
			if err := r.client.Create(ctx, t); err != nil && !apierrors.IsAlreadyExists(err) {
				errs = append(errs, fmt.Errorf("creating ResourceClaimTemplate %s/%s for a seat: %w", t.Namespace, t.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func appendNew(list []string, v string) []string {
	for _, x := range list {
		if x == v {
			return list
		}
	}
	return append(list, v)
}

func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
