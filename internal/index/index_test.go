package index

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/berth-dev/berth/test/builders"
)

func TestMembers(t *testing.T) {
	c := fake.NewClientBuilder().WithIndex(&corev1.Pod{}, PodGroupMembers, podGroupOf).WithObjects(
		builders.Pod("a-0", "ml").Member("a").Obj(), builders.Pod("a-1", "ml").Member("a").Obj(),
		builders.Pod("b-0", "ml").Member("b").Obj(), builders.Pod("a-0", "other").Member("a").Obj(),
		builders.Pod("plain", "ml").Obj(),
	).Build()
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods, Members("ml", "a")...); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range pods.Items {
		got = append(got, client.ObjectKeyFromObject(&pods.Items[i]).String())
	}
	if len(got) != 2 || got[0] != "ml/a-0" || got[1] != "ml/a-1" {
		t.Errorf("members of ml/a = %v, want ml/a-0 and ml/a-1 (not another namespace's gang of that name, nor other pods)", got)
	}
}
