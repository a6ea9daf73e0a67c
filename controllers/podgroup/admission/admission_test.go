package admission

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

func TestWithPin(t *testing.T) {
	pin := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}
	barrier := corev1.NodeSelectorRequirement{Key: berthv1alpha1.BarrierLabelPrefix + "uid", Operator: corev1.NodeSelectorOpExists}
	t.Run("no affinity: one term", func(t *testing.T) {
		p := builders.Pod("a", "ml").Member("g").Gated().Obj()
		got := withPin(p, "n1", barrier.Key)
		want := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{pin}, MatchExpressions: []corev1.NodeSelectorRequirement{barrier}}}}
		if diff := cmp.Diff(want, got.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution); diff != "" {
			t.Errorf("pin (-want +got):\n%s", diff)
		}
		if got.Annotations[berthv1alpha1.PinnedNodeAnnotation] != "n1" {
			t.Errorf("annotation = %v", got.Annotations)
		}
		if p.Spec.Affinity != nil {
			t.Error("input modified")
		}
	})
	t.Run("existing terms: each narrowed", func(t *testing.T) {
		p := builders.Pod("a", "ml").NodeAffinityIn("family", "p5").Obj()
		p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(
			p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms,
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "family", Operator: corev1.NodeSelectorOpIn, Values: []string{"p4d"}}}})
		got := withPin(p, "n1", "")
		for i, term := range got.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			if diff := cmp.Diff([]corev1.NodeSelectorRequirement{pin}, term.MatchFields); diff != "" {
				t.Errorf("term %d fields (-want +got):\n%s", i, diff)
			}
			if len(term.MatchExpressions) != 1 {
				t.Errorf("term %d expressions changed: %v", i, term.MatchExpressions)
			}
		}
	})
}

func TestUnavailableNodes(t *testing.T) {
	ready := builders.Node("ready").Obj()
	notReady := builders.Node("not-ready").Obj()
	notReady.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	sick := builders.Node("sick").Obj()
	sick.Status.Conditions = append(sick.Status.Conditions, corev1.NodeCondition{Type: berthv1alpha1.NodeConditionAcceleratedHardwareReady, Status: corev1.ConditionFalse, Reason: "XidCritical"})
	got := unavailableNodes([]*corev1.Node{ready, notReady, sick})
	want := map[string]string{"not-ready": "not Ready", "sick": "GPU unhealthy: XidCritical"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unavailable (-want +got):\n%s", diff)
	}
}

func TestNodeChangedIgnoresHeartbeats(t *testing.T) {
	old := builders.Node("n1").GPU(8).Obj()
	old.ResourceVersion = "1"
	old.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.NewTime(time.Unix(100, 0)), LastTransitionTime: metav1.NewTime(time.Unix(50, 0))}}
	for _, tc := range []struct {
		name   string
		change func(n *corev1.Node)
		want   bool
	}{
		{"heartbeat only", func(n *corev1.Node) { n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Unix(140, 0)) }, false},
		{"not Ready", func(n *corev1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Unix(140, 0))
			n.Status.Conditions[0].Status = corev1.ConditionFalse
		}, true},
		{"label", func(n *corev1.Node) { n.Labels[berthv1alpha1.BarrierLabelPrefix+"uid"] = "true" }, true},
		{"taint", func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "x", Effect: corev1.TaintEffectNoSchedule})
		}, true},
		{"allocatable", func(n *corev1.Node) { n.Status.Allocatable[berthv1alpha1.GPUResource] = resource.MustParse("7") }, true},
		{"GPU condition", func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: berthv1alpha1.NodeConditionAcceleratedHardwareReady, Status: corev1.ConditionFalse})
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			updated := old.DeepCopy()
			updated.ResourceVersion = "2"
			tc.change(updated)
			if got := nodeChanged(old, updated); got != tc.want {
				t.Errorf("nodeChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLostRace(t *testing.T) {
	gr := schema.GroupResource{Group: "scheduling.berth.dev", Resource: "podgroups"}
	conflict := apierrors.NewConflict(gr, "g", errors.New("modified"))
	gone := apierrors.NewNotFound(gr, "g")
	other := errors.New("apiserver down")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"conflict", conflict, true},
		{"wrapped conflict", fmt.Errorf("recording admission: %w", conflict), true},
		{"gone", gone, true},
		{"conflicts joined", errors.Join(conflict, fmt.Errorf("pin: %w", conflict)), true},
		{"a real error beside a conflict", fmt.Errorf("gang: %w", errors.Join(conflict, other)), false},
		{"a real error", other, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lostRace(tc.err); got != tc.want {
				t.Errorf("lostRace(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestGangBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 40: 5 * time.Minute} {
		if got := backoffOf(n); got != want {
			t.Errorf("backoffOf(%d) = %s, want %s", n, got, want)
		}
	}
	r := &Reconciler{failures: map[types.UID]failure{}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bad := errors.New("admission webhook denied the request")
	if wait, fresh := r.fail("a", bad, now); wait != time.Second || !fresh {
		t.Errorf("first failure: %s, fresh %v", wait, fresh)
	}
	if wait, fresh := r.fail("a", bad, now.Add(time.Second)); wait != 2*time.Second || fresh {
		t.Errorf("the same error again: %s, fresh %v (reported once)", wait, fresh)
	}
	if wait, ok := r.backingOff("a", now.Add(2*time.Second)); !ok || wait != time.Second {
		t.Errorf("backing off: %s %v", wait, ok)
	}
	if _, ok := r.backingOff("b", now); ok {
		t.Error("another gang backs off with it")
	}
	r.recovered("a")
	if _, ok := r.backingOff("a", now.Add(2*time.Second)); ok {
		t.Error("a recovered gang still backs off")
	}
}

// TestForgetGone: what outlives a cycle is pruned when its gang or pod goes — it grew with
// every gang, generation and pod a long-lived controller ever saw.
func TestForgetGone(t *testing.T) {
	r := &Reconciler{boundSeen: map[string]bool{"live/0": true, "live/1": true, "gone/0": true},
		orphansSeen: map[types.UID]bool{"pod-here": true, "pod-gone": true},
		failures:    map[types.UID]failure{"live": {count: 1}, "gone": {count: 2}, sweepsKey: {count: 1}}}
	g := builders.PodGroup("g", "ml").Obj()
	g.UID = "live"
	r.forgetGone(map[types.UID]*berthv1alpha1.PodGroup{g.UID: g}, map[types.UID]bool{"pod-here": true})
	if diff := cmp.Diff(map[string]bool{"live/0": true, "live/1": true}, r.boundSeen); diff != "" {
		t.Errorf("boundSeen (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[types.UID]bool{"pod-here": true}, r.orphansSeen); diff != "" {
		t.Errorf("orphansSeen (-want +got):\n%s", diff)
	}
	if _, ok := r.failures["gone"]; ok || len(r.failures) != 2 {
		t.Errorf("failures %v: want the live gang's and the sweeps'", r.failures)
	}
}

func TestParallelIsBounded(t *testing.T) {
	var mu sync.Mutex
	inFlight, most := 0, 0
	items := make([]int, 100)
	err := parallel(items, func(int, int) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	})
	if err != nil || most > maxParallelWrites {
		t.Errorf("%d writes in flight at once (err %v), want at most %d", most, err, maxParallelWrites)
	}
}
