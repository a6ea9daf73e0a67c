package status

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

func pods(ps ...*corev1.Pod) []corev1.Pod {
	out := make([]corev1.Pod, 0, len(ps))
	for _, p := range ps {
		out = append(out, *p)
	}
	return out
}

func TestCountMembers(t *testing.T) {
	p := func(name string) *builders.PodBuilder { return builders.Pod(name, "ml").Member("g") }
	tests := []struct {
		name string
		pods []corev1.Pod
		want berthv1alpha1.MemberCounts
	}{
		{"none", nil, berthv1alpha1.MemberCounts{}},
		{"gated wins over everything", pods(p("a").Gated().Phase(corev1.PodPending).Obj()), berthv1alpha1.MemberCounts{Total: 1, Gated: 1}},
		{"bound not running is scheduled", pods(p("a").Node("n1").Phase(corev1.PodPending).Obj()), berthv1alpha1.MemberCounts{Total: 1, Scheduled: 1}},
		{"pending unbound counts only in total", pods(p("a").Phase(corev1.PodPending).Obj()), berthv1alpha1.MemberCounts{Total: 1}},
		{"mixed", pods(
			p("a").Node("n").Phase(corev1.PodRunning).Obj(),
			p("b").Node("n").Phase(corev1.PodRunning).Obj(),
			p("c").Node("n").Phase(corev1.PodSucceeded).Obj(),
			p("d").Node("n").Phase(corev1.PodFailed).Obj(),
			p("e").Gated().Obj(),
		), berthv1alpha1.MemberCounts{Total: 5, Gated: 1, Running: 2, Succeeded: 1, Failed: 1}},
		{"deleting pods are not members", pods(p("a").Node("n").Phase(corev1.PodRunning).Deleting().Obj()), berthv1alpha1.MemberCounts{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, countMembers(tt.pods)); diff != "" {
				t.Errorf("countMembers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPhase(t *testing.T) {
	type counts = berthv1alpha1.MemberCounts
	const (
		none      = WorkloadNone
		active    = WorkloadActive
		succeeded = WorkloadSucceeded
		failed    = WorkloadFailed
	)
	tests := []struct {
		name string
		in   PhaseInputs
		want berthv1alpha1.PodGroupPhase
	}{
		{"new group is pending", PhaseInputs{MinMember: 4}, berthv1alpha1.PodGroupPending},
		{"gated members wait", PhaseInputs{MinMember: 4, Members: counts{Total: 4, Gated: 4}}, berthv1alpha1.PodGroupPending},
		{"capacity requested", PhaseInputs{MinMember: 4, Members: counts{Total: 4, Gated: 4}, Provisioning: true}, berthv1alpha1.PodGroupProvisioning},
		{"released, not all running", PhaseInputs{MinMember: 4, Members: counts{Total: 4, Running: 3, Scheduled: 1}, Admitted: true}, berthv1alpha1.PodGroupAdmitted},
		{"minMember running", PhaseInputs{MinMember: 4, Members: counts{Total: 4, Running: 4}, Admitted: true}, berthv1alpha1.PodGroupRunning},
		{"some done some running counts as running", PhaseInputs{MinMember: 4, Members: counts{Total: 4, Running: 2, Succeeded: 2}, Admitted: true}, berthv1alpha1.PodGroupRunning},
		{"all succeeded, no workload", PhaseInputs{MinMember: 4, Members: counts{Total: 4, Succeeded: 4}, Admitted: true}, berthv1alpha1.PodGroupSucceeded},
		{"a member lost, no workload: not failed while others run", PhaseInputs{MinMember: 4, Members: counts{Total: 4, Running: 3, Failed: 1}, Admitted: true}, berthv1alpha1.PodGroupAdmitted},
		{"its replacement waits", PhaseInputs{MinMember: 4, Members: counts{Total: 5, Running: 3, Failed: 1, Gated: 1}, Admitted: true}, berthv1alpha1.PodGroupAdmitted},
		{"everything ended short, no workload", PhaseInputs{MinMember: 4, Members: counts{Total: 4, Succeeded: 1, Failed: 3}, Admitted: true}, berthv1alpha1.PodGroupFailed},
		{"spares left", PhaseInputs{MinMember: 4, Members: counts{Total: 6, Running: 5, Failed: 1}, Admitted: true}, berthv1alpha1.PodGroupRunning},
		{"an active workload never finishes the gang", PhaseInputs{MinMember: 4, Members: counts{Total: 4, Failed: 4}, Workload: active, Admitted: true}, berthv1alpha1.PodGroupAdmitted},
		{"between a workload's waves", PhaseInputs{MinMember: 4, Members: counts{Total: 8, Succeeded: 4, Gated: 4}, Workload: active}, berthv1alpha1.PodGroupPending},
		{"the workload completed", PhaseInputs{MinMember: 4, Members: counts{Total: 8, Succeeded: 8}, Workload: succeeded}, berthv1alpha1.PodGroupSucceeded},
		{"the workload failed with members still running", PhaseInputs{MinMember: 4, Members: counts{Total: 4, Running: 4}, Workload: failed, Admitted: true}, berthv1alpha1.PodGroupFailed},
		{"a new generation after failure moves on", PhaseInputs{MinMember: 4, Members: counts{Total: 8, Failed: 4, Gated: 4}, Workload: none}, berthv1alpha1.PodGroupPending},
		{"timed out for good", PhaseInputs{MinMember: 4, Members: counts{Total: 4, Gated: 4}, TimedOutForGood: true}, berthv1alpha1.PodGroupFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Phase(tt.in); got != tt.want {
				t.Errorf("Phase(%+v) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestComputeStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	earlier := metav1.NewTime(now.Add(-time.Hour))
	pg := builders.PodGroup("g", "ml").MinMember(2).Obj()
	pg.Generation = 3
	running := pods(
		builders.Pod("a", "ml").Member("g").Node("n").Phase(corev1.PodRunning).Obj(),
		builders.Pod("b", "ml").Member("g").Node("n").Phase(corev1.PodRunning).Obj(),
	)

	t.Run("first status", func(t *testing.T) {
		got := computeStatus(pg, running, nil, WorkloadNone, now)
		want := berthv1alpha1.PodGroupStatus{
			ObservedGeneration: 3,
			Phase:              berthv1alpha1.PodGroupRunning,
			Members:            berthv1alpha1.MemberCounts{Total: 2, Running: 2},
			Conditions: []metav1.Condition{{
				Type: berthv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: berthv1alpha1.ReasonMembersRunning,
				Message: "2 of 2 members running", ObservedGeneration: 3, LastTransitionTime: now,
			}},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("computeStatus (-want +got):\n%s", diff)
		}
	})
	t.Run("unchanged condition keeps its transition time", func(t *testing.T) {
		prev := pg.DeepCopy()
		prev.Status = computeStatus(pg, running, nil, WorkloadNone, earlier)
		got := computeStatus(prev, running, nil, WorkloadNone, now)
		if !got.Conditions[0].LastTransitionTime.Equal(&earlier) {
			t.Errorf("lastTransitionTime = %v, want %v kept", got.Conditions[0].LastTransitionTime, earlier)
		}
	})
	t.Run("waiting for members", func(t *testing.T) {
		got := computeStatus(pg, running[:1], nil, WorkloadNone, now)
		c := got.Conditions[0]
		if c.Status != metav1.ConditionFalse || c.Reason != berthv1alpha1.ReasonWaitingForMembers || c.Message != "1 of 2 members exist" {
			t.Errorf("condition = %+v, want False/%s/'1 of 2 members exist'", c, berthv1alpha1.ReasonWaitingForMembers)
		}
	})
	t.Run("input is not modified", func(t *testing.T) {
		before := pg.DeepCopy()
		_ = computeStatus(pg, running, nil, WorkloadNone, now)
		if diff := cmp.Diff(before, pg); diff != "" {
			t.Errorf("computeStatus modified its input:\n%s", diff)
		}
	})
}

func TestWorkloadState(t *testing.T) {
	job := func(conds ...map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "Job",
			"metadata": map[string]any{"name": "train", "namespace": "ml", "uid": "job-uid"}}}
		var list []any
		for _, c := range conds {
			list = append(list, c)
		}
		if list != nil {
			_ = unstructured.SetNestedSlice(u.Object, list, "status", "conditions")
		}
		return u
	}
	cond := func(typ, status string) map[string]any { return map[string]any{"type": typ, "status": status} }
	ref := berthv1alpha1.WorkloadReference{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "job-uid"}
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		want WorkloadState
	}{
		{"running", job(), WorkloadActive},
		{"suspended", job(cond("Suspended", "True")), WorkloadActive},
		{"complete", job(cond("Complete", "True")), WorkloadSucceeded},
		{"success criteria met, finishing", job(cond("SuccessCriteriaMet", "True")), WorkloadSucceeded},
		{"failure target, finishing", job(cond("FailureTarget", "True")), WorkloadFailed},
		{"failed", job(cond("Failed", "True")), WorkloadFailed},
		{"a false terminal condition", job(cond("Failed", "False")), WorkloadActive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(tc.obj).Build()
			got, err := newWorkloads(c).state(context.Background(), "ml", ref)
			if err != nil || got != tc.want {
				t.Errorf("state = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	t.Run("gone", func(t *testing.T) {
		got, err := newWorkloads(fake.NewClientBuilder().Build()).state(context.Background(), "ml", ref)
		if err != nil || got != WorkloadNone {
			t.Errorf("state of a deleted workload = %q, %v; want none", got, err)
		}
	})
}

func TestWorkloadIsTheTopController(t *testing.T) {
	js := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": "ddp", "namespace": "ml", "uid": "js-uid"}}}
	job := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": "ddp-workers-0", "namespace": "ml", "uid": "job-uid",
			"ownerReferences": []any{map[string]any{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "ddp", "uid": "js-uid", "controller": true}}}}}
	pod := builders.Pod("ddp-workers-0-0-abc", "ml").Member("ddp").Obj()
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "ddp-workers-0", UID: "job-uid", Controller: ptr.To(true)}}
	lone := builders.Pod("lone", "ml").Member("ddp").Obj()
	w := newWorkloads(fake.NewClientBuilder().WithObjects(js, job).Build())
	got, state, err := w.of(context.Background(), "ml", pods(lone, pod))
	want := &berthv1alpha1.WorkloadReference{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "ddp", UID: "js-uid"}
	if err != nil || state != WorkloadActive || !cmp.Equal(got, want) {
		t.Errorf("workload = %+v, %q, %v; want %+v, active", got, state, err, want)
	}
	if got, state, err := w.of(context.Background(), "ml", pods(lone)); err != nil || got != nil || state != WorkloadNone {
		t.Errorf("members without a controller: %+v, %q, %v; want none", got, state, err)
	}
}

// TestWorkloadKinds: the owners berth understands, found up the controller chain, with their
// terminal conditions (or none: LeaderWorkerSets and RayClusters run until deleted).
func TestWorkloadKinds(t *testing.T) {
	obj := func(apiVersion, kind, name, uid string, owner *metav1.OwnerReference, conds ...map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind,
			"metadata": map[string]any{"name": name, "namespace": "ml", "uid": uid}}}
		if owner != nil {
			u.SetOwnerReferences([]metav1.OwnerReference{*owner})
		}
		if len(conds) > 0 {
			list := make([]any, 0, len(conds))
			for _, c := range conds {
				list = append(list, c)
			}
			_ = unstructured.SetNestedSlice(u.Object, list, "status", "conditions")
		}
		return u
	}
	ctrlRef := func(apiVersion, kind, name, uid string) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(true)}
	}
	done := func(typ string) map[string]any { return map[string]any{"type": typ, "status": "True"} }
	for _, tc := range []struct {
		name     string
		objs     []client.Object
		podOwner *metav1.OwnerReference
		want     berthv1alpha1.WorkloadReference
		state    WorkloadState
	}{
		{"LeaderWorkerSet group: pod → StatefulSet → LeaderWorkerSet, never terminal",
			[]client.Object{obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "llm", "lws", nil, done("Available")),
				obj("apps/v1", "StatefulSet", "llm-0", "sts", ctrlRef("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "llm", "lws"))},
			ctrlRef("apps/v1", "StatefulSet", "llm-0", "sts"),
			berthv1alpha1.WorkloadReference{APIVersion: "leaderworkerset.x-k8s.io/v1", Kind: "LeaderWorkerSet", Name: "llm", UID: "lws"}, WorkloadActive},
		{"PyTorchJob succeeded",
			[]client.Object{obj("kubeflow.org/v1", "PyTorchJob", "ft", "pt", nil, done("Running"), done("Succeeded"))},
			ctrlRef("kubeflow.org/v1", "PyTorchJob", "ft", "pt"),
			berthv1alpha1.WorkloadReference{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "ft", UID: "pt"}, WorkloadSucceeded},
		{"TrainJob through its JobSet, failed",
			[]client.Object{obj("trainer.kubeflow.org/v1alpha1", "TrainJob", "tj", "tj", nil, done("Failed")),
				obj("jobset.x-k8s.io/v1alpha2", "JobSet", "tj", "js", ctrlRef("trainer.kubeflow.org/v1alpha1", "TrainJob", "tj", "tj")),
				obj("batch/v1", "Job", "tj-node-0", "job", ctrlRef("jobset.x-k8s.io/v1alpha2", "JobSet", "tj", "js"))},
			ctrlRef("batch/v1", "Job", "tj-node-0", "job"),
			berthv1alpha1.WorkloadReference{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "tj", UID: "tj"}, WorkloadFailed},
		{"RayCluster worker group, never terminal",
			[]client.Object{obj("ray.io/v1", "RayCluster", "rc", "rc", nil)},
			ctrlRef("ray.io/v1", "RayCluster", "rc", "rc"),
			berthv1alpha1.WorkloadReference{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "rc", UID: "rc"}, WorkloadActive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := builders.Pod("m-0", "ml").Member("g").Obj()
			pod.OwnerReferences = []metav1.OwnerReference{*tc.podOwner}
			w := newWorkloads(fake.NewClientBuilder().WithObjects(tc.objs...).Build())
			got, state, err := w.of(context.Background(), "ml", pods(pod))
			if err != nil || got == nil || *got != tc.want || state != tc.state {
				t.Errorf("workload = %+v, %q, %v; want %+v, %q", got, state, err, tc.want, tc.state)
			}
		})
	}
}
