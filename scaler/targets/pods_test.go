package targets

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/berth-dev/berth/scaler"
)

// verdicts is a fixed CapacityVerdicts: the UIDs Karpenter said it has no node for.
type verdicts map[types.UID]bool

func (v verdicts) NoCapacity(uid types.UID) bool { return v[uid] }

func TestStuck(t *testing.T) {
	waiting := func(reason string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "vllm", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
	}
	unschedulable := []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	tests := []struct {
		name     string
		pod      corev1.Pod
		capacity CapacityVerdicts
		want     scaler.StallReason
	}{
		{"crash loop", corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting("CrashLoopBackOff")}}}, nil, scaler.StallCrashLoop},
		{"init container cannot pull", corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{waiting("ImagePullBackOff")}}}, nil, scaler.StallCrashLoop},
		{"missing secret", corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting("CreateContainerConfigError")}}}, nil, scaler.StallCrashLoop},
		{"first pull error may pass", corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting("ErrImagePull")}}}, nil, ""},
		{"creating", corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting("ContainerCreating")}}}, nil, ""},
		{"unschedulable, Karpenter says no node", corev1.Pod{ObjectMeta: uid("a"), Status: corev1.PodStatus{Conditions: unschedulable}}, verdicts{"a": true}, scaler.StallUnschedulable},
		{"unschedulable, a node is coming", corev1.Pod{ObjectMeta: uid("a"), Status: corev1.PodStatus{Conditions: unschedulable}}, verdicts{}, ""},
		{"unschedulable, nothing known of Karpenter", corev1.Pod{ObjectMeta: uid("a"), Status: corev1.PodStatus{Conditions: unschedulable}}, nil, ""},
		{"bound since", corev1.Pod{ObjectMeta: uid("a"), Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Conditions: unschedulable}}, verdicts{"a": true}, ""},
	}
	for _, tc := range tests {
		if got := Stuck(&tc.pod, tc.capacity); got != tc.want {
			t.Errorf("%s: Stuck = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestSlimPodKeepsWhatStuckReads(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: uid("a"), Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}},
		Status: corev1.PodStatus{
			Conditions:        []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available"}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "vllm", Image: "vllm/vllm-openai", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 5m0s"}}}},
		}}
	obj, err := SlimPod(p)
	if err != nil {
		t.Fatal(err)
	}
	slim := obj.(*corev1.Pod)
	if Stuck(slim, nil) != Stuck(p, nil) || !unschedulable(slim) || len(slim.Spec.Containers) != 0 || slim.Status.Conditions[0].Message != "" {
		t.Errorf("slim pod %+v: keeps too little or too much", slim)
	}
}

func uid(u string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: "p", UID: types.UID(u)} }

// TestStartedAt: when the longest-running container started, kept through SlimPod; unknown
// while a container does not run.
func TestStartedAt(t *testing.T) {
	at := func(m int) metav1.Time { return metav1.NewTime(time.Date(2026, 1, 1, 0, m, 0, 0, time.UTC)) }
	running := func(name string, m int) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(m)}}}
	}
	for _, tc := range []struct {
		name string
		cs   []corev1.ContainerStatus
		want time.Time
	}{
		{"none", nil, time.Time{}},
		{"one", []corev1.ContainerStatus{running("vllm", 5)}, at(5).Time},
		{"a sidecar restarted later: the older start", []corev1.ContainerStatus{running("vllm", 5), running("proxy", 9)}, at(5).Time},
		{"one waiting", []corev1.ContainerStatus{running("vllm", 5), {Name: "proxy", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}, time.Time{}},
	} {
		p := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: tc.cs}}
		slim, err := SlimPod(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := startedAt(slim.(*corev1.Pod)); !got.Equal(tc.want) {
			t.Errorf("%s: startedAt = %v, want %v", tc.name, got, tc.want)
		}
	}
}
