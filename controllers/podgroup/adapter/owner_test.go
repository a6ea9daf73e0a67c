package adapter

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/berth-dev/berth/test/builders"
)

// TestOwnerIsTheTopWorkload: an adapted PodGroup is owned by the member's topmost controller —
// the JobSet, not one of its Jobs — so every Job of a JobSet shares the gang (no GangNameTaken
// between them) and the PodGroup is not collected with the first Job.
func TestOwnerIsTheTopWorkload(t *testing.T) {
	js := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": "ddp", "namespace": "ml", "uid": "js-uid"}}}
	job := func(name, uid string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "Job",
			"metadata": map[string]any{"name": name, "namespace": "ml", "uid": uid,
				"ownerReferences": []any{map[string]any{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "ddp", "uid": "js-uid", "controller": true}}}}}
	}
	plain := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": "plain", "namespace": "ml", "uid": "plain-uid"}}}
	r := &Reconciler{Reader: fake.NewClientBuilder().WithObjects(js, job("ddp-a", "a-uid"), job("ddp-b", "b-uid"), plain).Build()}
	ownedBy := func(name, uid string) metav1.OwnerReference {
		pod := builders.Pod("p-"+name, "ml").Obj()
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: types.UID(uid), Controller: ptr.To(true)}}
		got, err := r.ownerOf(context.Background(), pod)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, tt := range []struct {
		job, uid, wantKind, wantName string
	}{
		{"ddp-a", "a-uid", "JobSet", "ddp"},
		{"ddp-b", "b-uid", "JobSet", "ddp"},
		{"plain", "plain-uid", "Job", "plain"},
		// A Job that is gone (or berth may not read): the chain stops at the pod's controller.
		{"gone", "gone-uid", "Job", "gone"},
	} {
		if got := ownedBy(tt.job, tt.uid); got.Kind != tt.wantKind || got.Name != tt.wantName {
			t.Errorf("a pod of Job %s: owner %s %s, want %s %s", tt.job, got.Kind, got.Name, tt.wantKind, tt.wantName)
		}
	}
	lone := builders.Pod("lone", "ml").Obj()
	lone.UID = "lone-uid"
	if got, err := r.ownerOf(context.Background(), lone); err != nil || got.Kind != "Pod" || got.UID != "lone-uid" {
		t.Errorf("a pod without a controller: owner %+v (%v), want the pod", got, err)
	}
}
