package gate

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ConfigurationName is the name of berth's MutatingWebhookConfiguration.
const ConfigurationName = "berth-pod-gate"

// Configuration builds berth's MutatingWebhookConfiguration: one webhook per gang source, each
// scoped so that pods which are not gang members never reach berth.
//
// Failure policy: Fail. A gang member created while the webhook is down is rejected (its
// controller retries) rather than created without its gate — an ungated member would be
// scheduled alone, the exact failure berth exists to prevent. Pods without a gang label never
// match (objectSelector, or for annotation-based sources a matchCondition evaluated by the
// apiserver itself), so they are unaffected when the webhook is down.
func Configuration(client admissionregistrationv1.WebhookClientConfig, adapters []Source) *admissionregistrationv1.MutatingWebhookConfiguration {
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName},
	}
	for _, s := range append([]Source{SourceBerth}, adapters...) {
		cc := client.DeepCopy()
		if cc.URL == nil && cc.Service != nil {
			cc.Service.Path = ptr.To(Path)
		}
		w := admissionregistrationv1.MutatingWebhook{
			Name:                    s.Name + ".gate.scheduling.berth.dev",
			ClientConfig:            *cc,
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			TimeoutSeconds:          ptr.To[int32](5),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"},
			}}},
		}
		if s.LabelKey != "" {
			w.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: s.LabelKey, Operator: metav1.LabelSelectorOpExists}}}
		} else {
			w.MatchConditions = []admissionregistrationv1.MatchCondition{{
				Name:       "has-" + s.Name + "-annotation",
				Expression: "has(object.metadata.annotations) && '" + s.AnnotationKey + "' in object.metadata.annotations",
			}}
		}
		cfg.Webhooks = append(cfg.Webhooks, w)
	}
	return cfg
}
