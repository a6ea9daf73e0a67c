package warmseats

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scaler/targets"
)

// fleet is a vLLM Deployment's pod template: one GPU, an image pulled from a private registry,
// L4 nodes only, the app's labels.
func fleet() *appsv1.Deployment {
	gpu := resource.MustParse("1")
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "inference", Name: "llama"},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "llama"}},
			Spec: corev1.PodSpec{
				NodeSelector:     map[string]string{"karpenter.k8s.aws/instance-gpu-name": "l4"},
				ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
				Tolerations:      []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{Name: "vllm", Image: "registry.example/vllm:v0.11.0",
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), berthv1alpha1.GPUResource: gpu},
						Limits:   corev1.ResourceList{berthv1alpha1.GPUResource: gpu}}}},
			},
		}},
	}
}

func TestSeatPod(t *testing.T) {
	tmpl := fleet().Spec.Template
	for _, pull := range Pulls() {
		p, err := SeatPod("inference", "llama", &tmpl, "pause:3.10", pull)
		if err != nil {
			t.Fatal(err)
		}
		if p.Labels["app"] != "" || p.Labels[berthv1alpha1.WarmSeatForLabel] != "llama" || p.Labels[berthv1alpha1.ComponentLabel] != berthv1alpha1.WarmSeatComponent {
			t.Errorf("%s: labels %v: berth's only, never the fleet's (its ReplicaSet would count the seat)", pull, p.Labels)
		}
		if _, ok := p.Annotations[karpv1.DoNotDisruptAnnotationKey]; ok {
			t.Errorf("%s: annotations %v: a warm seat must not keep its node from Karpenter's drift and expiry", pull, p.Annotations)
		}
		if p.Spec.PriorityClassName != berthv1alpha1.SeatPriorityClassName || p.Spec.Containers[0].Image != "pause:3.10" {
			t.Errorf("%s: priority %q, image %q", pull, p.Spec.PriorityClassName, p.Spec.Containers[0].Image)
		}
		if q := p.Spec.Containers[0].Resources.Requests[berthv1alpha1.GPUResource]; q.Value() != 1 || p.Spec.NodeSelector["karpenter.k8s.aws/instance-gpu-name"] != "l4" ||
			len(p.Spec.ImagePullSecrets) != 1 || len(p.Spec.Tolerations) != 1 {
			t.Errorf("%s: a seat holds one replica's GPU on the replica's nodes, pulling as it does: %+v", pull, p.Spec)
		}
		pulled := ""
		switch pull {
		case PullImageVolume:
			pulled = p.Spec.Volumes[0].Image.Reference
		case PullInitContainer:
			pulled = p.Spec.InitContainers[0].Image
		}
		if pulled != "registry.example/vllm:v0.11.0" {
			t.Errorf("%s: the serving image is not pulled: %+v", pull, p.Spec)
		}
	}
	a, _ := SeatPod("inference", "llama", &tmpl, "pause:3.10", PullImageVolume)
	tmpl.Spec.Containers[0].Args = []string{"--max-num-seqs", "64"}
	b, _ := SeatPod("inference", "llama", &tmpl, "pause:3.10", PullImageVolume)
	tmpl.Spec.Containers[0].Image = "registry.example/vllm:v0.12.0"
	c, _ := SeatPod("inference", "llama", &tmpl, "pause:3.10", PullImageVolume)
	if h := berthv1alpha1.WarmSeatTemplateLabel; a.Labels[h] != b.Labels[h] || a.Labels[h] == c.Labels[h] {
		t.Errorf("template hashes %s %s %s: an argument changes no seat, an image does", a.Labels[h], b.Labels[h], c.Labels[h])
	}
}

func scaledObject(warmSeats string) *unstructured.Unstructured {
	so := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": "inference", "name": "llama"},
		"spec": map[string]any{
			"scaleTargetRef": map[string]any{"name": "llama"},
			"triggers":       []any{map[string]any{"type": "external-push", "metadata": map[string]any{"ttftSLOSeconds": "2", "warmSeats": warmSeats}}},
		},
	}}
	so.SetGroupVersionKind(targets.ScaledObjectGVK)
	return so
}

