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
// after its pod is gone). Without it such a gang waited for the next resync (30 s). It is set up
// by the first cycle that reads dynamic resources, so a cluster that does not use DRA never
// watches them; a setup that failed is tried again by the next such cycle.
type dynamicWatch struct {
	informers cache.Informers
	fire      func()

	mu      sync.Mutex
	watched bool
}

// start registers the handlers once.
func (w *dynamicWatch) start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watched {
		return nil
	}
	var errs []error
	for _, reg := range []struct {
		obj     client.Object
		handler toolscache.ResourceEventHandler
	}{
		{&resourceapi.ResourceSlice{}, changeHandler(sliceChanged, w.fire)},
		{&resourceapi.ResourceClaim{}, changeHandler(claimChanged, w.fire)},
	} {
		inf, err := w.informers.GetInformer(ctx, reg.obj)
		if err == nil {
			_, err = inf.AddEventHandler(reg.handler)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("watching %T for admission cycles: %w", reg.obj, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err // a handler registered twice on a retry only fires twice: cycles coalesce
	}
	w.watched = true
	return nil
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

// sliceChanged: a ResourceSlice's devices or pool changed (its spec; the generation says so).
func sliceChanged(old, cur *resourceapi.ResourceSlice) bool {
	return old.Generation != cur.Generation
}

// claimChanged: a ResourceClaim was allocated (devices taken) or its allocation released
// (devices free). A claim being deleted holds its devices until it is gone: its delete event
// says when.
func claimChanged(old, cur *resourceapi.ResourceClaim) bool {
	return (old.Status.Allocation == nil) != (cur.Status.Allocation == nil)
}
