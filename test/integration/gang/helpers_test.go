package gang_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// namespace creates a fresh namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	ns := rigtest.Namespace(t, "gang")
	c := rigtest.Current().Client
	// Leave nothing waiting for capacity behind for the next test.
	t.Cleanup(func() {
		ctx := context.Background()
		_ = c.DeleteAllOf(ctx, &berthv1alpha1.PodGroup{}, client.InNamespace(ns))
		_ = c.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(ns), client.PropagationPolicy(metav1.DeletePropagationBackground))
		_ = c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0))
	})
	return ns
}

// kwokNode creates a node kwok manages, with gpus nvidia.com/gpu, and waits until it is Ready.
func kwokNode(t *testing.T, name string, gpus int, labels map[string]string) *corev1.Node {
	t.Helper()
	b := builders.Node(name).GPU(gpus).Allocatable(corev1.ResourceCPU, "96").Allocatable(corev1.ResourceMemory, "1024Gi")
	for k, v := range labels {
		b.Label(k, v)
	}
	n := b.Obj()
	n.Annotations = map[string]string{berthv1alpha1.KwokNodeAnnotation: "fake"}
	n.Status.Conditions = nil
	c := rigtest.Current().Client
	if err := c.Create(context.Background(), n); err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), n) })
	rigtest.Eventually(t, time.Minute, 100*time.Millisecond, "node "+name+" Ready", func(ctx context.Context) (bool, string, error) {
		var got corev1.Node
		if err := c.Get(ctx, client.ObjectKeyFromObject(n), &got); err != nil {
			return false, "", err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return len(got.Spec.Taints) == 0, fmt.Sprintf("taints %v", got.Spec.Taints), nil
			}
		}
		return false, "not Ready", nil
	})
	return n
}

// gang creates a PodGroup and n members requesting one GPU each.
func gang(t *testing.T, ns, name string, n int) []*corev1.Pod {
	t.Helper()
	c := rigtest.Current().Client
	if err := c.Create(context.Background(), builders.PodGroup(name, ns).MinMember(int32(n)).Obj()); err != nil {
		t.Fatalf("creating PodGroup %s: %v", name, err)
	}
	var pods []*corev1.Pod
	for i := range n {
		p := builders.Pod(fmt.Sprintf("%s-%d", name, i), ns).Member(name).GPU(1).Obj()
		if err := c.Create(context.Background(), p); err != nil {
			t.Fatalf("creating member %s: %v", p.Name, err)
		}
		pods = append(pods, p)
	}
	return pods
}

// memberStates lists a gang's members: how many are gated and bound.
func memberStates(ctx context.Context, ns, group string) (total, gated, bound int, err error) {
	var pods corev1.PodList
	if err := rigtest.Current().Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: group}); err != nil {
		return 0, 0, 0, err
	}
	for _, p := range pods.Items {
		total++
		for _, g := range p.Spec.SchedulingGates {
			if g.Name == berthv1alpha1.SchedulingGate {
				gated++
			}
		}
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	return total, gated, bound, nil
}

func waitAllBound(t *testing.T, ns, group string, n int, timeout time.Duration) {
	t.Helper()
	rigtest.Eventually(t, timeout, 100*time.Millisecond, "all members of "+group+" bound", func(ctx context.Context) (bool, string, error) {
		total, gated, bound, err := memberStates(ctx, ns, group)
		if err != nil {
			return false, "", err
		}
		var pg berthv1alpha1.PodGroup
		// An adapted gang's PodGroup is created by the adapter after its first member is seen:
		// not there yet is a state to wait through, not a failure.
		if err := rigtest.Current().Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: group}, &pg); apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("%d members, %d gated, %d bound; no PodGroup yet", total, gated, bound), nil
		} else if err != nil {
			return false, "", err
		}
		return bound == n && total == n, fmt.Sprintf("%d members, %d gated, %d bound; PodGroup %s %+v", total, gated, bound, pg.Status.Phase, pg.Status.Conditions), nil
	})
}

func scheduledCondition(t *testing.T, ns, group string) *metav1.Condition {
	t.Helper()
	var pg berthv1alpha1.PodGroup
	if err := rigtest.Current().Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: group}, &pg); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionScheduled)
}

// recorder watches a namespace's pods and records, in resourceVersion order, when each member
// first lost its gate and when it was first bound.
type recorder struct {
	mu        sync.Mutex
	ungated   map[string]int64
	ungatedAt map[string]time.Time
	bound     map[string]int64
	stop      func()
	observed  int
}

func record(t *testing.T, ns string) *recorder {
	t.Helper()
	cs, err := kubernetes.NewForConfig(rigtest.Current().Config)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Pods(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ungated: map[string]int64{}, ungatedAt: map[string]time.Time{}, bound: map[string]int64{}, stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Labels[berthv1alpha1.PodGroupLabel] == "" {
				continue
			}
			rv, _ := strconv.ParseInt(p.ResourceVersion, 10, 64)
			r.mu.Lock()
			r.observed++
			gated := false
			for _, g := range p.Spec.SchedulingGates {
				gated = gated || g.Name == berthv1alpha1.SchedulingGate
			}
			if _, seen := r.ungated[p.Name]; !seen && !gated {
				r.ungated[p.Name] = rv
				r.ungatedAt[p.Name] = time.Now()
			}
			if _, seen := r.bound[p.Name]; !seen && p.Spec.NodeName != "" {
				r.bound[p.Name] = rv
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(w.Stop)
	return r
}

// lastUngateBeforeFirstBind checks that every gate was gone before any member was bound.
func (r *recorder) lastUngateBeforeFirstBind(t *testing.T, members int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ungated) != members || len(r.bound) != members {
		t.Fatalf("saw %d members ungated and %d bound, want %d each", len(r.ungated), len(r.bound), members)
	}
	var lastUngate, firstBind int64 = 0, 1 << 62
	for _, rv := range r.ungated {
		lastUngate = max(lastUngate, rv)
	}
	for _, rv := range r.bound {
		firstBind = min(firstBind, rv)
	}
	if firstBind <= lastUngate {
		t.Errorf("a member was bound (resourceVersion %d) before the last gate was removed (resourceVersion %d)", firstBind, lastUngate)
	}
}

// releasedWithin checks that the last gate went within d of since: the release was driven by
// the event at since (admission runs with an hour's resync in these tests), not by a timer.
func (r *recorder) releasedWithin(t *testing.T, since time.Time, d time.Duration) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var last time.Time
	for _, at := range r.ungatedAt {
		if at.After(last) {
			last = at
		}
	}
	if took := last.Sub(since); last.IsZero() || took > d {
		t.Errorf("the last gate went %s after the event that freed capacity, want within %s", took, d)
	}
}

func metaName(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }
