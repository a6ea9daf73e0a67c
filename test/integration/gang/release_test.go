package gang_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// nodeLabelWrites counts, from a watch on every node, the node updates that changed a label
// starting with prefix.
type nodeLabelWrites struct {
	mu     sync.Mutex
	prefix string
	last   map[string]map[string]string
	writes int
}

func watchNodeLabels(t *testing.T, prefix string) *nodeLabelWrites {
	t.Helper()
	cs, err := kubernetes.NewForConfig(rigtest.Current().Config)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Nodes().Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	nl := &nodeLabelWrites{prefix: prefix, last: map[string]map[string]string{}}
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			mine := map[string]string{}
			for k, v := range n.Labels {
				if strings.HasPrefix(k, prefix) {
					mine[k] = v
				}
			}
			nl.mu.Lock()
			if before, seen := nl.last[n.Name]; seen && fmt.Sprint(before) != fmt.Sprint(mine) {
				nl.writes++
			}
			nl.last[n.Name] = mine
			nl.mu.Unlock()
		}
	}()
	return nl
}

func (nl *nodeLabelWrites) count() int {
	nl.mu.Lock()
	defer nl.mu.Unlock()
	return nl.writes
}

// TestOneWriteOpensAGang: a gang of six 8-GPU members, one per node, is opened by its key member
// alone — no node label is written — and bound whole; the key label comes off once all are
// bound. A gang whose members have pod affinity of their own (so the gate gives them no release
// term) is held by the node barrier, also bound whole, its labels gone afterwards.
func TestOneWriteOpensAGang(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	for i := range 8 {
		kwokNode(t, fmt.Sprintf("key-%d", i), 8, nil)
	}
	barrier := watchNodeLabels(t, berthv1alpha1.BarrierLabelPrefix)
	rec := rigtest.WatchReleases(t, ns)
	gangs := map[string][]string{}
	create := func(name string, size int, own bool) {
		if err := c.Create(ctx, builders.PodGroup(name, ns).MinMember(int32(size)).Obj()); err != nil {
			t.Fatal(err)
		}
		for i := range size {
			b := builders.Pod(fmt.Sprintf("%s-%d", name, i), ns).Member(name).GPU(8)
			if own {
				b = b.PodAffinity(corev1.LabelOSStable, berthv1alpha1.PodGroupLabel, name)
			}
			p := b.Obj()
			if err := c.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
			if _, term := berthv1alpha1.ReleaseGroup(p); term == own {
				t.Fatalf("member %s: release term %v from the gate, want %v", p.Name, term, !own)
			}
			gangs[name] = append(gangs[name], p.Name)
		}
	}
	create("wide", 6, false)
	waitBound(t, ns, 6)
	if n := barrier.count(); n != 0 {
		t.Errorf("%d node label writes to open a gang held by its key member, want 0", n)
	}
	create("own", 2, true)
	waitBound(t, ns, 8)
	rec.CheckWhole(t, gangs)
	if barrier.count() == 0 {
		t.Error("the gang without the release term was bound without its node barrier")
	}
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "no key label on a member, no barrier on a node", func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		var left []string
		for _, p := range pods.Items {
			if _, ok := p.Labels[berthv1alpha1.ReleaseLabel]; ok {
				left = append(left, "pod "+p.Name)
			}
		}
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes); err != nil {
			return false, "", err
		}
		for _, n := range nodes.Items {
			for k := range n.Labels {
				if strings.HasPrefix(k, berthv1alpha1.BarrierLabelPrefix) {
					left = append(left, "node "+n.Name+" "+k)
				}
			}
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	})
}

// waitBound waits until n pods of namespace ns are bound.
func waitBound(t *testing.T, ns string, n int) {
	t.Helper()
	rigtest.Eventually(t, time.Minute, 200*time.Millisecond, fmt.Sprintf("%d members bound", n), func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := rigtest.Current().Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		bound := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == n, fmt.Sprintf("%d bound", bound), nil
	})
}

// TestTerminatingOldKeyIsClosed: the key member of a gang's earlier run, deleted while it still
// carried the key label and held on its node by a finalizer (kube-scheduler still counts a
// terminating pod for pod affinity), must not open the next run: the release takes the label
// off it before ungating anything, and the new members are bound whole.
func TestTerminatingOldKeyIsClosed(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	for i := range 3 {
		kwokNode(t, fmt.Sprintf("old-key-%d", i), 8, nil)
	}
	rec := rigtest.WatchReleases(t, ns)
	const finalizer = "test.berth.dev/hold"
	old := builders.Pod("rerun-old", ns).Member("rerun").GPU(8).Node("old-key-0").Obj()
	old.Finalizers = []string{finalizer}
	if err := c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p := &corev1.Pod{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(old), p); err == nil {
			p.Finalizers = nil
			_ = c.Update(context.Background(), p)
		}
	})
	if err := c.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	// The key label goes on once it is terminating: a live member's label would be taken off by
	// the key sweeps before the test could delete it.
	label := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:"rerun"}}}`, berthv1alpha1.ReleaseLabel)))
	if err := c.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: old.Name, Namespace: ns}}, label); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, builders.PodGroup("rerun", ns).MinMember(2).Obj()); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range 2 {
		p := builders.Pod(fmt.Sprintf("rerun-%d", i), ns).Member("rerun").GPU(8).Obj()
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	waitBound(t, ns, 3) // the two new members and the terminating old key
	rec.CheckWhole(t, map[string][]string{"rerun": names})
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), &got); err != nil {
		t.Fatal(err)
	}
	if got.DeletionTimestamp == nil {
		t.Fatal("the old key is not terminating")
	}
	if _, ok := got.Labels[berthv1alpha1.ReleaseLabel]; ok {
		t.Error("the terminating old key still carries the key label after the next run's release")
	}
}
