package seat

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

var karpenterGV = schema.GroupVersion{Group: "karpenter.sh", Version: "v1"}

func claim(name, node string) *karpv1.NodeClaim {
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{karpv1.NodePoolLabelKey: "gpu-h100"}}}
	nc.Status.NodeName = node
	return nc
}

// launched is a NodeClaim created a few seconds after a batch's seats at batch.
func launched(name, node string, batch time.Time) *karpv1.NodeClaim {
	nc := claim(name, node)
	nc.CreationTimestamp = metav1.NewTime(batch.Add(3 * time.Second))
	return nc
}

func pod(name, node string, uid types.UID) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "berth-system", UID: uid}, Spec: corev1.PodSpec{NodeName: node}}
}

// TestReclaimDeletesTheUnusedNodesOfAnIncompleteBatch: of the NodeClaims launched for a batch of
// seats — found from the seats' nodes and from Karpenter's Nominated Events — those no other pod
// uses are deleted (one whose node only runs a seat and a DaemonSet pod, one still launching);
// one where another pod runs is kept, and so are NodeClaims the seats never had.
func TestReclaimDeletesTheUnusedNodesOfAnIncompleteBatch(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	scheme.AddKnownTypes(karpenterGV, &karpv1.NodeClaim{}, &karpv1.NodeClaimList{})
	metav1.AddToGroupVersion(scheme, karpenterGV)

	s0 := pod("seat-0", "n0", "uid-s0")   // bound to a node that came up
	s1 := pod("seat-1", "", "uid-s1")     // nominated to a NodeClaim still launching
	s2 := pod("seat-2", "n2", "uid-s2")   // bound to a node another pod uses too
	ds := pod("agent-n0", "n0", "uid-ds") // a DaemonSet pod on n0
	ds.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent", APIVersion: "apps/v1", UID: "uid-dsset", Controller: ptr.To(true)}}
	other := pod("job-0", "n2", "uid-job")
	// A seat on a node that was there before the batch (a check-capacity request's room, an
	// idle node kube-scheduler chose): its NodeClaim was not launched for the seats.
	batch := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, s := range []*corev1.Pod{s0, s1, s2} {
		s.CreationTimestamp = metav1.NewTime(batch)
	}
	s3 := pod("seat-3", "n3", "uid-s3")
	s3.CreationTimestamp = metav1.NewTime(batch.Add(time.Second))
	older := claim("older", "n3")
	older.CreationTimestamp = metav1.NewTime(batch.Add(-time.Hour))
	nominated := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "seat-1.nom", Namespace: "berth-system"}, Reason: "Nominated",
		Message: "Pod should schedule on: nodeclaim/nc1", InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "seat-1", Namespace: "berth-system", UID: "uid-s1"}}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(launched("nc0", "n0", batch), launched("nc1", "", batch), launched("nc2", "n2", batch), launched("unrelated", "n9", batch), older, s0, s1, s2, s3, ds, other, nominated).
		WithIndex(&corev1.Event{}, "involvedObject.uid", func(o client.Object) []string { return []string{string(o.(*corev1.Event).InvolvedObject.UID)} }).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		Build()
	deleted, err := Reclaim(ctx, c, c, []*corev1.Pod{s3, s0, s1, s2}, "podgroup")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(deleted)
	if !slices.Equal(deleted, []string{"nc0", "nc1"}) {
		t.Errorf("deleted %v, want [nc0 nc1]", deleted)
	}
	var left karpv1.NodeClaimList
	if err := c.List(ctx, &left); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, nc := range left.Items {
		names = append(names, nc.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"nc2", "older", "unrelated"}) {
		t.Errorf("NodeClaims left %v, want [nc2 older unrelated]", names)
	}
	if got, err := Reclaim(ctx, c, c, nil, "podgroup"); err != nil || len(got) != 0 {
		t.Errorf("no seats: %v, %v", got, err)
	}
}
