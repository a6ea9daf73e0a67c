package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	bevents "github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/test/builders"
)

// writeCounter counts the writes a Reconciler makes, by kind of object (releases write from
// several goroutines).
type writeCounter struct {
	mu     sync.Mutex
	byKind map[string]int
	seq    []string // "<verb> <kind> <name>", in the order the writes were made
}

func (w *writeCounter) add(kind, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.byKind[kind]++
	w.seq = append(w.seq, kind+" "+name)
}

func (w *writeCounter) sequence() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seq)
}

func (w *writeCounter) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, v := range w.byKind {
		n += v
	}
	return n
}

func (w *writeCounter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprint(w.byKind)
}

// budgetHarness is a Reconciler on a fake client that counts its writes; base writes without
// counting (the test playing kube-scheduler).
func budgetHarness(t testing.TB, objs ...client.Object) (r *Reconciler, base client.Client, writes *writeCounter, clk *clocktesting.FakeClock, rec *events.FakeRecorder) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := berthv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var groups []client.Object
	for _, o := range objs {
		if o.GetUID() == "" {
			// As kube-apiserver does (the fake client sets none): the request cache keys on it.
			o.SetUID(types.UID(fmt.Sprintf("uid-%T-%s-%s", o, o.GetNamespace(), o.GetName())))
		}
		if _, ok := o.(*berthv1alpha1.PodGroup); ok {
			groups = append(groups, o)
		}
	}
	base = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(groups...).Build()
	writes = &writeCounter{byKind: map[string]int{}}
	count := func(obj client.Object, verb string) {
		writes.add(fmt.Sprintf("%s %T", verb, obj), obj.GetName())
	}
	counted := interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count(obj, "create")
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count(obj, "update")
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			count(obj, "patch")
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			count(obj, "delete")
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			count(obj, sub+" update")
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			count(obj, sub+" patch")
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	clk = clocktesting.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	rec = events.NewFakeRecorder(10000)
	return New(counted, counted, clk, bevents.NewRecorder(rec), Options{}), base, writes, clk, rec
}

func cycleOnce(t *testing.T, r *Reconciler) time.Duration {
	t.Helper()
	res, err := r.Reconcile(context.Background(), cycleKey)
	if err != nil {
		t.Fatal(err)
	}
	return res.RequeueAfter
}

// bindAll plays kube-scheduler: every ungated member is bound to the node it is pinned to.
func bindAll(t *testing.T, c client.Client, ns string) {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if node := p.Annotations[berthv1alpha1.PinnedNodeAnnotation]; node != "" && len(p.Spec.SchedulingGates) == 0 && p.Spec.NodeName == "" {
			p.Spec.NodeName = node
			if err := c.Update(context.Background(), p); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func warnings(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			if strings.HasPrefix(e, "Warning") {
				out = append(out, e)
			}
		default:
			return out
		}
	}
}

// TestWriteBudgetOfAnAdmittedGang: admitting a gang of N members whose pods the gate gave the
// release term costs N + 2 writes however many nodes it spans — the promise (one status write),
// one patch per member (pin and ungate together; the key member's also labels it), the key label
// off once every member is bound — and nothing more once it runs. Members without the term
// (created before the gate gave it) are held by the node barrier: N + 2K + 1 on K nodes.
func TestWriteBudgetOfAnAdmittedGang(t *testing.T) {
	for _, tc := range []struct {
		name                string
		nodes, nodeGPUs     int
		members, memberGPUs int
		barrier             bool // members without the release term
	}{
		{"8 members on one node", 1, 8, 8, 1, false},
		{"4 members of 8 GPUs on 4 nodes", 4, 8, 4, 8, false},
		{"16 members on 2 nodes", 2, 8, 16, 1, false},
		{"64 members of 8 GPUs, one per node", 64, 8, 64, 8, false},
		{"node barrier: 8 members on one node", 1, 8, 8, 1, true},
		{"node barrier: 4 members of 8 GPUs on 4 nodes", 4, 8, 4, 8, true},
		{"node barrier: 16 members on 2 nodes", 2, 8, 16, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			for i := range tc.nodes {
				objs = append(objs, builders.Node(fmt.Sprintf("n%d", i)).GPU(tc.nodeGPUs).Allocatable(corev1.ResourceCPU, "96").Obj())
			}
			pg := builders.PodGroup("g", "ml").MinMember(int32(tc.members)).Obj()
			pg.UID = "uid-g"
			objs = append(objs, pg)
			for i := range tc.members {
				b := builders.Pod(fmt.Sprintf("g-%02d", i), "ml").Member("g").Gated().GPU(tc.memberGPUs)
				if !tc.barrier {
					b = b.WithReleaseTerm("g")
				}
				p := b.Obj()
				p.UID = types.UID(fmt.Sprintf("uid-%02d", i))
				objs = append(objs, p)
			}
			r, base, writes, _, rec := budgetHarness(t, objs...)
			cycleOnce(t, r)
			bindAll(t, base, "ml")
			cycleOnce(t, r)
			cycleOnce(t, r)
			want, budget := tc.members+2, "N + 2"
			if tc.barrier {
				want, budget = tc.members+2*tc.nodes+1, "N + 2K + 1"
			}
			if writes.total() != want {
				t.Errorf("%d writes, want %s = %d: %v", writes.total(), budget, want, writes)
			}
			keys := 0
			var pods corev1.PodList
			if err := base.List(context.Background(), &pods, client.InNamespace("ml")); err != nil {
				t.Fatal(err)
			}
			for _, p := range pods.Items {
				if _, ok := p.Labels[berthv1alpha1.ReleaseLabel]; ok {
					keys++
				}
				if p.Spec.NodeName == "" {
					t.Errorf("member %s not bound", p.Name)
				}
			}
			if keys != 0 {
				t.Errorf("%d members keep the key label once every member is bound", keys)
			}
			if w := warnings(rec); len(w) != 0 {
				t.Errorf("warnings for a gang that fit at once: %v", w)
			}
		})
	}
}

