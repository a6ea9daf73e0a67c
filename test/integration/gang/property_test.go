package gang_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// PropertySeedEnv and PropertyRoundsEnv set TestRandomGangsThroughTheController's seed (default
// 1) and number of rounds (default 1); `make fuzz` runs many rounds from a random seed.
const (
	PropertySeedEnv   = "BERTH_PROPERTY_SEED"
	PropertyRoundsEnv = "BERTH_PROPERTY_ROUNDS"
)

func envInt(t *testing.T, key string, def int64) int64 {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return n
}

// randomGang is one generated gang: its PodGroup and members.
type randomGang struct {
	group   *berthv1alpha1.PodGroup
	members []*corev1.Pod
}

// generateGang makes a valid PodGroup spec with random policies and topology, and members of
// random shapes: GPUs, hostname anti-affinity, pod affinity of their own, a toleration.
func generateGang(rng *rand.Rand, ns, name string) randomGang {
	minMember := 1 + rng.Intn(6)
	spec := berthv1alpha1.PodGroupSpec{
		MinMember:         int32(minMember),
		OnScheduleTimeout: []berthv1alpha1.ScheduleTimeoutPolicy{"", berthv1alpha1.ScheduleTimeoutRetry, berthv1alpha1.ScheduleTimeoutFail}[rng.Intn(3)],
		OnMemberLoss:      []berthv1alpha1.MemberLossPolicy{"", berthv1alpha1.MemberLossReplace, berthv1alpha1.MemberLossRestartGang}[rng.Intn(3)],
	}
	if rng.Intn(3) == 0 {
		spec.ScheduleTimeoutSeconds = ptr.To([]int32{0, 5, 600}[rng.Intn(3)])
	}
	if rng.Intn(3) == 0 {
		spec.Topology = &berthv1alpha1.TopologySpec{RequiredKey: corev1.LabelTopologyZone}
	}
	g := builders.PodGroup(name, ns).Obj()
	g.Spec = spec
	gpus := []int{0, 1, 2, 4, 8}[rng.Intn(5)]
	shape := rng.Intn(6)
	members := make([]*corev1.Pod, minMember+rng.Intn(2)) // sometimes one more than minMember
	for i := range members {
		b := builders.Pod(fmt.Sprintf("%s-%d", name, i), ns).Member(name).GPU(gpus)
		switch shape {
		case 0:
			b = b.PodAntiAffinity(corev1.LabelHostname, berthv1alpha1.PodGroupLabel, name)
		case 1:
			b = b.PodAffinity(corev1.LabelOSStable, berthv1alpha1.PodGroupLabel, name)
		case 2:
			b = b.Tolerate("dedicated", "training", corev1.TaintEffectNoSchedule)
		}
		members[i] = b.Obj()
	}
	return randomGang{group: g, members: members}
}

// TestRandomGangsThroughTheController sends random valid PodGroups with random members through
// the running controller, webhook and kube-scheduler, and checks what must hold whatever the
// input: every gang says where it stands (a Scheduled condition) within seconds; the GPUs berth
// promised on a node never exceed what it has; every member bound is bound where its gang's
// promise put it and no gang is partly released; a gang berth did not admit has no member
// bound; an admitted gang is bound whole.
func TestRandomGangsThroughTheController(t *testing.T) {
	seed := envInt(t, PropertySeedEnv, 1)
	rounds := envInt(t, PropertyRoundsEnv, 1)
	for round := range rounds {
		t.Run(fmt.Sprintf("seed %d round %d", seed, round), func(t *testing.T) {
			randomRound(t, rand.New(rand.NewSource(seed+round)))
		})
	}
}

