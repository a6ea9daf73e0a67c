package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// dynamicWatch asks for a cycle when dynamic resources change in a way that can let a waiting
// member fit, which no pod, node or PodGroup event says: a ResourceSlice published, changed or
// removed (a new node's driver publishes its devices after the node is Ready), a ResourceClaim
// created or deleted, or its allocation made or released (a finished pod's devices are freed
// after its pod is gone), a DeviceClass created, changed or deleted. Without it such a gang
// waited for the next resync (30 s). It is set up by the first cycle that reads dynamic
// resources, so a cluster that does not use DRA never watches them; a kind whose setup failed
// is tried again by the next such cycle.
type dynamicWatch struct {
	informers cache.Informers
	fire      func()

	mu      sync.Mutex
	watched map[string]bool // by kind
}

// start registers each kind's handler once.
func (w *dynamicWatch) start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watched == nil {
		w.watched = map[string]bool{}
	}
	var errs []error
	for _, reg := range []struct {
		kind    string
		obj     client.Object
		handler toolscache.ResourceEventHandler
	}{
		{"ResourceSlice", &resourceapi.ResourceSlice{}, changeHandler(generationChanged[*resourceapi.ResourceSlice], w.fire)},
		{"ResourceClaim", &resourceapi.ResourceClaim{}, changeHandler(claimChanged, w.fire)},
		{"DeviceClass", &resourceapi.DeviceClass{}, changeHandler(generationChanged[*resourceapi.DeviceClass], w.fire)},
	} {
		if w.watched[reg.kind] {
			continue
		}
		inf, err := w.informers.GetInformer(ctx, reg.obj)
		if err == nil {
			_, err = inf.AddEventHandler(reg.handler)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("watching %ss for admission cycles: %w", reg.kind, err))
			continue
		}
		w.watched[reg.kind] = true
	}
	return errors.Join(errs...)
}

// changeHandler fires on every add and delete of a T, and on the updates changed says matter.
func changeHandler[T client.Object](changed func(old, cur T) bool, fire func()) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { fire() },
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(T)
			c, ok2 := cur.(T)
			if !ok1 || !ok2 || changed(o, c) {
				fire()
			}
		},
		DeleteFunc: func(any) { fire() },
	}
}

// generationChanged: an object's spec changed (a ResourceSlice's devices or pool, a DeviceClass's
// selectors); its generation says so.
func generationChanged[T client.Object](old, cur T) bool {
	return old.GetGeneration() != cur.GetGeneration()
}

// claimChanged: a ResourceClaim was allocated (devices taken) or its allocation released
// (devices free). A claim being deleted holds its devices until it is gone: its delete event
// says when.
func claimChanged(old, cur *resourceapi.ResourceClaim) bool {
	return (old.Status.Allocation == nil) != (cur.Status.Allocation == nil)
}
