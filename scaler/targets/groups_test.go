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
		Labels:      map[string]string{berthv1alpha1.LWSNameLabel: "llm", berthv1alpha1.LWSRevisionLabel: "r1"},
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
// them), not while a worker is missing or starting, nor with a worker left from the leader's
// previous revision — whether the selector picks leaders only (the LeaderWorkerSet's /scale
// selector) or every pod of it. The pods are what the scaler's cache keeps (SlimPod).
func TestListCountsOneReplicaPerGroup(t *testing.T) {
	gone := lwsPod("llm-3-1", "llm-3", "2", 1)
	gone.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	gone.Finalizers = []string{"x"}
	objs := []*corev1.Pod{
		lwsPod("llm-0", "", "3", 2), lwsPod("llm-0-1", "llm-0", "3", 5), lwsPod("llm-0-2", "llm-0", "3", 4), // whole, ready since minute 5
		lwsPod("llm-1", "", "3", 2), lwsPod("llm-1-1", "llm-1", "3", 3), lwsPod("llm-1-2", "llm-1", "3", -1), // a worker starting
		lwsPod("llm-2", "", "3", 2), lwsPod("llm-2-1", "llm-2", "3", 3), // a worker missing
		lwsPod("llm-3", "", "2", 2), gone, // its only worker is being deleted
		lwsPod("solo-0", "", "1", 7),                                                 // a group of one
		lwsPod("llm-4", "", "2", 2), oldRevision(lwsPod("llm-4-1", "llm-4", "2", 1)), // its worker is the old leader's
	}
	b := fake.NewClientBuilder()
	for _, o := range objs {
		slim, err := SlimPod(o)
		if err != nil {
			t.Fatal(err)
		}
		sp := slim.(*corev1.Pod)
		sp.Finalizers = o.Finalizers // the fake client stores a pod being deleted only with them
		b = b.WithObjects(sp)
	}
	tg := &Targets{Pods: b.Build()}
	want := map[string]time.Time{
		"llm-0": time.Date(2026, 1, 1, 0, 5, 0, 0, time.UTC), "llm-1": {}, "llm-2": {}, "llm-3": {}, "llm-4": {},
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

func oldRevision(p *corev1.Pod) *corev1.Pod {
	p.Labels[berthv1alpha1.LWSRevisionLabel] = "r0"
	return p
}

// TestGroupStartsWithItsNewestPod: a group that is not ready has been starting since its newest
// pod was created (a worker recreated late restarts the clock); a ready group reads its start
// from its leader.
func TestGroupStartsWithItsNewestPod(t *testing.T) {
	at := func(m int) time.Time { return time.Date(2026, 1, 1, 0, m, 0, 0, time.UTC) }
	leader := scaler.Pod{Name: "llm-0", Ready: true, Created: at(0), ReadyAt: at(3)}
	if got := groupState(leader, 2, []scaler.Pod{{Name: "llm-0-1", Created: at(20)}}); got.Ready || !got.Created.Equal(at(20)) {
		t.Errorf("group with a worker recreated at minute 20: %+v, want starting since then", got)
	}
	if got := groupState(leader, 2, []scaler.Pod{{Name: "llm-0-1", Created: at(1), Ready: true, ReadyAt: at(4)}}); !got.Ready || !got.Created.Equal(at(0)) || !got.ReadyAt.Equal(at(4)) {
		t.Errorf("whole group: %+v, want ready since minute 4, created with its leader", got)
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
