package admission

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

func TestPodChanged(t *testing.T) {
	old := builders.Pod("m-0", "ml").Member("g").GPU(1).Gated().Obj()
	old.ResourceVersion = "1"
	old.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated}}
	for _, tc := range []struct {
		name   string
		change func(p *corev1.Pod)
		want   bool
	}{
		{"nothing but the version", func(*corev1.Pod) {}, false},
		{"container status", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 3}}
		}, false},
		{"readiness", func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
		}, false},
		{"pod IP", func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.7" }, false},
		{"PodScheduled probe time only", func(p *corev1.Pod) {
			p.Status.Conditions[0].LastProbeTime = metav1.NewTime(time.Unix(100, 0))
		}, false},
		{"gate removed", func(p *corev1.Pod) { p.Spec.SchedulingGates = nil }, true},
		{"bound", func(p *corev1.Pod) { p.Spec.NodeName = "n1" }, true},
		{"phase", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
		{"nominated", func(p *corev1.Pod) { p.Status.NominatedNodeName = "n1" }, true},
		{"unschedulable", func(p *corev1.Pod) {
			p.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes"}
		}, true},
		{"label", func(p *corev1.Pod) { p.Labels[berthv1alpha1.PodGroupLabel] = "other" }, true},
		{"annotation", func(p *corev1.Pod) { p.Annotations = map[string]string{berthv1alpha1.PinnedNodeAnnotation: "n1"} }, true},
		{"deleting", func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }, true},
		{"owner", func(p *corev1.Pod) { p.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: "j", UID: "u"}} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			updated := old.DeepCopy()
			updated.ResourceVersion = "2"
			tc.change(updated)
			if got := podChanged(old, updated); got != tc.want {
				t.Errorf("podChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGroupChanged(t *testing.T) {
	old := builders.PodGroup("g", "ml").MinMember(2).Obj()
	old.ResourceVersion = "1"
	for _, tc := range []struct {
		name   string
		change func(g *berthv1alpha1.PodGroup)
		want   bool
	}{
		{"member counts", func(g *berthv1alpha1.PodGroup) { g.Status.Members.Running = 2 }, false},
		{"phase", func(g *berthv1alpha1.PodGroup) { g.Status.Phase = berthv1alpha1.PodGroupRunning }, false},
		{"spec", func(g *berthv1alpha1.PodGroup) { g.Spec.MinMember = 3; g.Generation = 2 }, true},
		{"assignments", func(g *berthv1alpha1.PodGroup) {
			g.Status.Assignments = []berthv1alpha1.MemberAssignment{{Pod: "m-0", Node: "n1"}}
		}, true},
		{"a condition", func(g *berthv1alpha1.PodGroup) {
			g.Status.Conditions = []metav1.Condition{{Type: berthv1alpha1.ConditionScheduled, Status: metav1.ConditionFalse}}
		}, true},
		{"deleting", func(g *berthv1alpha1.PodGroup) { now := metav1.Now(); g.DeletionTimestamp = &now }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			updated := old.DeepCopy()
			updated.ResourceVersion = "2"
			tc.change(updated)
			if got := groupChanged(old, updated); got != tc.want {
				t.Errorf("groupChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestObjectStoreFiresAfterRecording: a cycle triggered by an event sees that event's object.
func TestObjectStoreFiresAfterRecording(t *testing.T) {
	var s *objectStore[*corev1.Pod]
	var seen []string
	fired := 0
	s = newObjectStore(podChanged, func() {
		fired++
		for _, p := range s.list() {
			seen = append(seen, p.Name+"@"+p.ResourceVersion)
		}
	})
	p := builders.Pod("m-0", "ml").Gated().Obj()
	p.UID, p.ResourceVersion = "u1", "1"
	s.OnAdd(p, true)
	status := p.DeepCopy()
	status.ResourceVersion = "2"
	status.Status.PodIP = "10.0.0.1"
	s.OnUpdate(p, status) // recorded, no cycle
	bound := status.DeepCopy()
	bound.ResourceVersion = "3"
	bound.Spec.NodeName = "n1"
	s.OnUpdate(status, bound)
	if fired != 2 || seen[0] != "m-0@1" || seen[1] != "m-0@3" {
		t.Fatalf("fired %d times, cycles saw %v; want 2, [m-0@1 m-0@3]", fired, seen)
	}
	s.OnDelete(toolscacheTombstone(bound))
	if fired != 3 || len(s.list()) != 0 {
		t.Fatalf("after delete: fired %d, %d left", fired, len(s.list()))
	}
}

func toolscacheTombstone(obj any) any {
	return toolscache.DeletedFinalStateUnknown{Key: "ml/m-0", Obj: obj}
}

func TestNodeChanged(t *testing.T) {
	base := builders.Node("n1").GPU(8).Obj()
	base.ResourceVersion = "1"
	base.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.NewTime(time.Unix(100, 0)), LastTransitionTime: metav1.NewTime(time.Unix(50, 0))}}
	for _, tc := range []struct {
		name   string
		change func(n *corev1.Node)
		want   bool
	}{
		{"a heartbeat", func(n *corev1.Node) {
			n.ResourceVersion = "2"
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Unix(110, 0))
		}, false},
		{"Ready turns False", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, true},
		{"a condition added", func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "GPUHealthy", Status: corev1.ConditionTrue})
		}, true},
		{"a label", func(n *corev1.Node) { n.Labels["berth.dev/reserved"] = "g" }, true},
		{"a taint", func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}} }, true},
		{"cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }, true},
		{"allocatable GPUs", func(n *corev1.Node) { n.Status.Allocatable[berthv1alpha1.GPUResource] = resource.MustParse("7") }, true},
		{"managed fields only", func(n *corev1.Node) { n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kwok"}} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, n := base.DeepCopy(), base.DeepCopy()
			tc.change(n)
			before := n.DeepCopy()
			if got := nodeChanged(o, n); got != tc.want {
				t.Errorf("nodeChanged = %v, want %v", got, tc.want)
			}
			if !equality.Semantic.DeepEqual(before, n) || !equality.Semantic.DeepEqual(base, o) {
				t.Error("nodeChanged modified a node it compared")
			}
		})
	}
}
