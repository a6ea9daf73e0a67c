package rigtest

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Releases records, per gang member of a namespace, the resourceVersion at which it was first
// seen without berth's gate and first seen bound. The API server orders all writes, so a member
// bound at a lower resourceVersion than another member's gate removal was bound while that one
// was still gated: its gang was partly released. A member is known by its name, as the pod of
// that name seen created last: a gang recreated under the same names (a LeaderWorkerSet group
// restarted) is judged by its new pods.
type Releases struct {
	mu      sync.Mutex
	uid     map[string]types.UID
	ungated map[types.UID]int64
	bound   map[types.UID]int64
}

// WatchReleases starts recording the gang members of namespace ns; it stops with the test.
func WatchReleases(t testing.TB, ns string) *Releases {
	t.Helper()
	cs, err := kubernetes.NewForConfig(Current().Config)
	if err != nil {
		t.Fatal(err)
	}
	// A retry watcher resumes from the last resourceVersion it saw when the watch breaks (the
	// API server restarted), so no transition is missed.
	list, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(context.Background(), list.ResourceVersion, &toolscache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Pods(ns).Watch(ctx, o)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := &Releases{uid: map[string]types.UID{}, ungated: map[types.UID]int64{}, bound: map[types.UID]int64{}}
	for i := range list.Items {
		rec.uid[list.Items[i].Name] = list.Items[i].UID
	}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) || p.Labels[berthv1alpha1.PodGroupLabel] == "" {
				continue
			}
			rv, _ := strconv.ParseInt(p.ResourceVersion, 10, 64)
			gated := false
			for _, g := range p.Spec.SchedulingGates {
				gated = gated || g.Name == berthv1alpha1.SchedulingGate
			}
			rec.mu.Lock()
			if ev.Type == watch.Added {
				rec.uid[p.Name] = p.UID
			}
			if _, seen := rec.ungated[p.UID]; !seen && !gated {
				rec.ungated[p.UID] = rv
			}
			if _, seen := rec.bound[p.UID]; !seen && p.Spec.NodeName != "" {
				rec.bound[p.UID] = rv
			}
			rec.mu.Unlock()
		}
	}()
	t.Cleanup(w.Stop)
	return rec
}

// observeWait bounds how long CheckWhole waits for the watch to show what the caller saw
// through a List: a watch trails, and after an API server restart a stalled stream is closed
// and resumed from its last resourceVersion, its events replayed, seconds later.
const observeWait = 30 * time.Second

// waitObserved waits until every member of gangs was seen ungated and bound, or timeout.
func (r *Releases) waitObserved(gangs map[string][]string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		missing := false
		for _, members := range gangs {
			for _, m := range members {
				_, okU := r.ungated[r.uid[m]]
				_, okB := r.bound[r.uid[m]]
				missing = missing || !okU || !okB
			}
		}
		r.mu.Unlock()
		if !missing {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// CheckWhole fails for every gang (name → member names) that had a member bound before its
// last gate was removed, or whose members were not all seen ungated and bound; it returns how
// many gangs were partly released.
func (r *Releases) CheckWhole(t testing.TB, gangs map[string][]string) int {
	t.Helper()
	r.waitObserved(gangs, observeWait)
	r.mu.Lock()
	defer r.mu.Unlock()
	partly := 0
	for gang, members := range gangs {
		var lastUngate, firstBind int64 = 0, 1 << 62
		for _, m := range members {
			u, okU := r.ungated[r.uid[m]]
			b, okB := r.bound[r.uid[m]]
			if !okU || !okB {
				t.Errorf("gang %s, member %s: ungating or binding not observed", gang, m)
				continue
			}
			lastUngate, firstBind = max(lastUngate, u), min(firstBind, b)
		}
		if firstBind <= lastUngate {
			partly++
			t.Errorf("gang %s partly released: a member bound at resourceVersion %d, the last gate removed at %d", gang, firstBind, lastUngate)
		}
	}
	return partly
}

// Kill sends SIGKILL to the running controller process, waits until it is gone, and leaves
// none running.
func (b *BerthProcess) Kill() error {
	name := b.Running
	if err := b.r.KillComponent(name); err != nil {
		return fmt.Errorf("killing %s: %w", name, err)
	}
	b.Running = ""
	return nil
}

// CreateRetrying creates obj, retrying for up to 10 s while the pod-gate webhook is down (its
// controller was just killed): with failurePolicy Fail nothing gets in ungated.
func CreateRetrying(ctx context.Context, c client.Client, obj client.Object) error {
	var err error
	for range 100 {
		if err = c.Create(ctx, obj.DeepCopyObject().(client.Object)); err == nil || !strings.Contains(err.Error(), "webhook") {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// KillAtRandom SIGKILLs the running controller after a random pause between least and most and
// starts a new one, again and again, until the returned stop is called; stop returns how many
// kills there were and the first error (the loop ends at it). A controller is running after stop.
func (b *BerthProcess) KillAtRandom(ctx context.Context, seed int64, least, most time.Duration) (stop func() (int, error)) {
	rng := rand.New(rand.NewSource(seed))
	done := make(chan struct{})
	var wg sync.WaitGroup
	kills := 0
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(least + time.Duration(rng.Int63n(int64(most-least)))):
			}
			if err = b.Kill(); err != nil {
				return
			}
			kills++
			if err = b.Start(ctx); err != nil {
				return
			}
		}
	}()
	return func() (int, error) {
		close(done)
		wg.Wait()
		if err == nil && b.Running == "" {
			err = b.Start(ctx)
		}
		return kills, err
	}
}
