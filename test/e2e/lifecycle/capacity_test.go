package lifecycle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// provisionGang creates a PodGroup of n members from tpl (as plain pods) and waits until they
// run, counting the seats berth creates for it and checking they live in berth's namespace.
func provisionGang(t *testing.T, ns, name string, n int, tpl corev1.PodTemplateSpec) {
	t.Helper()
	ctx := context.Background()
	pg := builders.PodGroup(name, ns).MinMember(int32(n)).Obj()
	create(t, pg)
	for i := range n {
		p := &corev1.Pod{ObjectMeta: *tpl.ObjectMeta.DeepCopy(), Spec: *tpl.Spec.DeepCopy()}
		p.Name, p.Namespace = fmt.Sprintf("%s-%d", name, i), ns
		create(t, p)
	}
	maxSeats := 0
	rigtest.Eventually(t, 3*time.Minute, 100*time.Millisecond, fmt.Sprintf("%d members of %s running", n, name), func(ctx context.Context) (bool, string, error) {
		ss, err := seats(ctx, string(pg.UID))
		if err != nil {
			return false, "", err
		}
		maxSeats = max(maxSeats, len(ss))
		ms, err := members(ctx, ns, name)
		if err != nil {
			return false, "", err
		}
		up, detail := running(ms)
		g, err := getGroup(ctx, ns, name)
		if err != nil {
			return false, "", err
		}
		return up == n, fmt.Sprintf("%s; %d seats; %s %v", detail, len(ss), g.Status.Phase, conditionSummary(g)), nil
	})
	if maxSeats != n {
		t.Errorf("saw at most %d seats, want %d: the gang's capacity came from Karpenter through seats", maxSeats, n)
	}
	var tenant corev1.PodList
	if err := rigtest.Current().Client.List(ctx, &tenant); err != nil {
		t.Fatal(err)
	}
	for _, p := range tenant.Items {
		if p.Labels[berthv1alpha1.SeatOfLabel] != "" && p.Namespace == ns {
			t.Errorf("seat %s lives in the tenant's namespace", p.Name)
		}
	}
}

// TestHugepagesGangProvisions: EFA training members request hugepages-2Mi, EFA devices and 8
// GPUs each; their seats carry limits equal to requests for every resource the API does not let
// a pod overcommit, so the API accepts them, and Karpenter provisions the gang's p5 nodes.
func TestHugepagesGangProvisions(t *testing.T) {
	ns := namespace(t, "efa")
	tpl := podTemplate("efa", "p5", "", container(8, corev1.ResourceList{
		"hugepages-2Mi":                 resource.MustParse("4Gi"),
		berthv1alpha1.EFAResource:       resource.MustParse("32"),
		corev1.ResourceMemory:           resource.MustParse("64Gi"),
		corev1.ResourceCPU:              resource.MustParse("16"),
		corev1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
	}))
	tpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
	provisionGang(t, ns, "efa", 2, tpl)
}

// TestQuotaEqualToTheGangsNeed: a namespace whose GPU quota is exactly what its gang asks for
// still gets the gang provisioned: the members use the quota, their seats live in berth's own
// namespace and use none of it.
func TestQuotaEqualToTheGangsNeed(t *testing.T) {
	ns := namespace(t, "quota")
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "gpus", Namespace: ns},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests." + berthv1alpha1.GPUResource: resource.MustParse("16")}},
	}
	create(t, quota)
	rigtest.Eventually(t, 30*time.Second, 100*time.Millisecond, "the quota counted", func(ctx context.Context) (bool, string, error) {
		err := rigtest.Current().Client.Get(ctx, client.ObjectKeyFromObject(quota), quota)
		return len(quota.Status.Hard) > 0, "", err
	})
	tpl := podTemplate("quota", "p4d", "", container(8, nil))
	tpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
	provisionGang(t, ns, "quota", 2, tpl)
}
