// Package scalertargets_test checks how the scaler finds a ScaledObject's replicas on a real
// kube-apiserver with KEDA's CRDs: the ScaledObject's scaleTargetRef through the /scale
// subresource (Deployment, StatefulSet), podSelector overriding it, ScaledJobs, and the errors
// for targets that cannot be resolved.
package scalertargets_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/targets"
	"github.com/berth-dev/berth/test/rigtest"
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		return rigtest.InstallToolCRDs(ctx, r, rigtest.CRDsKEDA)
	})
}

const ns = "default"

func podTemplate(labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:v0.11.0"}}},
	}
}

func scaledObject(name string, ref map[string]any, max int64) *unstructured.Unstructured {
	spec := map[string]any{"scaleTargetRef": ref, "triggers": []any{map[string]any{"type": "external", "metadata": map[string]any{"scalerAddress": "x:9090"}}}}
	if max > 0 {
		spec["maxReplicaCount"] = max
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
	}}
}

func pod(name string, labels map[string]string, deleting bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Spec: podTemplate(nil).Spec}
	if deleting {
		p.Finalizers = []string{"test.berth.dev/hold"}
	}
	return p
}

func TestResolveAndList(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	c := r.Client
	llama := map[string]string{"app": "llama"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "llama", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: llama}, Template: podTemplate(llama)}}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "mistral", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "mistral"}}, Template: podTemplate(map[string]string{"app": "mistral"})}}
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, sts); err != nil {
		t.Fatal(err)
	}
	for _, so := range []*unstructured.Unstructured{
		scaledObject("llama", map[string]any{"name": "llama"}, 6),
		scaledObject("mistral", map[string]any{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "mistral"}, 0),
		scaledObject("orphan", map[string]any{"name": "gone"}, 0),
		scaledObject("weird", map[string]any{"apiVersion": "example.com/v1", "kind": "Thing", "name": "x"}, 0),
	} {
		if err := c.Create(ctx, so); err != nil {
			t.Fatal(err)
		}
	}
	// Pods: two llama replicas (one ready), one being deleted, one finished; a mistral replica.
	for _, p := range []*corev1.Pod{pod("llama-a", llama, false), pod("llama-b", llama, false), pod("llama-gone", llama, true),
		pod("llama-done", llama, false), pod("mistral-0", map[string]string{"app": "mistral"}, false)} {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	setStatus(t, "llama-a", corev1.PodRunning, true, "127.1.0.10")
	setStatus(t, "llama-b", corev1.PodPending, false, "")
	setStatus(t, "llama-done", corev1.PodSucceeded, false, "")
	setStatus(t, "mistral-0", corev1.PodRunning, true, "127.1.0.11")
	gone := &corev1.Pod{}
	_ = c.Get(ctx, clientKey("llama-gone"), gone)
	if err := c.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		gone.Finalizers = nil
		_ = c.Update(ctx, gone)
	})

	tg := &targets.Targets{Pods: c, API: c}
	noSel := &scaler.Trigger{}
	info, err := tg.Resolve(ctx, ns, "llama", noSel)
	if err != nil {
		t.Fatal(err)
	}
	if info.Selector.String() != "app=llama" || info.MaxReplicas != 6 {
		t.Fatalf("llama: %+v", info)
	}
	// The HPA's count, read fresh on every evaluation: the HPA scales the target through /scale
	// while the resolved target stays cached, and the next read says so.
	if n, ok, err := tg.Replicas(ctx, ns, info); err != nil || !ok || n != 0 {
		t.Fatalf("llama's replicas: %d, %v, %v; want 0", n, ok, err)
	}
	scale := &autoscalingv1.Scale{}
	if err := c.SubResource("scale").Get(ctx, dep, scale); err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 3
	if err := c.SubResource("scale").Update(ctx, dep, client.WithSubResourceBody(scale)); err != nil {
		t.Fatal(err)
	}
	if cached, err := tg.Resolve(ctx, ns, "llama", noSel); err != nil {
		t.Fatal(err)
	} else if n, ok, err := tg.Replicas(ctx, ns, cached); err != nil || !ok || n != 3 {
		t.Fatalf("llama's replicas after the HPA scaled it: %d, %v, %v; want 3", n, ok, err)
	}
	if err := c.SubResource("scale").Get(ctx, dep, scale); err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 0
	if err := c.SubResource("scale").Update(ctx, dep, client.WithSubResourceBody(scale)); err != nil {
		t.Fatal(err)
	}
	pods, err := tg.List(ctx, ns, info.Selector)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pods {
		got = append(got, fmt.Sprintf("%s %q %v %q", p.Name, p.IP, p.Ready, p.Stuck))
		if p.Created.IsZero() {
			t.Errorf("pod %s: no creation time (a not-ready replica's startup timeout counts from it)", p.Name)
		}
	}
	if want := `[llama-a "127.1.0.10" true "" llama-b "" false ""]`; fmt.Sprint(got) != want {
		t.Fatalf("pods = %v, want %s (deleting and finished pods must be left out)", got, want)
	}
	if info, err := tg.Resolve(ctx, ns, "mistral", noSel); err != nil || info.Selector.String() != "app=mistral" || info.MaxReplicas != 100 {
		t.Fatalf("StatefulSet target: %+v, %v", info, err)
	}
	withSel, _ := scaler.ParseTrigger(map[string]string{"targetQueueDepth": "1", "podSelector": "app=mistral"})
	if info, err := tg.Resolve(ctx, ns, "llama", withSel); err != nil || info.Selector.String() != "app=mistral" {
		t.Fatalf("podSelector overrides: %+v, %v", info, err)
	}
	// Two triggers on one ScaledObject, the first with podSelector: the second still resolves
	// the target's own selector, not the first's resolution (which read none and listed no pods).
	fresh := &targets.Targets{Pods: c, API: c}
	if info, err := fresh.Resolve(ctx, ns, "llama", withSel); err != nil || info.Selector.String() != "app=mistral" {
		t.Fatalf("podSelector first: %+v, %v", info, err)
	}
	if info, err := fresh.Resolve(ctx, ns, "llama", noSel); err != nil || info.Selector == nil || info.Selector.String() != "app=llama" || info.Target == nil {
		t.Fatalf("the trigger without podSelector after one with it: %+v, %v; want the target's selector app=llama", info, err)
	}
	if info, err := tg.Resolve(ctx, ns, "a-scaledjob", withSel); err != nil || info.Selector.String() != "app=mistral" {
		t.Fatalf("no ScaledObject but a podSelector (a ScaledJob) is fine: %+v, %v", info, err)
	} else if n, ok, err := tg.Replicas(ctx, ns, info); err != nil || ok {
		t.Fatalf("a ScaledJob has no target to read replicas of: %d, %v, %v; want none", n, ok, err)
	}
	// A trigger's podSelector is the replicas: the target's /scale is not read for it (berth's
	// RBAC covers the /scale of a few kinds only).
	if info, err := (&targets.Targets{Pods: c, API: c}).Resolve(ctx, ns, "weird", withSel); err != nil {
		t.Fatalf("podSelector on a ScaledObject whose target's kind is not served: %v", err)
	} else if n, ok, err := tg.Replicas(ctx, ns, info); err != nil || ok {
		t.Fatalf("podSelector: replicas %d, %v, %v read; want none", n, ok, err)
	}
	for name, want := range map[string]string{
		"orphan":      "not found",
		"weird":       "Thing",
		"nonexistent": "ScaledObject default/nonexistent not found",
	} {
		_, err := tg.Resolve(ctx, ns, name, noSel)
		if !errors.Is(err, targets.ErrTarget) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want ErrTarget mentioning %q", name, err, want)
		}
	}
}

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

func setStatus(t *testing.T, name string, phase corev1.PodPhase, ready bool, ip string) {
	t.Helper()
	ctx := context.Background()
	c := rigtest.Current().Client
	p := &corev1.Pod{}
	if err := c.Get(ctx, clientKey(name), p); err != nil {
		t.Fatal(err)
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Phase, p.Status.PodIP = phase, ip
	if ip != "" {
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if err := c.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
}