// TestWriteBudgetOfAWaitingGang: a gang that cannot fit costs two status writes when it starts
// waiting (its wait clock, the reason), one Warning, and nothing per cycle after; a change of
// the counts in its message is written at most once per messageRefresh, without a Warning.
func TestWriteBudgetOfAWaitingGang(t *testing.T) {
	node := builders.Node("n0").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj()
	pg := builders.PodGroup("g", "ml").MinMember(2).ScheduleTimeout(0).Obj()
	pg.UID = "uid-g"
	objs := []client.Object{node, pg}
	for i := range 2 {
		p := builders.Pod(fmt.Sprintf("g-%d", i), "ml").Member("g").Gated().GPU(5).Obj()
		p.UID = types.UID(fmt.Sprintf("uid-%d", i))
		objs = append(objs, p)
	}
	r, base, writes, clk, rec := budgetHarness(t, objs...)
	cycleOnce(t, r)
	written := clk.Now()
	if writes.total() != 2 || len(warnings(rec)) != 1 {
		t.Fatalf("starting to wait: %v and its warnings; want 2 status writes, 1 warning", writes)
	}
	for range 3 {
		clk.Step(time.Second)
		cycleOnce(t, r)
	}
	if writes.total() != 2 {
		t.Fatalf("cycles on an unchanged cluster wrote: %v", writes)
	}
	// Another pod takes a GPU: the message's counts change, its reason does not.
	if err := base.Create(context.Background(), builders.Pod("other", "ml").GPU(1).Node("n0").Obj()); err != nil {
		t.Fatal(err)
	}
	// Cycles come back on their own (each asks for the next) and write the new message once
	// messageRefresh has passed since the last write, not before.
	for writes.total() == 2 {
		clk.Step(time.Second)
		requeue := cycleOnce(t, r)
		if writes.total() == 2 && clk.Now().Sub(written) >= messageRefresh {
			t.Fatalf("%s after the last write, the new message is still not written: %v", clk.Now().Sub(written), writes)
		}
		if requeue <= 0 {
			t.Fatal("a cycle with a message put off asks for no next cycle")
		}
		clk.Step(requeue - time.Second)
	}
	if got := clk.Now().Sub(written); writes.total() != 3 || got < messageRefresh {
		t.Fatalf("the new message was written %s after the last write (%v); want one write after %s", got, writes, messageRefresh)
	}
	if w := warnings(rec); len(w) != 0 {
		t.Errorf("warnings for a message-only change: %v", w)
	}
	var got berthv1alpha1.PodGroup
	if err := base.Get(context.Background(), client.ObjectKeyFromObject(pg), &got); err != nil {
		t.Fatal(err)
	}
	if c := scheduledConditionOf(&got); c == nil || !strings.Contains(c.Message, "7 free") {
		t.Errorf("Scheduled condition %+v does not say 7 GPUs are free", c)
	}
}

func scheduledConditionOf(g *berthv1alpha1.PodGroup) *metav1.Condition {
	return meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionScheduled)
}
