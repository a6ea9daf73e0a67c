package status

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

func TestNextPhase(t *testing.T) {
	type counts = berthv1alpha1.MemberCounts
	tests := []struct {
		name    string
		current berthv1alpha1.PodGroupPhase
		min     int32
		c       counts
		want    berthv1alpha1.PodGroupPhase
	}{
		{"new group is pending", "", 4, counts{}, berthv1alpha1.PodGroupPending},
		{"too few running stays pending", berthv1alpha1.PodGroupPending, 4, counts{Total: 4, Running: 3, Scheduled: 1}, berthv1alpha1.PodGroupPending},
		{"minMember running", berthv1alpha1.PodGroupAdmitted, 4, counts{Total: 4, Running: 4}, berthv1alpha1.PodGroupRunning},
		{"some done some running counts as running", berthv1alpha1.PodGroupRunning, 4, counts{Total: 4, Running: 2, Succeeded: 2}, berthv1alpha1.PodGroupRunning},
		{"all succeeded", berthv1alpha1.PodGroupRunning, 4, counts{Total: 4, Succeeded: 4}, berthv1alpha1.PodGroupSucceeded},
		{"failure that leaves too few", berthv1alpha1.PodGroupRunning, 4, counts{Total: 4, Running: 3, Failed: 1}, berthv1alpha1.PodGroupFailed},
		{"failure with spares left", berthv1alpha1.PodGroupRunning, 4, counts{Total: 6, Running: 5, Failed: 1}, berthv1alpha1.PodGroupRunning},
		{"succeeded is final", berthv1alpha1.PodGroupSucceeded, 4, counts{Total: 4, Failed: 4}, berthv1alpha1.PodGroupSucceeded},
		{"failed is final", berthv1alpha1.PodGroupFailed, 4, counts{Total: 4, Running: 4}, berthv1alpha1.PodGroupFailed},
		{"admission phases are kept while waiting", berthv1alpha1.PodGroupProvisioning, 4, counts{Total: 4, Gated: 4}, berthv1alpha1.PodGroupProvisioning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextPhase(tt.current, tt.min, tt.c); got != tt.want {
				t.Errorf("nextPhase(%q, %d, %+v) = %q, want %q", tt.current, tt.min, tt.c, got, tt.want)
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
		got := computeStatus(pg, running, now)
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
		prev.Status = computeStatus(pg, running, earlier)
		got := computeStatus(prev, running, now)
		if !got.Conditions[0].LastTransitionTime.Equal(&earlier) {
			t.Errorf("lastTransitionTime = %v, want %v kept", got.Conditions[0].LastTransitionTime, earlier)
		}
	})
	t.Run("waiting for members", func(t *testing.T) {
		got := computeStatus(pg, running[:1], now)
		c := got.Conditions[0]
		if c.Status != metav1.ConditionFalse || c.Reason != berthv1alpha1.ReasonWaitingForMembers || c.Message != "1 of 2 members exist" {
			t.Errorf("condition = %+v, want False/%s/'1 of 2 members exist'", c, berthv1alpha1.ReasonWaitingForMembers)
		}
	})
	t.Run("input is not modified", func(t *testing.T) {
		before := pg.DeepCopy()
		_ = computeStatus(pg, running, now)
		if diff := cmp.Diff(before, pg); diff != "" {
			t.Errorf("computeStatus modified its input:\n%s", diff)
		}
	})
}