func newKeeper(t *testing.T, objs ...client.Object) (*Keeper, client.Client, *clocktesting.FakeClock) {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	k := &Keeper{Client: c, Pods: c, API: c, Wants: &Wants{}, PauseImage: "pause", Pull: PullImageVolume, Clock: clk, Log: logr.Discard()}
	k.started = clk.Now()
	return k, c, clk
}

func seats(t *testing.T, c client.Client) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := c.List(context.Background(), &list, client.MatchingLabels{berthv1alpha1.WarmSeatForLabel: "llama"}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestKeeper: the keeper creates what the evaluations ask for, takes seats away when they ask
// for fewer, leaves a fleet alone that no fresh evaluation speaks for (another scaler replica
// may), and removes the seats of a ScaledObject that no longer asks for any.
func TestKeeper(t *testing.T) {
	ctx := context.Background()
	k, c, clk := newKeeper(t, fleet(), scaledObject("3"))
	key := Key{"inference", "llama"}
	k.Wants.Set(key, 3, false, clk.Now())
	if err := k.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(seats(t, c)); n != 3 {
		t.Fatalf("%d seats, want 3", n)
	}
	k.Wants.Set(key, 1, false, clk.Now())
	if err := k.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(seats(t, c)); n != 1 {
		t.Fatalf("%d seats after asking for 1, want 1", n)
	}
	clk.Step(2 * DefaultWantTTL) // no evaluation since: another replica may speak for the fleet
	if err := k.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(seats(t, c)); n != 1 {
		t.Fatalf("%d seats without a fresh want, want the 1 there was", n)
	}
	so := scaledObject("0")
	cur := scaledObject("")
	if err := c.Get(ctx, client.ObjectKeyFromObject(so), cur); err != nil {
		t.Fatal(err)
	}
	so.SetResourceVersion(cur.GetResourceVersion())
	if err := c.Update(ctx, so); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute) // past the template cache
	if err := k.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(seats(t, c)); n != 0 {
		t.Fatalf("%d seats of a ScaledObject that asks for none, want 0", n)
	}
}

// TestKeeperLeavesAFleetWhoseConnectionEnded: two scaler replicas, and KEDA's operator moved
// from this one to the other (its connection here ended). The other replica's keeper made the 3
// seats its evaluations ask for; this one's last want (1, a minute old: within WantTTL) goes
// with the connection, so it leaves them alone instead of deleting two every look while the
// other creates them again. A want set over another connection stays.
func TestKeeperLeavesAFleetWhoseConnectionEnded(t *testing.T) {
	ctx := context.Background()
	k, c, clk := newKeeper(t, fleet(), scaledObject("3"))
	k.started = clk.Now().Add(-time.Hour) // long running: not the after-a-start grace
	key := Key{"inference", "llama"}
	k.Wants.SetFrom("keda#1", key, 3, false, clk.Now())
	if err := k.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	k.Wants.SetFrom("keda#1", key, 1, false, clk.Now()) // this replica's last evaluation
	clk.Step(time.Minute)
	if gone := k.Wants.Disconnected("keda#1", clk.Now()); len(gone) != 1 || gone[0] != key {
		t.Fatalf("Disconnected = %v, want [%v]", gone, key)
	}
	if err := k.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(seats(t, c)); n != 3 {
		t.Fatalf("%d seats after the connection that asked for 1 ended, want the 3 there are left alone", n)
	}
	// KEDA asks this replica again, over a new connection: its want counts, and outlives the
	// end of a connection that no longer speaks for the fleet.
	k.Wants.SetFrom("keda#2", key, 1, false, clk.Now())
	if gone := k.Wants.Disconnected("keda#1", clk.Now()); len(gone) != 0 {
		t.Fatalf("an old connection's end took %v", gone)
	}
	if gone := k.Wants.Disconnected("", clk.Now()); len(gone) != 0 {
		t.Fatalf("an unnamed connection's end took %v", gone)
	}
	// A call on the ended connection that returns after its end sets nothing.
	k.Wants.SetFrom("keda#1", key, 5, false, clk.Now())
	if w := k.Wants.Fresh(clk.Now().Add(-time.Second))[key]; w.Seats != 1 || w.Source != "keda#2" {
		t.Fatalf("want after a late call on the ended connection: %+v, want keda#2's 1", w)
	}
	if err := k.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(seats(t, c)); n != 1 {
		t.Fatalf("%d seats, want the 1 the new connection's evaluation asks for", n)
	}
}

