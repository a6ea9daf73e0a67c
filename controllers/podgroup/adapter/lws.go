package adapter

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
)

// lwsGVK is the LeaderWorkerSet API whose startup policy berth reads.
var lwsGVK = schema.GroupVersionKind{Group: berthv1alpha1.LWSGroup, Version: "v1", Kind: "LeaderWorkerSet"}

// lwsLeaderReady is LeaderWorkerSet's startup policy that creates a group's workers only once
// its leader is ready.
const lwsLeaderReady = "LeaderReady"

// errLeaderGone says a LeaderWorkerSet worker's leader is not there (its group is being
// restarted or scaled away): its PodGroup waits for the next leader.
var errLeaderGone = errors.New("the group's leader pod is gone")

// groupLeader is what a LeaderWorkerSet group's PodGroup is owned by: the group's leader pod.
// The group lives as long as its leader — LeaderWorkerSet restarts a group (and scales one
// away) by deleting the leader, whose worker StatefulSet goes with it — so the PodGroup goes
// with the group, and a restarted group, a new leader, is a new submission admitted whole.
func (r *Reconciler) groupLeader(ctx context.Context, pod *corev1.Pod) (metav1.OwnerReference, error) {
	name := pod.Labels[berthv1alpha1.PodGroupLabel]
	if name == pod.Name {
		return metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}, nil
	}
	var leader corev1.Pod
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, &leader); err != nil {
		if apierrors.IsNotFound(err) {
			return metav1.OwnerReference{}, errLeaderGone
		}
		return metav1.OwnerReference{}, fmt.Errorf("reading leader pod %s of pod %s: %w", name, pod.Name, err)
	}
	if leader.DeletionTimestamp != nil {
		return metav1.OwnerReference{}, errLeaderGone
	}
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: leader.Name, UID: leader.UID}, nil
}

// leaderSize is the size of the pod's LeaderWorkerSet group as its leader says (0: no leader, or
// it says nothing).
func (r *Reconciler) leaderSize(ctx context.Context, pod *corev1.Pod, leaderName string) (int32, error) {
	var leader corev1.Pod
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: leaderName}, &leader); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, errLeaderGone
		}
		return 0, fmt.Errorf("reading leader pod %s of pod %s: %w", leaderName, pod.Name, err)
	}
	for _, k := range []string{berthv1alpha1.MinMemberAnnotation, berthv1alpha1.LWSSizeAnnotation} {
		if n, err := strconv.ParseInt(leader.Annotations[k], 10, 32); err == nil && n > 0 {
			return int32(n), nil
		}
	}
	return 0, nil
}

// shapeLWSGroup fits an adapted LeaderWorkerSet group's PodGroup to the group: its members in
// one zone (one model sharded across the group's nodes: tensor and pipeline traffic between
// zones adds latency to every token and is billed per byte); and, for a LeaderWorkerSet whose
// startupPolicy is LeaderReady — its workers are created only once the leader is ready, so the
// group can never be whole while the leader waits — the leader admitted first and the workers
// as they come, said in a Warning: holding the leader for workers its owner will not create
// would hold it for good.
func (r *Reconciler) shapeLWSGroup(ctx context.Context, pod *corev1.Pod, pg *berthv1alpha1.PodGroup) error {
	pg.Spec.Topology = &berthv1alpha1.TopologySpec{RequiredKey: corev1.LabelTopologyZone}
	name := pod.Labels[berthv1alpha1.LWSNameLabel]
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(lwsGVK)
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, u); err != nil {
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			return nil // gone (its pods follow), or not a LeaderWorkerSet berth can read
		case apierrors.IsForbidden(err):
			r.Recorder.Warning(pod, events.ReasonGangCannotFormWhole, fmt.Sprintf(
				"berth may not read LeaderWorkerSet %s (grant its controller get on leaderworkersets): the group is held until it is whole, and if its startupPolicy is LeaderReady (workers created only once the leader is ready) it never will be", name))
			return nil
		}
		return fmt.Errorf("reading LeaderWorkerSet %s of pod %s: %w", name, pod.Name, err)
	}
	if policy, _, _ := unstructured.NestedString(u.Object, "spec", "startupPolicy"); policy == lwsLeaderReady && pg.Spec.MinMember > 1 {
		r.Recorder.Warning(pod, events.ReasonGangCannotFormWhole, fmt.Sprintf(
			"LeaderWorkerSet %s has startupPolicy LeaderReady: it creates a group's workers only once the leader is ready, so berth admits the leader first and each worker as it comes (not the group whole); use startupPolicy LeaderCreated (the default) to have each group admitted and provisioned whole", name))
		pg.Spec.MinMember = 1
	}
	return nil
}
