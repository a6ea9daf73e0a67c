package admission

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/scheduling"
)

// Dynamic resources: a member that claims devices through ResourceClaims (DRA) is placed where
// the structured allocator can allocate its claims (scheduling.Snapshot.SetDynamicResources).
// The ResourceSlices, DeviceClasses, ResourceClaims and ResourceClaimTemplates are read from the
// informer cache, and only in a cycle where some member or pod on a node has claims: a cluster
// that does not use DRA never watches them.

// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices;deviceclasses;resourceclaims;resourceclaimtemplates,verbs=get;list;watch

// usesClaims reports whether a member or a pod that counts against a node has resource claims.
func usesClaims(members map[string][]*corev1.Pod, onNodes []scheduling.PodOnNode) bool {
	for _, ms := range members {
		for _, m := range ms {
			if len(m.Spec.ResourceClaims) > 0 {
				return true
			}
		}
	}
	for _, pn := range onNodes {
		if len(pn.Pod.Spec.ResourceClaims) > 0 {
			return true
		}
	}
	return false
}

// readDynamicResources lists the cluster's dynamic resources from c.
func readDynamicResources(ctx context.Context, c client.Reader) (scheduling.DynamicResources, error) {
	var (
		res       scheduling.DynamicResources
		slices    resourceapi.ResourceSliceList
		classes   resourceapi.DeviceClassList
		claims    resourceapi.ResourceClaimList
		templates resourceapi.ResourceClaimTemplateList
	)
	var errs []error
	for _, l := range []struct {
		what string
		list client.ObjectList
	}{{"ResourceSlices", &slices}, {"DeviceClasses", &classes}, {"ResourceClaims", &claims}, {"ResourceClaimTemplates", &templates}} {
		if err := c.List(ctx, l.list, client.UnsafeDisableDeepCopy); err != nil {
			errs = append(errs, fmt.Errorf("listing %s (resource.k8s.io/v1): %w", l.what, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	res.Slices, res.Classes, res.Claims, res.Templates = ptrs(slices.Items), ptrs(classes.Items), ptrs(claims.Items), ptrs(templates.Items)
	return res, nil
}

// nativeGroupsOfClaimants are the native PodGroups (scheduling.k8s.io/v1beta1) of the pods with
// claims that count against nodes: a claim of such a pod may be its group's, shared by every
// member. None where the API is not served (GenericWorkload off).
func nativeGroupsOfClaimants(ctx context.Context, c client.Reader, onNodes []scheduling.PodOnNode) ([]*schedulingv1beta1.PodGroup, error) {
	want := map[client.ObjectKey]bool{}
	for _, pn := range onNodes {
		if sg := pn.Pod.Spec.SchedulingGroup; len(pn.Pod.Spec.ResourceClaims) > 0 && sg != nil && sg.PodGroupName != nil {
			want[client.ObjectKey{Namespace: pn.Pod.Namespace, Name: *sg.PodGroupName}] = true
		}
	}
	var out []*schedulingv1beta1.PodGroup
	for k := range want {
		var pg schedulingv1beta1.PodGroup
		switch err := c.Get(ctx, k, &pg); {
		case meta.IsNoMatchError(err) || runtime.IsNotRegisteredError(err):
			return nil, nil
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading native PodGroup %s: %w", k, err)
		default:
			out = append(out, &pg)
		}
	}
	return out, nil
}

// setDynamicResources gives the cycle's snapshot s the cluster's dynamic resources when the
// cycle needs them. Without them (a read failed) members with claims stay unsupported, with
// the error returned after the cycle. sel is the controller's cache of what each class selects.
func (cy *cycle) setDynamicResources(ctx context.Context, c client.Reader, sel *scheduling.SelectionCache, s *scheduling.Snapshot) error {
	if !usesClaims(cy.members, cy.onNodes) && !seatsUseClaims(cy.pending) {
		return nil
	}
	if cy.dynamic == nil {
		res, err := readDynamicResources(ctx, c)
		if err != nil {
			return err
		}
		groups, err := nativeGroupsOfClaimants(ctx, c, cy.onNodes)
		if err != nil {
			return err
		}
		res.PodGroups, res.Selections = groups, sel
		cy.dynamic = &res
	}
	if err := s.SetDynamicResources(*cy.dynamic); err != nil {
		return fmt.Errorf("counting the devices pods on nodes hold: %w", err)
	}
	return nil
}
