package why

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

func TestExplain(t *testing.T) {
	group := func(min int32, phase berthv1alpha1.PodGroupPhase, reason, msg string) *berthv1alpha1.PodGroup {
		g := builders.PodGroup("train", "team-a").MinMember(min).NodePool("h100").Obj()
		g.Status.Phase = phase
		if reason != "" {
			g.Status.Conditions = []metav1.Condition{{Type: berthv1alpha1.ConditionScheduled, Status: metav1.ConditionFalse, Reason: reason, Message: msg}}
		}
		return g
	}
	gated := func(name string) corev1.Pod {
		return *builders.Pod(name, "team-a").Member("train").Gated().GPU(8).Obj()
	}
	held := gated("held-0")
	held.Spec.SchedulingGates = append(held.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "kueue.x-k8s.io/admission"})
	stuck := *builders.Pod("stuck-0", "team-a").Member("train").Pinned("gpu-3").GPU(8).Obj()
	stuck.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/4 nodes are available: 1 Insufficient nvidia.com/gpu."}}
	running := *builders.Pod("run-0", "team-a").Member("train").Node("gpu-1").Phase(corev1.PodRunning).GPU(8).Obj()
	pool := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "h100"}}
	pool.Spec.Limits = karpv1.Limits{"nvidia.com/gpu": resource.MustParse("32")}
	pool.Status.Resources = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("24")}
	quota := corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}, Status: corev1.ResourceQuotaStatus{
		Hard: corev1.ResourceList{"requests.nvidia.com/gpu": resource.MustParse("16"), "pods": resource.MustParse("100")},
		Used: corev1.ResourceList{"requests.nvidia.com/gpu": resource.MustParse("8"), "pods": resource.MustParse("3")}}}
	for _, tc := range []struct {
		name   string
		in     Inputs
		states map[string]string
		want   []string // substrings the summary must contain, in order
	}{
		{"members missing", Inputs{Group: group(4, "", berthv1alpha1.ReasonWaitingForMembers, "3 of 4 members exist"), Members: []corev1.Pod{gated("m0"), gated("m1"), gated("m2")}},
			map[string]string{"m0": StateGated}, []string{"waiting for members: 3 of minMember 4 exist", "WaitingForMembers: 3 of 4 members exist"}},
		{"held by a queue", Inputs{Group: group(2, "", berthv1alpha1.ReasonHeldByOtherScheduler, "1 of 2 members are held"), Members: []corev1.Pod{gated("m0"), held}},
			map[string]string{"held-0": StateHeld}, []string{"1 member(s) are held by another scheduler's gate"}},
		{"NodePool limit and quota short", Inputs{Group: group(2, berthv1alpha1.PodGroupProvisioning, berthv1alpha1.ReasonWaitingForCapacity, "the gang does not fit existing nodes"),
			Members: []corev1.Pod{gated("m0"), gated("m1")}, NodePool: pool, Quotas: []corev1.ResourceQuota{quota}},
			nil, []string{"WaitingForCapacity", "NodePool h100: 24 of its 32 GPU limit are in use; the 16 GPUs still waiting would pass it", "ResourceQuota gpus: 8 used of 16 for requests.nvidia.com/gpu"}},
		{"a quota the quota controller has not counted yet: its spec stands", Inputs{Group: group(2, "", berthv1alpha1.ReasonUnschedulable, "no room"),
			Members: []corev1.Pod{gated("m0"), gated("m1")}, Quotas: []corev1.ResourceQuota{{ObjectMeta: metav1.ObjectMeta{Name: "new"},
				Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.nvidia.com/gpu": resource.MustParse("8")}}}}},
			nil, []string{"ResourceQuota new: 0 used of 8 for requests.nvidia.com/gpu"}},
		{"released but not bound", Inputs{Group: group(2, berthv1alpha1.PodGroupAdmitted, "", ""), Members: []corev1.Pod{running, stuck}},
			map[string]string{"stuck-0": StatePinned, "run-0": StateRunning}, []string{"member stuck-0 was released onto gpu-3 but kube-scheduler does not bind it: Unschedulable: 0/4 nodes are available"}},
		{"running", Inputs{Group: group(1, berthv1alpha1.PodGroupRunning, "", ""), Members: []corev1.Pod{running}},
			nil, []string{"the gang is running: nothing to wait for"}},
		{"members claiming devices", Inputs{Group: group(2, "", berthv1alpha1.ReasonUnschedulable, "1 of 2 members fit; no eligible node has the devices member d-0's resource claims ask for free"),
			Members: []corev1.Pod{
				*builders.Pod("d-0", "team-a").Member("train").Gated().ClaimFromTemplate("gpus", "h100x8").Obj(),
				*builders.Pod("d-1", "team-a").Member("train").Gated().ClaimFromTemplate("gpus", "h100x8").ClaimCreated("gpus", "d-1-gpus-x").SharedClaim("ckpt", "ckpt").Obj(),
			},
			Claims: []resourcev1.ResourceClaim{*builders.Claim("d-1-gpus-x", "team-a", 8, ""), *builders.AllocatedClaim("ckpt", "team-a", "gpu-3", 0)}},
			nil, []string{"no eligible node has the devices", "2 waiting member(s) claim devices through DRA"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := Explain(tc.in)
			got := strings.Join(ex.Summary, "\n")
			at := 0
			for _, w := range tc.want {
				i := strings.Index(got[at:], w)
				if i < 0 {
					t.Fatalf("summary lacks %q (in order):\n%s", w, got)
				}
				at += i + len(w)
			}
			for _, m := range ex.Members {
				if want, ok := tc.states[m.Name]; ok && m.State != want {
					t.Errorf("member %s: state %s, want %s", m.Name, m.State, want)
				}
			}
		})
	}
}

func TestMemberDevices(t *testing.T) {
	claims := map[string]*resourcev1.ResourceClaim{
		"d-1-gpus-x": builders.Claim("d-1-gpus-x", "team-a", 8, ""),
		"ckpt":       builders.AllocatedClaim("ckpt", "team-a", "gpu-3", 0),
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{"a claim its template has not made yet", builders.Pod("d-0", "team-a").ClaimFromTemplate("gpus", "h100x8").Obj(),
			[]string{"gpus: to be made from ResourceClaimTemplate h100x8 (kube-controller-manager makes it for the pod)"}},
		{"made and not allocated; a shared one allocated", builders.Pod("d-1", "team-a").ClaimFromTemplate("gpus", "h100x8").ClaimCreated("gpus", "d-1-gpus-x").SharedClaim("ckpt", "ckpt").Obj(),
			[]string{"gpus: ResourceClaim d-1-gpus-x, asking for 8 of gpu.nvidia.com, not allocated yet (kube-scheduler allocates it when it binds the member)",
				"ckpt: ResourceClaim ckpt, allocated: 1 device(s) of gpu.nvidia.com on node gpu-3"}},
		{"a named claim that does not exist", builders.Pod("d-2", "team-a").SharedClaim("gpus", "nope").Obj(),
			[]string{"gpus: ResourceClaim nope does not exist"}},
		{"no claims", builders.Pod("p", "team-a").GPU(1).Obj(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, memberDevices(tc.pod, claims)); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
		})
	}
}
