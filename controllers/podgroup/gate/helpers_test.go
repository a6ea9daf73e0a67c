package gate

import admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

func admissionRegistrationURL(url string) admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{URL: &url}
}
