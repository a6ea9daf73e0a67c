package doctor

import (
	"strings"
	"testing"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func nativeGroup(name string, gang bool, conds ...metav1.Condition) schedulingv1beta1.PodGroup {
	pg := schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "train", Name: name}}
	if gang {
		pg.Spec.SchedulingPolicy.Gang = &schedulingv1beta1.GangSchedulingPolicy{MinCount: 4}
	} else {
		pg.Spec.SchedulingPolicy.Basic = &schedulingv1beta1.BasicSchedulingPolicy{}
	}
	pg.Status.Conditions = conds
	return pg
}

func TestNativeGangsWithoutCapacity(t *testing.T) {
	unplaced := metav1.Condition{Type: podGroupInitiallyScheduled, Status: metav1.ConditionFalse, Reason: "SchedulerError", Message: "error in PodGroupPostFilter"}
	placed := metav1.Condition{Type: podGroupInitiallyScheduled, Status: metav1.ConditionTrue, Reason: "Scheduled"}
	gangs := nativeGangs([]schedulingv1beta1.PodGroup{
		nativeGroup("stuck", true, unplaced),
		nativeGroup("running", true, placed),
		nativeGroup("fresh", true),
		nativeGroup("basic", false, unplaced),
	})
	if len(gangs) != 3 {
		t.Fatalf("native gangs %+v, want the 3 with a gang policy", gangs)
	}
	for _, tc := range []struct {
		name string
		s    Snapshot
		want []string
	}{
		{"gate off: nothing to report", Snapshot{}, nil},
		{"only the gang kube-scheduler could not place", Snapshot{GenericWorkload: true, NativeGangs: gangs}, []string{"PodGroup.scheduling.k8s.io train/stuck"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Run(tc.s)
			var got []string
			for _, f := range r.Findings {
				if f.Check != CheckNativeGangWithoutCapacity {
					continue
				}
				got = append(got, f.Object)
				if !strings.Contains(f.Problem, "at least 4 pods") || !strings.Contains(f.Problem, "SchedulerError: error in PodGroupPostFilter") || !strings.Contains(f.Fix, "CapacityRequested") {
					t.Errorf("finding %+v does not say what and why", f)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("findings on %v, want %v", got, tc.want)
			}
			if r.GenericWorkload != tc.s.GenericWorkload {
				t.Errorf("report GenericWorkload %v, want %v", r.GenericWorkload, tc.s.GenericWorkload)
			}
		})
	}
}
