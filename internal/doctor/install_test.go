package doctor

import (
	"context"
	"errors"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/berth-dev/berth/controllers/podgroup/gate"
)

// TestInstallBlamesOnlyBerth: a dry run refused by something other than berth's webhook (a
// policy engine, a quota) proves nothing about berth — the check is skipped and says why — while
// a failure calling berth's webhook is a finding; the dry-run member passes restricted Pod
// Security and carries requests and limits.
func TestInstallBlamesOnlyBerth(t *testing.T) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: podGroupCRD},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1", Served: true, Storage: true}}}}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: gate.ConfigurationName}}
	gr := schema.GroupResource{Resource: "pods"}
	for _, tt := range []struct {
		name     string
		err      error
		finding  bool
		skipWord string
	}{
		{"berth's webhook unreachable", apierrors.NewInternalError(errors.New(`failed calling webhook "berth.gate.scheduling.berth.dev": connection refused`)), true, ""},
		{"a policy engine", apierrors.NewForbidden(gr, "", errors.New(`admission webhook "validate.kyverno.svc" denied the request`)), false, "refused before berth's webhook"},
		{"a quota", apierrors.NewForbidden(gr, "", errors.New("exceeded quota: compute")), false, "cannot create pods"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(crd, cfg).WithInterceptorFuncs(interceptor.Funcs{
				Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
					return tt.err
				},
			}).Build()
			r, err := Install(context.Background(), c, "ml")
			if err != nil {
				t.Fatal(err)
			}
			if got := len(r.Findings) == 1 && r.Findings[0].Check == CheckInstallWebhook; got != tt.finding {
				t.Errorf("findings %+v, want a berth-webhook finding: %v", r.Findings, tt.finding)
			}
			if tt.skipWord != "" && (len(r.Skipped) != 1 || !strings.Contains(r.Skipped[0].Reason, tt.skipWord) || !r.Incomplete) {
				t.Errorf("skipped %+v (incomplete %v), want one naming %q", r.Skipped, r.Incomplete, tt.skipWord)
			}
		})
	}
	m := selfCheckMember("ml")
	sc := m.Spec.Containers[0].SecurityContext
	if m.Spec.SecurityContext == nil || !*m.Spec.SecurityContext.RunAsNonRoot || sc == nil || *sc.AllowPrivilegeEscalation ||
		m.Spec.Containers[0].Resources.Limits.Memory().IsZero() {
		t.Errorf("the dry-run member is not restricted or has no limits: %+v", m.Spec)
	}
}
