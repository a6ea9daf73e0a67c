package adapter

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kevents "k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/internal/rig"
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

// TestLWSGroupOwnedByItsLeader: a LeaderWorkerSet group's PodGroup is owned by the group's
// leader pod — the leader itself, or the leader a worker names — so it goes when LWS restarts
// or removes the group; a worker whose leader is gone or going waits for the next one.
func TestLWSGroupOwnedByItsLeader(t *testing.T) {
	member := func(name, leader string, uid types.UID) *corev1.Pod {
		p := builders.Pod(name, "ml").Label(berthv1alpha1.PodGroupLabel, leader).Obj()
		p.UID = uid
		p.Annotations = map[string]string{berthv1alpha1.SourceAnnotation: gate.SourceLWS.Name}
		return p
	}
	leader := member("llm-0", "llm-0", "leader-uid")
	going := member("llm-1", "llm-1", "old-leader-uid")
	going.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	going.Finalizers = []string{"foregroundDeletion"}
	r := &Reconciler{Reader: fake.NewClientBuilder().WithObjects(leader, going).Build()}
	for _, tt := range []struct {
		pod     *corev1.Pod
		wantUID types.UID
		gone    bool
	}{
		{pod: leader, wantUID: "leader-uid"},
		{pod: member("llm-0-1", "llm-0", "w1"), wantUID: "leader-uid"},
		{pod: member("llm-1-1", "llm-1", "w2"), gone: true},
		{pod: member("llm-2-1", "llm-2", "w3"), gone: true},
	} {
		got, err := r.ownerOf(context.Background(), tt.pod)
		switch {
		case tt.gone && !errors.Is(err, errLeaderGone):
			t.Errorf("%s: owner %+v, %v; want errLeaderGone", tt.pod.Name, got, err)
		case !tt.gone && (err != nil || got.Kind != "Pod" || got.UID != tt.wantUID):
			t.Errorf("%s: owner %+v, %v; want pod %s", tt.pod.Name, got, err, tt.wantUID)
		}
	}
}

// TestLWSGroupShape: an adapted LeaderWorkerSet group lands in one zone; under startupPolicy
// LeaderReady (workers created only once the leader is ready) its leader is admitted first, and
// the pod says why the group is not held whole.
func TestLWSGroupShape(t *testing.T) {
	lws := func(name, policy string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
			"metadata": map[string]any{"name": name, "namespace": "ml"}, "spec": map[string]any{"startupPolicy": policy}}}
		return u
	}
	for _, tc := range []struct {
		policy  string
		want    int32
		warning bool
	}{
		{"LeaderCreated", 4, false},
		{"LeaderReady", 1, true},
	} {
		rec := kevents.NewFakeRecorder(10)
		r := &Reconciler{Reader: fake.NewClientBuilder().WithObjects(lws("llm", tc.policy)).Build(), Recorder: events.NewRecorder(rec)}
		pod := builders.Pod("llm-0", "ml").Label(berthv1alpha1.LWSNameLabel, "llm").Obj()
		pg := &berthv1alpha1.PodGroup{Spec: berthv1alpha1.PodGroupSpec{MinMember: 4}}
		if err := r.shapeLWSGroup(context.Background(), pod, pg); err != nil {
			t.Fatal(err)
		}
		if pg.Spec.MinMember != tc.want || pg.Spec.Topology == nil || pg.Spec.Topology.RequiredKey != corev1.LabelTopologyZone {
			t.Errorf("%s: spec %+v, want minMember %d in one zone", tc.policy, pg.Spec, tc.want)
		}
		if got := len(rec.Events) > 0; got != tc.warning {
			t.Errorf("%s: warning %v, want %v", tc.policy, got, tc.warning)
		}
	}
}

// TestLWSGroupSizeIsTheLeaders: after a rollout that changed a LeaderWorkerSet's size, a worker
// of the revision before, reconciled once the old PodGroup is gone, made the new group's
// PodGroup the old size — and minMember cannot change. The size is the leader's.
func TestLWSGroupSizeIsTheLeaders(t *testing.T) {
	leader := builders.Pod("llm-0", "ml").Label(berthv1alpha1.PodGroupLabel, "llm-0").Obj()
	leader.UID = "leader-uid"
	leader.Annotations = map[string]string{berthv1alpha1.SourceAnnotation: gate.SourceLWS.Name, berthv1alpha1.MinMemberAnnotation: "4"}
	old := builders.Pod("llm-0-1", "ml").Label(berthv1alpha1.PodGroupLabel, "llm-0").Obj()
	old.UID = "old-worker-uid"
	old.Annotations = map[string]string{berthv1alpha1.SourceAnnotation: gate.SourceLWS.Name, berthv1alpha1.MinMemberAnnotation: "2"}
	s, err := rig.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(leader, old).Build()
	r := &Reconciler{Client: c, Reader: c, Recorder: events.NewRecorder(kevents.NewFakeRecorder(10))}
	if err := r.create(context.Background(), old, gate.SourceLWS.Name, "llm-0"); err != nil {
		t.Fatal(err)
	}
	var pg berthv1alpha1.PodGroup
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ml", Name: "llm-0"}, &pg); err != nil {
		t.Fatal(err)
	}
	if pg.Spec.MinMember != 4 {
		t.Errorf("minMember %d, want the leader's 4 (the old worker says 2)", pg.Spec.MinMember)
	}
}
