package protect

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// active reports whether a pod is one Karpenter's do-not-disrupt should shield: bound to a node
// and not terminal.
func active(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// gangProtects reports whether a PodGroup shields its members: it exists, has not finished, and
// its spec.disruption.protect is true (the default when unset).
func gangProtects(pg *berthv1alpha1.PodGroup) bool {
	if pg == nil || pg.Status.Phase == berthv1alpha1.PodGroupSucceeded || pg.Status.Phase == berthv1alpha1.PodGroupFailed {
		return false
	}
	return pg.Spec.Disruption == nil || pg.Spec.Disruption.Protect == nil || *pg.Spec.Disruption.Protect
}

// wantProtected reports whether a pod should carry berth's do-not-disrupt: it is active, and
// its gang (nil when it is in none, or the PodGroup does not exist) protects it or its
// Deployment opted in.
func wantProtected(p *corev1.Pod, gang *berthv1alpha1.PodGroup, deploymentOptIn bool) bool {
	return active(p) && (gangProtects(gang) || deploymentOptIn)
}

// desiredAnnotations are a pod's annotations with berth's protection as want says, and whether
// they differ from current. berth only removes a do-not-disrupt it added (ProtectedByAnnotation
// says so), and never takes over one a user set. current is not changed.
func desiredAnnotations(current map[string]string, want bool) (map[string]string, bool) {
	ours := current[berthv1alpha1.ProtectedByAnnotation] == berthv1alpha1.ProtectedByBerth
	_, userSet := current[karpv1.DoNotDisruptAnnotationKey]
	userSet = userSet && !ours
	out := maps.Clone(current)
	switch {
	case userSet:
		return current, false
	case want && (!ours || current[karpv1.DoNotDisruptAnnotationKey] != "true"):
		if out == nil {
			out = map[string]string{}
		}
		out[karpv1.DoNotDisruptAnnotationKey] = "true"
		out[berthv1alpha1.ProtectedByAnnotation] = berthv1alpha1.ProtectedByBerth
		return out, true
	case !want && ours:
		delete(out, karpv1.DoNotDisruptAnnotationKey)
		delete(out, berthv1alpha1.ProtectedByAnnotation)
		return out, true
	}
	return current, false
}
