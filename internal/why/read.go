package why

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Read gathers Explain's inputs for PodGroup namespace/name. A NodePool that is missing (or a
// cluster without Karpenter), quotas and ResourceClaims the caller may not list (claims are read
// only when a member has some) are left out, not errors.
func Read(ctx context.Context, c client.Reader, namespace, name string) (Inputs, error) {
	var in Inputs
	g := &berthv1alpha1.PodGroup{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, g); err != nil {
		return in, fmt.Errorf("reading PodGroup %s/%s: %w", namespace, name, err)
	}
	in.Group = g
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{berthv1alpha1.PodGroupLabel: name}); err != nil {
		return in, fmt.Errorf("listing the members of %s/%s: %w", namespace, name, err)
	}
	in.Members = pods.Items
	if g.Spec.NodePool != "" {
		np := &karpv1.NodePool{}
		switch err := c.Get(ctx, client.ObjectKey{Name: g.Spec.NodePool}, np); {
		case err == nil:
			in.NodePool = np
		case apierrors.IsNotFound(err), meta.IsNoMatchError(err), apierrors.IsForbidden(err):
		default:
			return in, fmt.Errorf("reading NodePool %s: %w", g.Spec.NodePool, err)
		}
	}
	if slices.ContainsFunc(in.Members, func(m corev1.Pod) bool { return len(m.Spec.ResourceClaims) > 0 }) {
		var claims resourcev1.ResourceClaimList
		switch err := c.List(ctx, &claims, client.InNamespace(namespace)); {
		case err == nil:
			in.Claims = claims.Items
		case apierrors.IsForbidden(err), meta.IsNoMatchError(err):
		default:
			return in, fmt.Errorf("listing the ResourceClaims of %s: %w", namespace, err)
		}
	}
	var quotas corev1.ResourceQuotaList
	switch err := c.List(ctx, &quotas, client.InNamespace(namespace)); {
	case err == nil:
		in.Quotas = quotas.Items
	case apierrors.IsForbidden(err):
	default:
		return in, fmt.Errorf("listing the ResourceQuotas of %s: %w", namespace, err)
	}
	return in, nil
}