// TestKeeperAfterRestart: a keeper that has just started deletes nothing it has no want for
// yet (the evaluations come within seconds).
func TestKeeperAfterRestart(t *testing.T) {
	k, c, _ := newKeeper(t, fleet())
	tmpl := fleet().Spec.Template
	p, err := SeatPod("inference", "llama", &tmpl, "pause", PullImageVolume)
	if err != nil {
		t.Fatal(err)
	}
	p.Name = "llama-warm-a"
	if err := c.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if err := k.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(seats(t, c)); n != 1 {
		t.Fatalf("%d seats right after a restart whose ScaledObject is gone, want the 1 there was", n)
	}
}

// TestKeeperRefusesWhatItCannotKeep: a ScaledObject whose scale target is not there (deleted,
// renamed) asks for seats nobody can make: the seats it had go — they held GPU nodes for ever
// — the policy is told (Wants.Refused), so it holds that headroom as serving replicas, and once
// the target is back the refusal is withdrawn and the seats come again.
func TestKeeperRefusesWhatItCannotKeep(t *testing.T) {
	ctx := context.Background()
	k, c, clk := newKeeper(t, fleet(), scaledObject("2"))
	key := Key{"inference", "llama"}
	k.Wants.Set(key, 2, false, clk.Now())
	if err := k.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(seats(t, c)); n != 2 {
		t.Fatalf("%d seats, want 2", n)
	}
	if err := c.Delete(ctx, fleet()); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute) // past the template cache
	k.Wants.Set(key, 2, false, clk.Now())
	if err := k.Reconcile(ctx); err != nil {
		t.Fatalf("a missing target is no error to retry: %v", err)
	}
	if n := len(seats(t, c)); n != 0 {
		t.Errorf("%d seats for a target that is not there, want 0", n)
	}
	if why := k.Wants.Refused(key); !strings.Contains(why, "not there") {
		t.Errorf("refused %q, want the target named as not there", why)
	}
	// The policy holds the headroom as replicas now: it asks for no seats.
	k.Wants.Set(key, 0, false, clk.Now())
	if err := c.Create(ctx, fleet()); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute)
	if err := k.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if why := k.Wants.Refused(key); why != "" {
		t.Errorf("still refused %q once the target is back", why)
	}
}

// TestKeeperReplacesADeadSeat: a seat its kubelet rejected (UnexpectedAdmissionError while the
// device plugin registers) or evicted stays in phase Failed, owned by nothing: it is deleted and
// made again, not counted as a seat for ever.
func TestKeeperReplacesADeadSeat(t *testing.T) {
	ctx := context.Background()
	k, c, clk := newKeeper(t, fleet(), scaledObject("1"))
	key := Key{"inference", "llama"}
	k.Wants.Set(key, 1, false, clk.Now())
	if err := k.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	dead := seats(t, c)[0]
	dead.Status.Phase = corev1.PodFailed
	dead.Status.Reason = "UnexpectedAdmissionError"
	if err := c.Status().Update(ctx, &dead); err != nil {
		t.Fatal(err)
	}
	if err := k.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	left := seats(t, c)
	if len(left) != 1 || left[0].Name == dead.Name || left[0].Status.Phase == corev1.PodFailed {
		t.Errorf("seats %v, want one new seat in place of the dead %s", len(left), dead.Name)
	}
}

// TestKeeperUnprotectsAnOlderBerthsSeat: a seat an older berth made do-not-disrupt kept its node
// from Karpenter's drift and expiry for as long as it lived; after an upgrade the annotation is
// taken off in place — the same seat on the same node, no second node launched for a new one.
func TestKeeperUnprotectsAnOlderBerthsSeat(t *testing.T) {
	ctx := context.Background()
	k, c, clk := newKeeper(t, fleet(), scaledObject("1"))
	k.Pods = slimReader{c} // as berth scaler reads pods: through the cache's transform
	tmpl := fleet().Spec.Template
	old, err := SeatPod("inference", "llama", &tmpl, k.PauseImage, k.Pull) // of the template the keeper makes: only the annotation differs
	if err != nil {
		t.Fatal(err)
	}
	old.Name = "llama-warm-old"
	old.Annotations[karpv1.DoNotDisruptAnnotationKey] = "true"
	if err := c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	k.Wants.Set(Key{"inference", "llama"}, 1, true, clk.Now()) // held: only stale seats go
	if err := k.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	left := seats(t, c)
	if len(left) != 1 || left[0].Name != old.Name {
		t.Fatalf("%d seats, want %s kept", len(left), old.Name)
	}
	if _, ok := left[0].Annotations[karpv1.DoNotDisruptAnnotationKey]; ok {
		t.Errorf("seat %s annotations %v: do-not-disrupt still there", old.Name, left[0].Annotations)
	}
}

