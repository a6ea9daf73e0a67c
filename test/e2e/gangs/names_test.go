package gangs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestSameGangNameInTwoNamespaces: two teams' gangs named "train", created at once, both
// needing new H100 nodes. Their seats live in berth's one namespace: named by the gang's name
// alone they collided, the second gang found the first's seats, created none, launched no
// batch and said capacity was requested. Each gets its own seats and is admitted whole in its
// first provisioning attempt.
func TestSameGangNameInTwoNamespaces(t *testing.T) {
	c := rigtest.Current().Client
	// H100 capacity an earlier test left (the chaos test's) would admit both without an attempt.
	clearPool(t, rig.GPUNodePoolName("h100"))
	var groups []*berthv1alpha1.PodGroup
	for _, team := range []string{"team-a", "team-b"} {
		pg := builders.PodGroup("train", namespace(t, team)).MinMember(2).NodePool(rig.GPUNodePoolName("h100")).Obj()
		groups = append(groups, pg)
	}
	for _, pg := range groups {
		createGang(t, pg, 2, 8, "p5")
	}
	seatsSeen := map[string]bool{}
	rigtest.Eventually(t, 3*time.Minute, 100*time.Millisecond, "both gangs running, each in its first attempt", func(ctx context.Context) (bool, string, error) {
		var seats corev1.PodList
		if err := c.List(ctx, &seats, client.HasLabels{berthv1alpha1.SeatOfLabel}); err != nil {
			return false, "", err
		}
		for _, s := range seats.Items {
			seatsSeen[s.Name] = true
		}
		done := true
		var detail []string
		for _, pg := range groups {
			g, err := getGroup(ctx, pg)
			if err != nil {
				return false, "", err
			}
			attempt := int32(0)
			if g.Status.Provisioning != nil {
				attempt = g.Status.Provisioning.Attempt
			}
			if attempt > 1 {
				return false, "", fmt.Errorf("%s/%s needed attempt %d: %s", g.Namespace, g.Name, attempt, g.Status.Provisioning.LastFailure)
			}
			detail = append(detail, fmt.Sprintf("%s/%s %s (attempt %d, %d running)", g.Namespace, g.Name, g.Status.Phase, attempt, g.Status.Members.Running))
			done = done && g.Status.Phase == berthv1alpha1.PodGroupRunning && attempt == 1
		}
		return done, fmt.Sprintf("%v; seats seen %d", detail, len(seatsSeen)), nil
	})
	if len(seatsSeen) < 4 {
		t.Errorf("%d seats seen, want 2 per gang: %v", len(seatsSeen), seatsSeen)
	}
	for _, pg := range groups {
		if err := c.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(pg.Namespace), client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
}
