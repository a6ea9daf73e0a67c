package guard

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
)

func TestGitOpsOwner(t *testing.T) {
	withManager := func(m string) *karpv1.NodePool {
		np := pool().gpu().obj()
		np.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}, {Manager: m}}
		return np
	}
	tests := []struct {
		name string
		np   *karpv1.NodePool
		want string
	}{
		{"Argo CD tracking annotation", pool().gpu().annotate(argoTrackingAnnotation, "gpu:karpenter.sh/NodePool:/h100").obj(), "Argo CD (argocd.argoproj.io/tracking-id gpu:karpenter.sh/NodePool:/h100)"},
		{"Argo CD label", pool().gpu().label(argoInstanceLabel, "gpu-pools").obj(), "Argo CD (application gpu-pools)"},
		{"Flux Kustomization", pool().gpu().label(fluxKustomizeLabel, "infra").obj(), "Flux (Kustomization infra)"},
		{"Flux HelmRelease", pool().gpu().label(fluxHelmLabel, "karpenter-pools").obj(), "Flux (HelmRelease karpenter-pools)"},
		{"Argo CD server-side apply", withManager("argocd-controller"), "Argo CD (field manager)"},
		{"Flux server-side apply", withManager("kustomize-controller"), "Flux (field manager)"},
		{"kubectl and Helm are not GitOps", withManager("helm"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := gitOpsOwner(tt.np)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("gitOpsOwner = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}

// TestGitOpsPoolsAreReportedNotPatched: in enforce (or when-empty) mode a GPU NodePool that
// Argo CD keeps in sync gets no budget and no policy change — self-heal would take it out and
// the two would fight — only the status annotation (a field Git does not own) and a Warning
// naming the tool and the fix.
func TestGitOpsPoolsAreReportedNotPatched(t *testing.T) {
	for _, mode := range []Mode{ModeEnforce, ModeWhenEmpty} {
		t.Run(string(mode), func(t *testing.T) {
			np := pool().gpu().annotate(argoTrackingAnnotation, "gpu:karpenter.sh/NodePool:/h100").obj()
			np.Name = "argo-" + string(mode)
			r, c, rec := harness(t, interceptor.Funcs{}, np)
			r.DefaultMode = mode
			reconcileOnce(t, r, np.Name)
			var got karpv1.NodePool
			if err := c.Get(context.Background(), client.ObjectKey{Name: np.Name}, &got); err != nil {
				t.Fatal(err)
			}
			if !IsUnsafe(&got) || got.Spec.Disruption.ConsolidationPolicy != np.Spec.Disruption.ConsolidationPolicy || len(got.Spec.Disruption.Budgets) != len(np.Spec.Disruption.Budgets) {
				t.Errorf("a GitOps pool was patched: policy %s, budgets %+v", got.Spec.Disruption.ConsolidationPolicy, got.Spec.Disruption.Budgets)
			}
			status := got.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation]
			if !strings.HasPrefix(status, StatusUnsafe+":") || !strings.Contains(status, "kept in sync by Argo CD") || !strings.Contains(status, "fix it in Git") {
				t.Errorf("status %q", status)
			}
			evs := strings.Join(drain(rec), "\n")
			if !strings.Contains(evs, "Warning "+events.ReasonUnsafeConsolidation) {
				t.Errorf("events %q, want %s", evs, events.ReasonUnsafeConsolidation)
			}
		})
	}
}
