package targets

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// countingClient counts the Gets that reach the API.
type countingClient struct {
	client.Client
	gets int
}

func (c *countingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	return c.Client.Get(ctx, key, obj, opts...)
}

func fakeWith(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(runtime.NewScheme()).WithObjects(objs...).Build()
}

func shopScaledObject() *unstructured.Unstructured {
	so := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": "inference", "name": "shop", "uid": "u-1"},
		"spec":     map[string]any{"scaleTargetRef": map[string]any{"name": "shop-blue"}},
	}}
	so.SetGroupVersionKind(ScaledObjectGVK)
	return so
}

// TestScaledObjectReads: what reaches the API. A ScaledObject KEDA created a moment ago, which
// the watch has not brought yet, is read through the API where the trigger needs its target;
// a trigger with podSelector goes on without it. Without the watch, a not-found is kept for
// the TTL for a podSelector trigger (a ScaledJob, asked about every second on a stream) and
// read again for one that needs the target.
func TestScaledObjectReads(t *testing.T) {
	ctx := context.Background()
	api := &countingClient{Client: fakeWith(shopScaledObject())}
	watched := &Targets{API: api, ScaledObjects: fakeWith()}
	so, err := watched.scaledObject(ctx, "inference", "shop", true)
	if err != nil || so.GetUID() != "u-1" || api.gets != 1 {
		t.Fatalf("just created, not watched yet: %v, %v, %d API reads; want the API's, read once", so, err, api.gets)
	}
	if _, err := watched.scaledObject(ctx, "inference", "shop", false); !apierrors.IsNotFound(err) || api.gets != 1 {
		t.Fatalf("podSelector, not watched yet: %v, %d API reads; want not found from the watch, no API read", err, api.gets)
	}

	api = &countingClient{Client: fakeWith()}
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	polling := &Targets{API: api, Clock: clk}
	for range 3 {
		if _, err := polling.scaledObject(ctx, "inference", "a-scaledjob", false); !apierrors.IsNotFound(err) {
			t.Fatalf("a ScaledJob: %v, want not found", err)
		}
	}
	if api.gets != 1 {
		t.Fatalf("a ScaledJob asked about three times within the TTL: %d API reads, want 1", api.gets)
	}
	if _, err := polling.scaledObject(ctx, "inference", "a-scaledjob", true); !apierrors.IsNotFound(err) || api.gets != 2 {
		t.Fatalf("a trigger needing the target after a kept not-found: %v, %d API reads; want it read again", err, api.gets)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	if _, err := polling.scaledObject(ctx, "inference", "a-scaledjob", false); !apierrors.IsNotFound(err) || api.gets != 3 {
		t.Fatalf("past the TTL: %v, %d API reads; want read again", err, api.gets)
	}
}
