package admission

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
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

// disruptHarness is a Reconciler on a fake client holding pod p; atDelete receives the pod as
// it was when berth deleted it.
func disruptHarness(t *testing.T, p *corev1.Pod, atDelete func(*corev1.Pod)) (*Reconciler, client.Client) {
	t.Helper()
	return disruptHarnessWith(t, p, func(_ client.WithWatch, cur *corev1.Pod) { atDelete(cur) })
}

// disruptHarnessWith is disruptHarness whose atDelete may write with the fake client first.
func disruptHarnessWith(t *testing.T, p *corev1.Pod, atDelete func(client.WithWatch, *corev1.Pod)) (*Reconciler, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(p).WithStatusSubresource(&corev1.Pod{}).Build()
	c := interceptor.NewClient(base, interceptor.Funcs{
		// As kube-apiserver does (and the fake client does not): a patch may not change a UID.
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			var meta struct {
				Metadata struct {
					UID types.UID `json:"uid"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(data, &meta); err != nil {
				return err
			}
			var cur corev1.Pod
			if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), &cur); err != nil {
				return err
			}
			if meta.Metadata.UID != "" && meta.Metadata.UID != cur.UID {
				return apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, cur.Name, field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), meta.Metadata.UID, "field is immutable")})
			}
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			var cur corev1.Pod
			if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), &cur); err == nil {
				atDelete(cl, &cur)
			}
			return cl.Delete(ctx, obj, opts...)
		},
	})
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	return New(c, c, clk, bevents.NewRecorder(events.NewFakeRecorder(100)), Options{}), c
}

func disruptionTarget(p *corev1.Pod) *corev1.PodCondition {
	return podCondition(p, corev1.DisruptionTarget)
}

// TestDisruptMarksBeforeDeleting: a member berth deletes carries DisruptionTarget=True (berth's
// reason) when the deletion reaches it, the other conditions kept — what a Job's
// podFailurePolicy reads to ignore the deletion. Before, it was a plain DELETE, counted by the
// Job as a failure.
func TestDisruptMarksBeforeDeleting(t *testing.T) {
	p := builders.Pod("m-0", "ml").Member("g").Node("n1").Phase(corev1.PodRunning).Obj()
	p.UID = "uid-m-0"
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	var seen *corev1.Pod
	r, c := disruptHarness(t, p, func(cur *corev1.Pod) { seen = cur })
	ctx := context.Background()
	var live corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), &live); err != nil {
		t.Fatal(err)
	}
	if err := r.disrupt(ctx, &live, berthv1alpha1.DisruptionReasonGangRestart, "gang restarts", client.Preconditions{UID: &live.UID, ResourceVersion: &live.ResourceVersion}); err != nil {
		t.Fatal(err)
	}
	if seen == nil {
		t.Fatal("the member was not deleted")
	}
	if d := disruptionTarget(seen); d == nil || d.Status != corev1.ConditionTrue || d.Reason != berthv1alpha1.DisruptionReasonGangRestart {
		t.Errorf("DisruptionTarget when deleted = %+v, want True/%s", d, berthv1alpha1.DisruptionReasonGangRestart)
	}
	if podCondition(seen, corev1.PodReady) == nil {
		t.Error("the member's other conditions were replaced")
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), &live); !apierrors.IsNotFound(err) {
		t.Errorf("the member is still there: %v", err)
	}
}

// TestDisruptAtAStaleVersionLeavesTheMemberAlone: the member changed since berth read it
// (kube-scheduler bound it): neither marked nor deleted, and the conflict is returned.
func TestDisruptAtAStaleVersionLeavesTheMemberAlone(t *testing.T) {
	p := builders.Pod("m-0", "ml").Member("g").Obj()
	p.UID = "uid-m-0"
	r, c := disruptHarness(t, p, func(*corev1.Pod) { t.Error("the member was deleted") })
	ctx := context.Background()
	var live corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), &live); err != nil {
		t.Fatal(err)
	}
	stale := live.ResourceVersion
	live.Spec.NodeName = "n1"
	if err := c.Update(ctx, &live); err != nil {
		t.Fatal(err)
	}
	err := r.disrupt(ctx, &live, berthv1alpha1.DisruptionReasonMemberStranded, "stranded", client.Preconditions{UID: &live.UID, ResourceVersion: &stale})
	if !apierrors.IsConflict(err) {
		t.Errorf("err = %v, want a conflict", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), &live); err != nil {
		t.Fatal(err)
	}
	if d := disruptionTarget(&live); d != nil {
		t.Errorf("a member left alone carries %+v", d)
	}
}

// TestDisruptAnotherPodOfTheName: the member was recreated under its name (new UID): the new pod
// is neither marked nor deleted.
func TestDisruptAnotherPodOfTheName(t *testing.T) {
	p := builders.Pod("m-0", "ml").Member("g").Obj()
	p.UID = "uid-new"
	r, c := disruptHarness(t, p, func(*corev1.Pod) { t.Error("the new pod was deleted") })
	ctx := context.Background()
	old := p.DeepCopy()
	old.UID = types.UID("uid-old")
	if err := r.disrupt(ctx, old, berthv1alpha1.DisruptionReasonGangRestart, "gang restarts", client.Preconditions{UID: &old.UID}); err != nil {
		t.Errorf("err = %v, want none: the member is gone", err)
	}
	var live corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), &live); err != nil {
		t.Fatal(err)
	}
	if d := disruptionTarget(&live); d != nil {
		t.Errorf("another pod of the name carries %+v", d)
	}
}

// TestDisruptRefusedDeletionTakesTheMarkBack: the member changed between berth's mark and its
// deletion (the deletion is refused at the version the mark left): it lives on, and so carries
// no DisruptionTarget condition.
func TestDisruptRefusedDeletionTakesTheMarkBack(t *testing.T) {
	p := builders.Pod("m-0", "ml").Member("g").Obj()
	p.UID = "uid-m-0"
	r, c := disruptHarnessWith(t, p, func(cl client.WithWatch, cur *corev1.Pod) {
		cur.Spec.NodeName = "n1" // kube-scheduler binds it in between
		if err := cl.Update(context.Background(), cur); err != nil {
			t.Fatal(err)
		}
	})
	ctx := context.Background()
	var live corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), &live); err != nil {
		t.Fatal(err)
	}
	err := r.disrupt(ctx, &live, berthv1alpha1.DisruptionReasonMemberStranded, "stranded", client.Preconditions{UID: &live.UID, ResourceVersion: &live.ResourceVersion})
	if !apierrors.IsConflict(err) {
		t.Errorf("err = %v, want a conflict", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), &live); err != nil {
		t.Fatalf("the member was deleted: %v", err)
	}
	if d := disruptionTarget(&live); d != nil {
		t.Errorf("a member that lives on carries %+v", d)
	}
}

// TestDisruptRefusedMarkIsAnError: a mark the API server refuses as invalid for the member
// berth looked at (not another pod of its name) is an error — swallowed, the member lived on
// unmarked and undeleted with nothing said.
func TestDisruptRefusedMarkIsAnError(t *testing.T) {
	live := *builders.Pod("r-1", "ml").Member("g").GPU(1).Obj()
	live.UID = "uid-live"
	r, c := disruptHarness(t, &live, func(*corev1.Pod) { t.Error("deleted a member whose mark was refused") })
	r.client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
			return apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, live.Name, field.ErrorList{field.Invalid(field.NewPath("status", "conditions"), "x", "refused")})
		},
	})
	err := r.disrupt(context.Background(), &live, berthv1alpha1.DisruptionReasonGangRestart, "gang restarts", client.Preconditions{UID: &live.UID})
	if !apierrors.IsInvalid(err) {
		t.Errorf("disrupt = %v, want the refusal", err)
	}
}