// TestKeeperRefusesANameNoLabelHolds: seats are labelled with their ScaledObject's name, and a
// name longer than a label value holds made every create fail; the keeper refuses it instead
// (the policy then holds the headroom as replicas), saying why.
func TestKeeperRefusesANameNoLabelHolds(t *testing.T) {
	long := strings.Repeat("l", 64)
	so := scaledObject("2")
	so.SetName(long)
	k, c, clk := newKeeper(t, fleet(), so)
	key := Key{"inference", long}
	k.Wants.Set(key, 2, false, clk.Now())
	if err := k.Reconcile(context.Background()); err != nil {
		t.Fatalf("a name too long is no error to retry: %v", err)
	}
	if why := k.Wants.Refused(key); !strings.Contains(why, "64 characters") {
		t.Errorf("refused %q, want the name's length said", why)
	}
	var list corev1.PodList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d pods created, want none", len(list.Items))
	}
}

// slimReader lists pods as berth scaler's pod cache holds them (targets.SlimPod).
type slimReader struct{ client.Reader }

func (r slimReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := r.Reader.List(ctx, list, opts...); err != nil {
		return err
	}
	pods, ok := list.(*corev1.PodList)
	if !ok {
		return nil
	}
	for i := range pods.Items {
		slim, err := targets.SlimPod(&pods.Items[i])
		if err != nil {
			return err
		}
		pods.Items[i] = *slim.(*corev1.Pod)
	}
	return nil
}

// TestKeeperFollowsARetargetAtOnce: with the scaler's watch on ScaledObjects, a ScaledObject
// pointed at another Deployment (blue to green, a new serving image) has seats of the new one's
// template at the next pass, not after the template cache's TTL; without the watch, after it.
func TestKeeperFollowsARetargetAtOnce(t *testing.T) {
	for _, watched := range []bool{true, false} {
		ctx := context.Background()
		green := fleet()
		green.Name = "llama-green"
		green.Spec.Template.Spec.Containers[0].Image = "registry.example/vllm:v0.12.0"
		k, c, clk := newKeeper(t, fleet(), green, scaledObject("2"))
		if watched {
			k.ScaledObjects = c
		}
		key := Key{"inference", "llama"}
		images := func() []string {
			var out []string
			for _, p := range seats(t, c) {
				out = append(out, p.Spec.Volumes[0].Image.Reference)
			}
			slices.Sort(out)
			return out
		}
		k.Wants.Set(key, 2, false, clk.Now())
		if err := k.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		if got := images(); !slices.Equal(got, []string{"registry.example/vllm:v0.11.0", "registry.example/vllm:v0.11.0"}) {
			t.Fatalf("watched %v: seats pull %v before the retarget, want blue's image twice", watched, got)
		}
		so := &unstructured.Unstructured{}
		so.SetGroupVersionKind(targets.ScaledObjectGVK)
		if err := c.Get(ctx, client.ObjectKey{Namespace: "inference", Name: "llama"}, so); err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(so.Object, "llama-green", "spec", "scaleTargetRef", "name"); err != nil {
			t.Fatal(err)
		}
		so.SetGeneration(so.GetGeneration() + 1) // the API server's, on a spec change
		if err := c.Update(ctx, so); err != nil {
			t.Fatal(err)
		}
		clk.Step(DefaultInterval)
		k.Wants.Set(key, 2, false, clk.Now())
		if err := k.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		want := "registry.example/vllm:v0.12.0"
		if !watched {
			want = "registry.example/vllm:v0.11.0" // the template is kept for templateTTL
		}
		if got := images(); !slices.Equal(got, []string{want, want}) {
			t.Fatalf("watched %v: seats pull %v the pass after the retarget, want %s twice", watched, got, want)
		}
	}
}
