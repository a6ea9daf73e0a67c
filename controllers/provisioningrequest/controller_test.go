package provisioningrequest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestTemplatesCreatedJustBeforeTheRequest: Kueue creates a request's PodTemplates and then the
// request; the cache may not have a template yet. It is read from the API server; missing
// there too, the request waits templateGrace before it fails.
func TestTemplatesCreatedJustBeforeTheRequest(t *testing.T) {
	ctx := context.Background()
	tpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ppt", Namespace: "team-a"}}
	cache := fake.NewClientBuilder().Build()
	live := fake.NewClientBuilder().WithObjects(tpl).Build()
	r := New(cache, live, clocktesting.NewFakePassiveClock(t0), nil, Options{})
	pr := request(autoscalingv1.ProvisioningClassCheckCapacity)
	pods, err := r.requestedPods(ctx, pr, t0.Add(time.Second))
	if err != nil || len(pods) != 2 {
		t.Fatalf("template only on the API server: %d pods, %v", len(pods), err)
	}
	r = New(cache, cache, clocktesting.NewFakePassiveClock(t0), nil, Options{})
	if _, err := r.requestedPods(ctx, pr, t0.Add(time.Second)); !errors.Is(err, errTemplateNotYet) {
		t.Errorf("missing template on a young request: %v, want errTemplateNotYet", err)
	}
	if _, err := r.requestedPods(ctx, pr, t0.Add(templateGrace)); err == nil || errors.Is(err, errTemplateNotYet) || !strings.Contains(err.Error(), "team-a/ppt") {
		t.Errorf("missing template after the grace: %v, want an error naming it", err)
	}
}
