package admission

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

// TestGangConsumingAProvisioningRequestUsesItsBookedRoom: Kueue admitted a gang's job on a
// ProvisioningRequest whose seats (controllers/provisioningrequest) fill two nodes. The gang's
// members consume the request: the seats' room is theirs, as the gang's own seats' would be, so
// the gang is admitted onto those nodes at once — not judged short of room and sent to ask
// Karpenter for more while the request's seats are on their way out. A gang that does not
// consume the request finds the nodes full.
func TestGangConsumingAProvisioningRequestUsesItsBookedRoom(t *testing.T) {
	for _, consume := range []bool{true, false} {
		t.Run(fmt.Sprintf("consumes=%v", consume), func(t *testing.T) {
			var objs []client.Object
			for i := range 2 {
				node := fmt.Sprintf("n%d", i)
				objs = append(objs, builders.Node(node).GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj())
				seat := builders.Pod(fmt.Sprintf("train-1-abc-%d", i), "berth-system").GPU(8).Node(node).Phase(corev1.PodRunning).Obj()
				seat.Labels[berthv1alpha1.SeatForProvisioningRequestLabel] = "uid-pr"
				seat.Annotations = map[string]string{berthv1alpha1.SeatForProvisioningRequestAnnotation: "ml/train-1"}
				seat.UID = types.UID(fmt.Sprintf("uid-seat-%d", i))
				objs = append(objs, seat)
			}
			pg := builders.PodGroup("g", "ml").MinMember(2).Obj()
			pg.UID = "uid-g"
			objs = append(objs, pg)
			for i := range 2 {
				p := builders.Pod(fmt.Sprintf("g-%d", i), "ml").Member("g").Gated().GPU(8).WithReleaseTerm("g").Obj()
				p.UID = types.UID(fmt.Sprintf("uid-%d", i))
				if consume {
					p.Annotations = map[string]string{autoscalingv1.ProvisioningRequestPodAnnotationKey: "train-1"}
				}
				objs = append(objs, p)
			}
			r, base, _, _, _ := budgetHarness(t, objs...)
			cycleOnce(t, r)
			var got berthv1alpha1.PodGroup
			if err := base.Get(context.Background(), client.ObjectKeyFromObject(pg), &got); err != nil {
				t.Fatal(err)
			}
			if admitted := len(got.Status.Assignments) == 2; admitted != consume {
				t.Errorf("admitted %v (assignments %v), want %v", admitted, got.Status.Assignments, consume)
			}
		})
	}
}
