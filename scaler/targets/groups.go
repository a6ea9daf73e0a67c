package targets

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scaler"
)

// A LeaderWorkerSet replica is a group of pods — a leader and its workers sharing one model
// across nodes — and serves through its leader (what the LeaderWorkerSet's /scale selector
// selects). The scaler counts one replica per group, read from the leader, and a group counts
// as starting until every pod of it is ready: a leader whose workers have not joined serves
// nothing.

// lwsRole says whether a pod belongs to a LeaderWorkerSet group and, if so, whether it leads
// it and how many pods the group has (1 when the pod says nothing).
func lwsRole(p *corev1.Pod) (member, leader bool, size int) {
	if p.Labels[berthv1alpha1.LWSNameLabel] == "" {
		return false, false, 1
	}
	size = 1
	if n, err := strconv.Atoi(p.Annotations[berthv1alpha1.LWSSizeAnnotation]); err == nil && n > 1 {
		size = n
	}
	return true, p.Annotations[berthv1alpha1.LWSLeaderNameAnnotation] == "", size
}

// groupState folds a leader's group into the replica the scaler sees: ready when the leader and
// size-1 live workers are ready, then since the last of them turned ready; stuck when any pod
// of it is; starting since the newest of its pods was created (a worker recreated late starts
// the group's clock again, so the group is not called past its startup timeout for a pod that
// just came). workers are the live pods naming the leader, of the leader's revision.
func groupState(leader scaler.Pod, size int, workers []scaler.Pod) scaler.Pod {
	if size <= 1 {
		return leader
	}
	out := leader
	ready := 0
	for _, w := range workers {
		if w.Created.After(out.Created) {
			out.Created = w.Created
		}
		if !w.Ready {
			if out.Stuck == "" {
				out.Stuck = w.Stuck
			}
			continue
		}
		ready++
		if w.ReadyAt.After(out.ReadyAt) {
			out.ReadyAt = w.ReadyAt
		}
	}
	if leader.Ready && ready >= size-1 {
		out.Created = leader.Created // a ready group reads its start from its leader
	} else {
		out.Ready, out.ReadyAt = false, time.Time{}
		if out.Stuck == "" && leader.Stuck != "" {
			out.Stuck = leader.Stuck
		}
	}
	return out
}

// foldGroups turns the LeaderWorkerSet pods among pods into one replica per group (the others
// are kept as they are): a leader with its workers folded in (read from the cache: the
// selector may select leaders only), workers dropped.
func (t *Targets) foldGroups(ctx context.Context, namespace string, pods []corev1.Pod, out []scaler.Pod) ([]scaler.Pod, error) {
	workersOf := map[string]map[string][]lwsWorker{} // LWS name → leader name → workers
	kept := out[:0]
	for i := range out {
		p := &pods[i]
		member, leader, size := lwsRole(p)
		switch {
		case !member:
			kept = append(kept, out[i])
			continue
		case !leader:
			continue // a worker: its group is counted at its leader
		}
		set := p.Labels[berthv1alpha1.LWSNameLabel]
		if _, ok := workersOf[set]; !ok {
			w, err := t.lwsWorkers(ctx, namespace, set)
			if err != nil {
				return nil, err
			}
			workersOf[set] = w
		}
		kept = append(kept, groupState(out[i], size, sameRevision(workersOf[set][p.Name], p)))
	}
	return kept, nil
}

// lwsWorker is a live worker and the template revision it was made from.
type lwsWorker struct {
	pod      scaler.Pod
	revision string
}

// sameRevision are the workers made from the leader's template revision: during a rolling
// update a leader is replaced under its name while its old workers may linger, and they are not
// the new leader's group (LeaderWorkerSet itself tells them apart so).
func sameRevision(workers []lwsWorker, leader *corev1.Pod) []scaler.Pod {
	rev := leader.Labels[berthv1alpha1.LWSRevisionLabel]
	out := make([]scaler.Pod, 0, len(workers))
	for _, w := range workers {
		if w.revision == rev {
			out = append(out, w.pod)
		}
	}
	return out
}

// lwsWorkers are the live workers of a LeaderWorkerSet by the leader they name.
func (t *Targets) lwsWorkers(ctx context.Context, namespace, set string) (map[string][]lwsWorker, error) {
	var list corev1.PodList
	if err := t.Pods.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{berthv1alpha1.LWSNameLabel: set}); err != nil {
		return nil, fmt.Errorf("listing the pods of LeaderWorkerSet %s/%s: %w", namespace, set, err)
	}
	out := map[string][]lwsWorker{}
	for i := range list.Items {
		p := &list.Items[i]
		leader := p.Annotations[berthv1alpha1.LWSLeaderNameAnnotation]
		if leader == "" || !live(p) {
			continue
		}
		out[leader] = append(out[leader], lwsWorker{pod: t.replica(p), revision: p.Labels[berthv1alpha1.LWSRevisionLabel]})
	}
	return out, nil
}
