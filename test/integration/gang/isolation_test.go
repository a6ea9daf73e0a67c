package gang_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestOneWedgedGangDelaysNoOther: a ValidatingAdmissionPolicy refuses every write to one
// PodGroup (a webhook or policy gone wrong, a quota), so each of berth's cycles fails on that
// gang. The cycle is one cluster-wide work item: returned to controller-runtime, the errors
// backed it off — 5 ms doubling up to 1000 s — and every other gang's timers with it. Each
// other gang's schedule timeout must still fire within 2 s of its deadline, and the wedged gang
// says why it is stuck.
func TestOneWedgedGangDelaysNoOther(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	const timeout = 30
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-wedged-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{berthv1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{"podgroups", "podgroups/status"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("object.metadata.namespace != '%s' || object.metadata.name != 'wedged'", ns),
				Message:    "writes to this PodGroup are refused (test)",
				Reason:     ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
	}
	// The policy takes a moment to load: wait until a write to the wedged gang is refused.
	wedged := builders.PodGroup("wedged", ns).MinMember(2).Obj()
	if err := c.Create(ctx, wedged); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "the policy refuses writes to the wedged gang", func(ctx context.Context) (bool, string, error) {
		var pg berthv1alpha1.PodGroup
		if err := c.Get(ctx, client.ObjectKeyFromObject(wedged), &pg); err != nil {
			return false, "", err
		}
		if pg.Annotations == nil {
			pg.Annotations = map[string]string{}
		}
		pg.Annotations["probe"] = time.Now().String()
		err := c.Update(ctx, &pg)
		pg.Status.Restarts = 7
		serr := c.Status().Update(ctx, &pg)
		return apierrors.IsForbidden(err) && apierrors.IsForbidden(serr), fmt.Sprintf("update: %v; status update: %v", err, serr), nil
	})
	for i := range 2 {
		if err := c.Create(ctx, builders.Pod(fmt.Sprintf("wedged-%d", i), ns).Member("wedged").GPU(64).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	// Let the wedged gang fail a good many cycles first: the backoff it caused grows with them.
	time.Sleep(10 * time.Second)
	others := []string{"a", "b", "c"}
	for _, name := range others {
		if err := c.Create(ctx, builders.PodGroup(name, ns).MinMember(2).ScheduleTimeout(timeout).Obj()); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if err := c.Create(ctx, builders.Pod(fmt.Sprintf("%s-%d", name, i), ns).Member(name).GPU(64).Obj()); err != nil {
				t.Fatal(err)
			}
		}
	}
	waiting := map[string]time.Time{}
	fired := map[string]time.Time{}
	rigtest.Eventually(t, 2*time.Duration(timeout)*time.Second, 100*time.Millisecond, "every other gang's schedule timeout fires", func(ctx context.Context) (bool, string, error) {
		for _, name := range others {
			var pg berthv1alpha1.PodGroup
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pg); err != nil {
				return false, "", err
			}
			if pg.Status.WaitingSince != nil && waiting[name].IsZero() {
				waiting[name] = pg.Status.WaitingSince.Time
			}
			cond := meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionScheduled)
			if cond != nil && cond.Reason == berthv1alpha1.ReasonScheduleTimeout && fired[name].IsZero() {
				fired[name] = time.Now()
			}
		}
		return len(fired) == len(others), fmt.Sprintf("waiting since %v, fired %v", waiting, fired), nil
	})
	for _, name := range others {
		// WaitingSince has a one-second resolution: the deadline may be up to 1 s earlier than
		// the true one.
		late := fired[name].Sub(waiting[name].Add(timeout * time.Second))
		t.Logf("gang %s: schedule timeout fired %.1f s after its deadline", name, late.Seconds())
		if late > 3*time.Second {
			t.Errorf("gang %s: its schedule timeout fired %.1f s after its deadline (want within 2 s, plus the 1 s resolution of WaitingSince): the wedged gang held it back", name, late.Seconds())
		}
	}
	rigtest.WaitEvent(t, ns, "wedged", events.ReasonGangStepFailed)
}
