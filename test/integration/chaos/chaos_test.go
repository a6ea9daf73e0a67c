// Package chaos_test kills berth's controller with SIGKILL at random moments while 100 gangs are
// admitted, and checks what a restart must never leave behind: a gang with a member bound
// before another's gate was removed (partly released), a gang never admitted, a release
// barrier or reservation label on a node.
package chaos_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

var berth *rigtest.BerthProcess

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartCluster(ctx, r, rig.KwokOptions{}); err != nil {
			return err
		}
		var err error
		berth, err = rigtest.NewBerthProcess(ctx, r)
		return err
	})
}

const (
	chaosNodes = 32
	chaosGangs = 100
)

// TestKilledAtRandomNoGangIsPartlyReleased: 100 gangs of 2 or 4 one-GPU members arrive over
// about half a minute on 32 nodes of 8 GPUs (room for all of them); the controller is killed
// with SIGKILL every 0.5–3 s and started again. Every gang ends bound whole, none ever had a
// member bound before the last of its gates was removed (by the API server's own ordering of
// writes), and no node keeps a release barrier or a reservation label, no member a key label.
// Every fourth gang has pod affinity of its own, so the node barrier holds it instead of a key.
func TestKilledAtRandomNoGangIsPartlyReleased(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	c := r.Client
	ns := rigtest.Namespace(t, "chaos")
	seed := rigtest.Seed(t)
	rng := rand.New(rand.NewSource(seed))
	for i := range chaosNodes {
		n := builders.Node(fmt.Sprintf("chaos-%02d", i)).GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj()
		n.Annotations = map[string]string{berthv1alpha1.KwokNodeAnnotation: "fake"}
		n.Status.Conditions = nil
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	rec := rigtest.WatchReleases(t, ns)
	if err := berth.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = berth.Stop() })

	// The killer: SIGKILL at random moments, then a new process, until the gangs are in.
	stopKilling := berth.KillAtRandom(ctx, seed+1, 500*time.Millisecond, 3*time.Second)
	want := 0
	sizes := make([]int, chaosGangs)
	for i := range sizes {
		sizes[i] = 2
		if i%5 == 0 {
			sizes[i] = 4 // 20 gangs of 4, 80 of 2: 240 GPUs of the 256 there are
		}
	}
	for i, size := range sizes {
		name := fmt.Sprintf("g%03d", i)
		if err := c.Create(ctx, builders.PodGroup(name, ns).MinMember(int32(size)).Obj()); err != nil {
			t.Fatal(err)
		}
		for j := range size {
			b := builders.Pod(fmt.Sprintf("%s-%d", name, j), ns).Member(name).GPU(1)
			if i%4 == 1 {
				// Pod affinity of their own: the gate gives these no release term, so the
				// node barrier holds them.
				b = b.PodAffinity(corev1.LabelOSStable, berthv1alpha1.PodGroupLabel, name)
			}
			if err := rigtest.CreateRetrying(ctx, c, b.Obj()); err != nil {
				t.Fatal(err)
			}
		}
		want += size
		time.Sleep(time.Duration(rng.Intn(400)) * time.Millisecond)
	}
	kills, killErr := stopKilling()
	if killErr != nil {
		t.Fatal(killErr)
	}
	t.Logf("%d kills while %d gangs (%d members) were created", kills, chaosGangs, want)
	if kills < 5 {
		t.Errorf("only %d kills: the run did not exercise restarts", kills)
	}

	rigtest.Eventually(t, 3*time.Minute, time.Second, "every member bound", func(ctx context.Context) (bool, string, error) {
		bound, unbound, err := rigtest.CountBound(ctx, c, ns)
		return bound == want, fmt.Sprintf("%d of %d bound; unbound: %s", bound, want, unbound), err
	})
	gangs := map[string][]string{}
	for i, size := range sizes {
		for j := range size {
			gangs[fmt.Sprintf("g%03d", i)] = append(gangs[fmt.Sprintf("g%03d", i)], fmt.Sprintf("g%03d-%d", i, j))
		}
	}
	t.Logf("%d of %d gangs partly released", rec.CheckWhole(t, gangs), len(gangs))
	rigtest.Eventually(t, 30*time.Second, 500*time.Millisecond, "no barrier, reservation label or reservation's do-not-disrupt left on a node", func(ctx context.Context) (bool, string, error) {
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes); err != nil {
			return false, "", err
		}
		var left []string
		for _, n := range nodes.Items {
			for k := range n.Labels {
				if strings.HasPrefix(k, berthv1alpha1.BarrierLabelPrefix) || strings.HasPrefix(k, berthv1alpha1.ReservationLabelPrefix) {
					left = append(left, n.Name+":"+k)
				}
			}
			if n.Annotations[berthv1alpha1.ProtectedByAnnotation] == berthv1alpha1.ProtectedByBerth {
				left = append(left, n.Name+": berth's do-not-disrupt")
			}
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	})
	rigtest.Eventually(t, 30*time.Second, 500*time.Millisecond, "no key label left on a member", func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		var left, term []string
		for _, p := range pods.Items {
			if _, ok := p.Labels[berthv1alpha1.ReleaseLabel]; ok {
				left = append(left, p.Name)
			}
			if _, ok := berthv1alpha1.ReleaseGroup(&p); ok {
				term = append(term, p.Name)
			}
		}
		if len(term) == 0 {
			return false, "no member has the release term: the gate did not give it", nil
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	})
}