func randomRound(t *testing.T, rng *rand.Rand) {
	t.Helper()
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	prefix := strings.TrimPrefix(ns, "gang-")
	allocatable := map[string]int{}
	for i := range 6 {
		labels := map[string]string{corev1.LabelTopologyZone: []string{"zone-a", "zone-b"}[i%2]}
		name := fmt.Sprintf("prop-%s-%d", prefix, i)
		kwokNode(t, name, 8, labels)
		allocatable[name] = 8
	}
	rec := rigtest.WatchReleases(t, ns)
	var gangs []randomGang
	for i := range 12 {
		rg := generateGang(rng, ns, fmt.Sprintf("r%02d", i))
		if err := c.Create(ctx, rg.group); err != nil {
			t.Fatalf("creating PodGroup %s %+v: %v", rg.group.Name, rg.group.Spec, err)
		}
		for _, m := range rg.members {
			if err := c.Create(ctx, m); err != nil {
				t.Fatalf("creating member %s: %v", m.Name, err)
			}
		}
		gangs = append(gangs, rg)
	}
	// Gangs of exactly minMember members are released in one go (extras of an elastic gang
	// join later, one by one).
	exact := map[string]bool{}
	for _, rg := range gangs {
		exact[rg.group.Name] = len(rg.members) == int(rg.group.Spec.MinMember)
	}
	// Every gang says where it stands.
	rigtest.Eventually(t, 30*time.Second, 250*time.Millisecond, "every gang has a Scheduled condition", func(ctx context.Context) (bool, string, error) {
		var list berthv1alpha1.PodGroupList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		var silent []string
		for _, g := range list.Items {
			if meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionScheduled) == nil {
				silent = append(silent, g.Name)
			}
		}
		return len(silent) == 0, "silent: " + strings.Join(silent, ", "), nil
	})
	// Admitted gangs end bound whole, where they were promised; the others have nothing bound.
	whole := map[string][]string{}
	rigtest.Eventually(t, time.Minute, 500*time.Millisecond, "admitted gangs bound, the others not at all", func(ctx context.Context) (bool, string, error) {
		var list berthv1alpha1.PodGroupList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		podOf := map[string]*corev1.Pod{}
		for i := range pods.Items {
			podOf[pods.Items[i].Name] = &pods.Items[i]
		}
		promised := map[string]int{}
		var problems []string
		clear(whole)
		for _, g := range list.Items {
			for _, a := range g.Status.Assignments {
				p := podOf[a.Pod]
				if p == nil {
					continue
				}
				promised[a.Node] += int(gpusOf(p))
				if p.Spec.NodeName == "" {
					problems = append(problems, fmt.Sprintf("%s/%s promised %s, not bound", g.Name, a.Pod, a.Node))
				} else if p.Spec.NodeName != a.Node {
					t.Errorf("%s/%s bound to %s, promised %s", g.Name, a.Pod, p.Spec.NodeName, a.Node)
				}
				if exact[g.Name] {
					whole[g.Name] = append(whole[g.Name], a.Pod)
				}
			}
			if len(g.Status.Assignments) == 0 {
				for _, p := range pods.Items {
					if p.Labels[berthv1alpha1.PodGroupLabel] == g.Name && p.Spec.NodeName != "" {
						t.Errorf("member %s of gang %s, which berth did not admit, is bound to %s", p.Name, g.Name, p.Spec.NodeName)
					}
				}
			}
		}
		for node, n := range promised {
			if n > allocatable[node] {
				t.Errorf("node %s: %d GPUs promised, %d there", node, n, allocatable[node])
			}
		}
		return len(problems) == 0, strings.Join(problems, "; "), nil
	})
	rec.CheckWhole(t, whole)
	var list berthv1alpha1.PodGroupList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for _, g := range list.Items {
		if len(g.Status.Assignments) > 0 {
			admitted++
		}
	}
	t.Logf("%d of %d random gangs admitted (%d checked for a whole release)", admitted, len(gangs), len(whole))
}

// gpusOf is the pod's nvidia.com/gpu request.
func gpusOf(p *corev1.Pod) int64 {
	var n int64
	for _, c := range p.Spec.Containers {
		q := c.Resources.Requests[corev1.ResourceName(berthv1alpha1.GPUResource)]
		n += q.Value()
	}
	return n
}
