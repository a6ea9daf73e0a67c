package admission

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
)

// TestDynamicWatchFiresOnWhatCanLetAMemberFit: once started, the watch asks for a cycle when a
// ResourceSlice comes, changes its devices or goes, when a DeviceClass comes or changes, and when
// a ResourceClaim comes, goes, or is allocated or released — a finished pod's devices are freed after its pod is gone, and no other
// event said so (a gang waiting for them waited for the resync). Status-only noise does not.
func TestDynamicWatchFiresOnWhatCanLetAMemberFit(t *testing.T) {
	ctx := context.Background()
	informers := &informertest.FakeInformers{}
	fired := 0
	w := &dynamicWatch{informers: informers, fire: func() { fired++ }}
	slices, err := informers.FakeInformerFor(ctx, &resourceapi.ResourceSlice{})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := informers.FakeInformerFor(ctx, &resourceapi.ResourceClaim{})
	if err != nil {
		t.Fatal(err)
	}
	classes, err := informers.FakeInformerFor(ctx, &resourceapi.DeviceClass{})
	if err != nil {
		t.Fatal(err)
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com", Generation: 1}}
	classV2 := class.DeepCopy()
	classV2.Generation = 2
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu", Generation: 1}}
	slices.Add(slice) // before start: nothing listens
	if fired != 0 {
		t.Fatalf("fired %d times before the watch started", fired)
	}
	for range 2 { // started twice: handlers registered once
		if err := w.start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	newer := slice.DeepCopy()
	newer.Generation = 2
	relabelled := newer.DeepCopy()
	relabelled.Labels = map[string]string{"team": "a"}
	allocated := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "train-0-gpu"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}}}
	released := allocated.DeepCopy()
	released.Status.Allocation = nil
	reserved := allocated.DeepCopy()
	reserved.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "train-0"}}
	for _, step := range []struct {
		name  string
		do    func()
		fires int
	}{
		{"a slice published", func() { slices.Add(slice) }, 1},
		{"its devices changed", func() { slices.Update(slice, newer) }, 1},
		{"only its labels changed", func() { slices.Update(newer, relabelled) }, 0},
		{"the slice removed", func() { slices.Delete(relabelled) }, 1},
		{"a claim created", func() { claims.Add(released) }, 1},
		{"the claim allocated", func() { claims.Update(released, allocated) }, 1},
		{"the claim reserved for its pod", func() { claims.Update(allocated, reserved) }, 0},
		{"its devices released", func() { claims.Update(reserved, released) }, 1},
		{"the claim deleted", func() { claims.Delete(released) }, 1},
		{"a DeviceClass created", func() { classes.Add(class) }, 1},
		{"its selectors changed", func() { classes.Update(class, classV2) }, 1},
	} {
		before := fired
		step.do()
		if got := fired - before; got != step.fires {
			t.Errorf("%s: %d cycles asked for, want %d", step.name, got, step.fires)
		}
	}
}
