package guard

import (
	"fmt"
	"slices"
	"strings"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// NodePools that a GitOps tool keeps in sync are reported, never patched: Argo CD's or Flux's
// self-heal would remove the budget berth adds (or put back WhenEmptyOrUnderutilized), berth
// would add it again, and the two would fight over the object forever. The fix belongs in Git.

// Keys Argo CD and Flux leave on the objects they apply.
const (
	argoTrackingAnnotation = berthv1alpha1.ArgoCDTrackingIDAnnotation
	argoInstanceLabel      = berthv1alpha1.ArgoCDInstanceLabel
	fluxKustomizeLabel     = berthv1alpha1.FluxKustomizationLabel
	fluxHelmLabel          = berthv1alpha1.FluxHelmReleaseLabel
)

// gitOpsManagers are field managers of GitOps controllers (server-side apply).
var gitOpsManagers = map[string]string{
	"argocd-controller":             "Argo CD",
	"argocd-application-controller": "Argo CD",
	"kustomize-controller":          "Flux",
	"helm-controller":               "Flux",
}

// gitOpsOwner names the GitOps tool that keeps np in sync ("", false when none is seen): Argo
// CD's tracking annotation or label, Flux's kustomize or helm labels, or their field managers.
func gitOpsOwner(np *karpv1.NodePool) (string, bool) {
	switch {
	case np.Annotations[argoTrackingAnnotation] != "":
		return fmt.Sprintf("Argo CD (%s %s)", argoTrackingAnnotation, np.Annotations[argoTrackingAnnotation]), true
	case np.Labels[argoInstanceLabel] != "":
		return fmt.Sprintf("Argo CD (application %s)", np.Labels[argoInstanceLabel]), true
	case np.Labels[fluxKustomizeLabel] != "":
		return fmt.Sprintf("Flux (Kustomization %s)", np.Labels[fluxKustomizeLabel]), true
	case np.Labels[fluxHelmLabel] != "":
		return fmt.Sprintf("Flux (HelmRelease %s)", np.Labels[fluxHelmLabel]), true
	}
	var tools []string
	for _, mf := range np.ManagedFields {
		if tool, ok := gitOpsManagers[mf.Manager]; ok && !slices.Contains(tools, tool) {
			tools = append(tools, tool)
		}
	}
	if len(tools) > 0 {
		return strings.Join(tools, ", ") + " (field manager)", true
	}
	return "", false
}

// gitOpsMode is the mode the guard applies to a NodePool a GitOps tool keeps in sync: the
// modes that patch (enforce, when-empty) become audit.
func gitOpsMode(np *karpv1.NodePool, mode Mode) (Mode, string) {
	if mode != ModeEnforce && mode != ModeWhenEmpty {
		return mode, ""
	}
	owner, ok := gitOpsOwner(np)
	if !ok {
		return mode, ""
	}
	return ModeAudit, owner
}

// withGitOpsNote says in the status why a GitOps-managed pool was only reported.
func withGitOpsNote(status, owner string, wanted Mode) string {
	if status == "" || owner == "" {
		return status
	}
	return fmt.Sprintf("%s (kept in sync by %s: %s is reported, not patched — fix it in Git)", status, owner, wanted)
}
