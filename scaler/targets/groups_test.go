package targets

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scaler"
)

// lwsPod is a pod of LeaderWorkerSet "llm" with groups of size; leader "" makes a leader.
func lwsPod(name, leader string, size string, readyAtMin int) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml",
		Labels:      map[string]string{berthv1alpha1.LWSNameLabel: "llm"},
		Annotations: map[string]string{berthv1alpha1.LWSSizeAnnotation: size}}}
	if leader != "" {
		p.Annotations[berthv1alpha1.LWSLeaderNameAnnotation] = leader
	} else {
		p.Labels[berthv1alpha1.LWSWorkerIndexLabel] = "0"
	}
	if readyAtMin >= 0 {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 1, 0, readyAtMin, 0, 0, time.UTC))}}
	}
	return p
}

// TestListCountsOneReplicaPerGroup: the replicas of a LeaderWorkerSet are its groups, read at
// their leaders; a group is ready once its leader and every worker are (since the last of
// them), not while a worker is missing or starting — whether the selector picks leaders only
// (the LeaderWorkerSet's /scale selector) or every pod of it.
func TestListCountsOneReplicaPerGroup(t *testing.T) {
	gone := lwsPod("llm-3-1", "llm-3", "2", 1)
	gone.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	gone.Finalizers = []string{"x"}
	objs := []*corev1.Pod{
		lwsPod("llm-0", "", "3", 2), lwsPod("llm-0-1", "llm-0", "3", 5), lwsPod("llm-0-2", "llm-0", "3", 4), // whole, ready since minute 5
		lwsPod("llm-1", "", "3", 2), lwsPod("llm-1-1", "llm-1", "3", 3), lwsPod("llm-1-2", "llm-1", "3", -1), // a worker starting
		lwsPod("llm-2", "", "3", 2), lwsPod("llm-2-1", "llm-2", "3", 3), // a worker missing
		lwsPod("llm-3", "", "2", 2), gone, // its only worker is being deleted
		lwsPod("solo-0", "", "1", 7), // a group of one
	}
	b := fake.NewClientBuilder()
	for _, o := range objs {
		b = b.WithObjects(o)
	}
	tg := &Targets{Pods: b.Build()}
	want := map[string]time.Time{
		"llm-0": time.Date(2026, 1, 1, 0, 5, 0, 0, time.UTC), "llm-1": {}, "llm-2": {}, "llm-3": {},
		"solo-0": time.Date(2026, 1, 1, 0, 7, 0, 0, time.UTC),
	}
	for _, sel := range []string{berthv1alpha1.LWSNameLabel + "=llm," + berthv1alpha1.LWSWorkerIndexLabel + "=0", berthv1alpha1.LWSNameLabel + "=llm"} {
		got, err := tg.List(context.Background(), "ml", mustParse(t, sel))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]scaler.Pod{}
		for _, p := range got {
			seen[p.Name] = p
		}
		if len(seen) != len(want) || len(got) != len(want) {
			t.Errorf("selector %s: replicas %v, want the %d leaders", sel, got, len(want))
		}
		for name, at := range want {
			p, ok := seen[name]
			if !ok || p.Ready != !at.IsZero() || !p.ReadyAt.Equal(at) {
				t.Errorf("selector %s: %s = %+v, want ready=%v since %v", sel, name, p, !at.IsZero(), at)
			}
		}
	}
}

// TestGroupStuck: a group whose worker will not start by itself is stuck, so the scaler stops
// counting it as capacity on its way.
func TestGroupStuck(t *testing.T) {
	leader := scaler.Pod{Name: "llm-0", Ready: true}
	got := groupState(leader, 2, []scaler.Pod{{Name: "llm-0-1", Stuck: scaler.StallCrashLoop}})
	if got.Ready || got.Stuck != scaler.StallCrashLoop {
		t.Errorf("group with a crash-looping worker: %+v", got)
	}
}

func mustParse(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}
