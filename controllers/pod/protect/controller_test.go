package protect

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

func controlledBy(kind, name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, Controller: ptr.To(true)}}
}

// TestReconcileDeploymentOptIn: a running pod of an opted-in Deployment is marked through its
// ReplicaSet (read as metadata); a pod with its own do-not-disrupt is left alone; opting out
// removes berth's mark.
func TestReconcileDeploymentOptIn(t *testing.T) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := berthv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "serve", Namespace: "ml",
		Annotations: map[string]string{berthv1alpha1.ProtectAnnotation: "true"}}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "serve-abc", Namespace: "ml", OwnerReferences: controlledBy("Deployment", "serve")}}
	pod := builders.Pod("serve-abc-1", "ml").Node("n1").Phase(corev1.PodRunning).Obj()
	pod.OwnerReferences = controlledBy("ReplicaSet", "serve-abc")
	userPod := pod.DeepCopy()
	userPod.Name = "serve-abc-2"
	userPod.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "false"}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(deploy, rs, pod, userPod).Build()
	r := &Reconciler{Client: c}
	annotationsOf := func(p *corev1.Pod) map[string]string {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)}); err != nil {
			t.Fatalf("Reconcile %s: %v", p.Name, err)
		}
		var got corev1.Pod
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), &got); err != nil {
			t.Fatal(err)
		}
		return got.Annotations
	}

	want := map[string]string{karpv1.DoNotDisruptAnnotationKey: "true", berthv1alpha1.ProtectedByAnnotation: berthv1alpha1.ProtectedByBerth}
	if diff := cmp.Diff(want, annotationsOf(pod)); diff != "" {
		t.Errorf("opted-in pod annotations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(userPod.Annotations, annotationsOf(userPod)); diff != "" {
		t.Errorf("the user's own annotation changed (-want +got):\n%s", diff)
	}

	deploy.Annotations[berthv1alpha1.ProtectAnnotation] = "false"
	if err := c.Update(context.Background(), deploy); err != nil {
		t.Fatal(err)
	}
	if got := annotationsOf(pod); len(got) != 0 {
		t.Errorf("after opting out, annotations = %v", got)
	}
}
