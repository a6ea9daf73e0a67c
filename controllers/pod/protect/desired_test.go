package protect

import (
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

func TestWantProtected(t *testing.T) {
	running := builders.Pod("a", "ml").Member("g").Node("n1").Phase(corev1.PodRunning).Obj()
	bound := builders.Pod("a", "ml").Member("g").Node("n1").Phase(corev1.PodPending).Obj()
	unbound := builders.Pod("a", "ml").Member("g").Phase(corev1.PodPending).Obj()
	succeeded := builders.Pod("a", "ml").Member("g").Node("n1").Phase(corev1.PodSucceeded).Obj()
	failed := builders.Pod("a", "ml").Member("g").Node("n1").Phase(corev1.PodFailed).Obj()
	gang := func(phase berthv1alpha1.PodGroupPhase) *berthv1alpha1.PodGroup {
		pg := builders.PodGroup("g", "ml").Obj()
		pg.Status.Phase = phase
		return pg
	}
	protectOff := builders.PodGroup("g", "ml").Protect(false).Obj()
	protectOn := builders.PodGroup("g", "ml").Protect(true).Obj()
	nilProtect := builders.PodGroup("g", "ml").Obj()
	nilProtect.Spec.Disruption = &berthv1alpha1.DisruptionSpec{}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		gang   *berthv1alpha1.PodGroup
		optIn  bool
		expect bool
	}{
		{"running member of a running gang", running, gang(berthv1alpha1.PodGroupRunning), false, true},
		{"bound member of an admitted gang", bound, gang(berthv1alpha1.PodGroupAdmitted), false, true},
		{"unbound member is not protected yet", unbound, gang(berthv1alpha1.PodGroupPending), false, false},
		{"nil disruption protects", running, builders.PodGroup("g", "ml").Obj(), false, true},
		{"nil protect protects", running, nilProtect, false, true},
		{"protect true", running, protectOn, false, true},
		{"protect false", running, protectOff, false, false},
		{"gang succeeded", running, gang(berthv1alpha1.PodGroupSucceeded), false, false},
		{"gang failed", running, gang(berthv1alpha1.PodGroupFailed), false, false},
		{"no PodGroup", running, nil, false, false},
		{"terminal member", succeeded, gang(berthv1alpha1.PodGroupRunning), false, false},
		{"failed member", failed, gang(berthv1alpha1.PodGroupRunning), false, false},
		{"deployment opted in", running, nil, true, true},
		{"deployment opted in, gang opted out", running, protectOff, true, true},
		{"deployment pod finished", succeeded, nil, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wantProtected(tt.pod, tt.gang, tt.optIn); got != tt.expect {
				t.Errorf("wantProtected = %v, want %v", got, tt.expect)
			}
		})
	}
}

func TestDesiredAnnotations(t *testing.T) {
	const dnd, by = karpv1.DoNotDisruptAnnotationKey, berthv1alpha1.ProtectedByAnnotation
	ours := map[string]string{dnd: "true", by: berthv1alpha1.ProtectedByBerth, "keep": "me"}
	tests := []struct {
		name        string
		current     map[string]string
		want        bool
		wantOut     map[string]string
		wantChanged bool
	}{
		{"protect a pod without annotations", nil, true, map[string]string{dnd: "true", by: berthv1alpha1.ProtectedByBerth}, true},
		{"protect keeps other annotations", map[string]string{"keep": "me"}, true, ours, true},
		{"already protected", ours, true, ours, false},
		{"unprotect removes both", ours, false, map[string]string{"keep": "me"}, true},
		{"nothing to remove", map[string]string{"keep": "me"}, false, map[string]string{"keep": "me"}, false},
		{"a user's do-not-disrupt stays when unprotecting", map[string]string{dnd: "true"}, false, map[string]string{dnd: "true"}, false},
		{"a user's do-not-disrupt is not taken over", map[string]string{dnd: "true"}, true, map[string]string{dnd: "true"}, false},
		{"a user's do-not-disrupt false is respected", map[string]string{dnd: "false"}, true, map[string]string{dnd: "false"}, false},
		{"berth's marker without the annotation is restored", map[string]string{by: berthv1alpha1.ProtectedByBerth}, true, map[string]string{dnd: "true", by: berthv1alpha1.ProtectedByBerth}, true},
		{"berth's stale marker is removed", map[string]string{by: berthv1alpha1.ProtectedByBerth}, false, map[string]string{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := maps.Clone(tt.current)
			got, changed := desiredAnnotations(tt.current, tt.want)
			if changed != tt.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tt.wantChanged)
			}
			if diff := cmp.Diff(tt.wantOut, got); diff != "" && (len(tt.wantOut) != 0 || len(got) != 0) {
				t.Errorf("annotations (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tt.current); diff != "" {
				t.Errorf("desiredAnnotations changed its input:\n%s", diff)
			}
		})
	}
}

func TestRelevantAndControllerName(t *testing.T) {
	rsOwned := builders.Pod("web-1", "ml").Obj()
	rsOwned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", Controller: ptr.To(true)}}
	jobOwned := builders.Pod("job-1", "ml").Obj()
	jobOwned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "job", Controller: ptr.To(true)}}
	notController := builders.Pod("x", "ml").Obj()
	notController.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc"}}
	marked := builders.Pod("m", "ml").Obj()
	marked.Annotations = map[string]string{berthv1alpha1.ProtectedByAnnotation: berthv1alpha1.ProtectedByBerth}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		want   bool
		wantRS string
	}{
		{"ReplicaSet pod", rsOwned, true, "web-abc"},
		{"Job pod", jobOwned, false, ""},
		{"owner that is not the controller", notController, false, ""},
		{"member", builders.Pod("g-0", "ml").Member("g").Obj(), true, ""},
		{"marked by berth", marked, true, ""},
		{"plain pod", builders.Pod("p", "ml").Obj(), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := relevant(tt.pod); got != tt.want {
				t.Errorf("relevant = %v, want %v", got, tt.want)
			}
			if got := controllerName(tt.pod, replicaSetGVK); got != tt.wantRS {
				t.Errorf("controllerName = %q, want %q", got, tt.wantRS)
			}
		})
	}
}
