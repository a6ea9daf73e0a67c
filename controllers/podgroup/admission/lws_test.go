package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

// TestOfAnotherLeader: LeaderWorkerSet recreated a group's leader (same name, new UID) before
// the old leader's PodGroup went. That PodGroup is left alone — its new leader released into it
// as a replacement member then left the new group's PodGroup waiting for good — until the
// adapter replaces it with one the new leader owns.
func TestOfAnotherLeader(t *testing.T) {
	leader := func(uid string) *corev1.Pod {
		p := builders.Pod("llm-0", "ml").Member("llm-0").Obj()
		p.UID = types.UID(uid)
		return p
	}
	worker := builders.Pod("llm-0-1", "ml").Member("llm-0").Obj()
	group := func(from, owner string) *berthv1alpha1.PodGroup {
		g := builders.PodGroup("llm-0", "ml").MinMember(2).Obj()
		g.Labels = map[string]string{berthv1alpha1.AdaptedFromLabel: from}
		g.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "llm-0", UID: types.UID(owner)}}
		return g
	}
	for _, tc := range []struct {
		name    string
		gv      gangView
		another bool
	}{
		{name: "its own leader", gv: gangView{group: group("lws", "uid-a"), members: []*corev1.Pod{leader("uid-a"), worker}}},
		{name: "a new leader of the name", gv: gangView{group: group("lws", "uid-a"), members: []*corev1.Pod{leader("uid-b"), worker}}, another: true},
		{name: "no leader yet (the old one gone, its workers going)", gv: gangView{group: group("lws", "uid-a"), members: []*corev1.Pod{worker}}},
		{name: "not a LeaderWorkerSet group", gv: gangView{group: group("kueue", "uid-a"), members: []*corev1.Pod{leader("uid-b")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ofAnotherLeader(tc.gv); got != tc.another {
				t.Errorf("ofAnotherLeader = %v, want %v", got, tc.another)
			}
		})
	}
}
