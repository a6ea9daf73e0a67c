package scheduling_test

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// randomCluster builds a random snapshot input and gang from a seed.
func randomCluster(seed int64, nNodes, gangSize int) ([]*corev1.Node, []scheduling.PodOnNode, map[string]string, scheduling.Gang, bool) {
	rng := rand.New(rand.NewSource(seed))
	zones := []string{"a", "b", "c"}
	var nodes []*corev1.Node
	var pods []scheduling.PodOnNode
	unavailable := map[string]string{}
	for i := range nNodes {
		name := fmt.Sprintf("n%03d", i)
		b := builders.Node(name).GPU([]int{0, 1, 4, 8}[rng.Intn(4)]).Zone(zones[rng.Intn(3)]).
			Allocatable(corev1.ResourceCPU, fmt.Sprint(4+rng.Intn(60))).Allocatable(corev1.ResourcePods, fmt.Sprint(1+rng.Intn(12)))
		if rng.Intn(5) == 0 {
			b.Taint("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule)
		}
		if rng.Intn(10) == 0 {
			b.Unschedulable()
		}
		if rng.Intn(10) == 0 {
			unavailable[name] = "unhealthy"
		}
		nodes = append(nodes, b.Obj())
		for j := range rng.Intn(4) {
			ns := "other"
			if rng.Intn(3) == 0 {
				ns = "ml" // where inter-pod rules of and against the members apply
			}
			p := builders.Pod(fmt.Sprintf("%s-x%d", name, j), ns).GPU(rng.Intn(3)).Request(corev1.ResourceCPU, fmt.Sprint(rng.Intn(8)))
			if rng.Intn(4) == 0 {
				p.Phase(corev1.PodSucceeded)
			}
			if rng.Intn(6) == 0 {
				p.Label("job", "g")
			}
			if rng.Intn(4) == 0 {
				p.Label("app", "web")
			}
			if rng.Intn(8) == 0 {
				p.PodAntiAffinity([]string{corev1.LabelHostname, corev1.LabelTopologyZone}[rng.Intn(2)], "job", "g")
			}
			pods = append(pods, scheduling.PodOnNode{Pod: p.Obj(), Node: name})
		}
	}
	g := scheduling.Gang{}
	if rng.Intn(2) == 0 {
		g.TopologyKey = corev1.LabelTopologyZone
	}
	rules := rng.Intn(8)
	spreadOut := rules == 0
	for i := range gangSize {
		p := builders.Pod(fmt.Sprintf("m%02d", i), "ml").Member("g").Label("job", "g").GPU(rng.Intn(9)).
			Request(corev1.ResourceCPU, fmt.Sprint(rng.Intn(16)))
		if rng.Intn(2) == 0 {
			p.Tolerate("nvidia.com/gpu", "", corev1.TaintEffectNoSchedule)
		}
		if rng.Intn(6) == 0 {
			p.NodeSelector(corev1.LabelTopologyZone, zones[rng.Intn(3)])
		}
		switch rules {
		case 0:
			p.PodAntiAffinity(corev1.LabelHostname, "job", "g")
		case 1:
			p.PodAffinity(corev1.LabelTopologyZone, "job", "g")
		case 2:
			p.PodAntiAffinity(corev1.LabelTopologyZone, "app", "web")
		case 3:
			p.Spread(corev1.LabelTopologyZone, 1, "job", "g")
		case 4:
			p.PodAffinity(corev1.LabelHostname, "app", "web")
		}
		g.Members = append(g.Members, p.Obj())
	}
	return nodes, pods, unavailable, g, spreadOut
}

// checkFeasible verifies a placement independently of the placement code: every member's node
// is usable, tolerated, selected, and no node is over-committed.
func checkFeasible(t *testing.T, nodes []*corev1.Node, pods []scheduling.PodOnNode, unavailable map[string]string, g scheduling.Gang, oneOnEach bool, r scheduling.Result) {
	t.Helper()
	byName := map[string]*corev1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	used := map[string]corev1.ResourceList{}
	add := func(node string, p *corev1.Pod) {
		if used[node] == nil {
			used[node] = corev1.ResourceList{}
		}
		for _, c := range p.Spec.Containers {
			for k, q := range c.Resources.Requests {
				cur := used[node][k]
				cur.Add(q)
				used[node][k] = cur
			}
		}
		cur := used[node][corev1.ResourcePods]
		cur.Add(resource.MustParse("1"))
		used[node][corev1.ResourcePods] = cur
	}
	for _, pn := range pods {
		if pn.Pod.Status.Phase != corev1.PodSucceeded && pn.Pod.Status.Phase != corev1.PodFailed {
			add(pn.Node, pn.Pod)
		}
	}
	if len(r.Assignments) != len(g.Members) {
		t.Fatalf("%d assignments for %d members", len(r.Assignments), len(g.Members))
	}
	domain := ""
	seen := map[string]bool{}
	for i, a := range r.Assignments {
		m := g.Members[i]
		n, ok := byName[a.Node]
		if !ok {
			t.Fatalf("member %s on unknown node %s", m.Name, a.Node)
		}
		if unavailable[n.Name] != "" || n.Spec.Unschedulable {
			t.Errorf("member %s on unusable node %s", m.Name, n.Name)
		}
		for _, taint := range n.Spec.Taints {
			tolerated := false
			for _, tol := range m.Spec.Tolerations {
				if tol.Key == taint.Key && (tol.Operator == corev1.TolerationOpExists || tol.Value == taint.Value) && (tol.Effect == "" || tol.Effect == taint.Effect) {
					tolerated = true
				}
			}
			if !tolerated {
				t.Errorf("member %s on node %s with untolerated taint %s", m.Name, n.Name, taint.Key)
			}
		}
		for k, v := range m.Spec.NodeSelector {
			if n.Labels[k] != v {
				t.Errorf("member %s on node %s without %s=%s", m.Name, n.Name, k, v)
			}
		}
		if g.TopologyKey != "" {
			d := n.Labels[g.TopologyKey]
			if domain == "" {
				domain = d
			}
			if d != domain {
				t.Errorf("member %s in %s %s, gang in %s", m.Name, g.TopologyKey, d, domain)
			}
		}
		if oneOnEach && seen[n.Name] {
			t.Errorf("two members on %s despite anti-affinity", n.Name)
		}
		seen[n.Name] = true
		add(n.Name, m)
	}
	checkInterPod(t, byName, pods, g, r)
	for node, u := range used {
		alloc := byName[node].Status.Allocatable
		for k, q := range u {
			if q.IsZero() {
				continue
			}
			a, ok := alloc[k]
			if !ok || q.Cmp(a) > 0 {
				// kube-scheduler only checks what the pod asks for: a problem when a member
				// placed here requests this resource.
				for i, as := range r.Assignments {
					if as.Node != node {
						continue
					}
					if req := g.Members[i].Spec.Containers[0].Resources.Requests[k]; !req.IsZero() || k == corev1.ResourcePods {
						t.Errorf("node %s over-committed on %s: %s used of %s", node, k, q.String(), a.String())
						break
					}
				}
			}
		}
	}
}

// FuzzPlace checks that every placement returned for a random snapshot is feasible.
func FuzzPlace(f *testing.F) {
	for _, seed := range []int64{1, 2, 3, 42, 1000} {
		f.Add(seed, uint8(12), uint8(8))
	}
	f.Fuzz(func(t *testing.T, seed int64, nNodes, gangSize uint8) {
		nodes, pods, unavailable, g, oneOnEach := randomCluster(seed, 1+int(nNodes)%40, 1+int(gangSize)%24)
		r := scheduling.Place(scheduling.NewSnapshot(nodes, pods, unavailable), g)
		samePlacement(t, seed, r, scheduling.PlaceUnexplained(scheduling.NewSnapshot(nodes, pods, unavailable), g), g)
		if !r.Fits() {
			if r.Reason == "" {
				t.Fatal("no fit without a reason")
			}
			return
		}
		checkFeasible(t, nodes, pods, unavailable, g, oneOnEach, r)
	})
}

// TestRandomPlacementsAreFeasible runs many fuzz inputs as a plain test so `go test` covers them.
func TestRandomPlacementsAreFeasible(t *testing.T) {
	const runs = 1000
	fits, withRules := 0, 0
	for seed := int64(0); seed < runs; seed++ {
		nodes, pods, unavailable, g, oneOnEach := randomCluster(seed, 1+int(seed*7)%40, 1+int(seed*13)%24)
		r := scheduling.Place(scheduling.NewSnapshot(nodes, pods, unavailable), g)
		samePlacement(t, seed, r, scheduling.PlaceUnexplained(scheduling.NewSnapshot(nodes, pods, unavailable), g), g)
		if r.Fits() {
			fits++
			if g.Members[0].Spec.Affinity != nil || len(g.Members[0].Spec.TopologySpreadConstraints) > 0 {
				withRules++
			}
			checkFeasible(t, nodes, pods, unavailable, g, oneOnEach, r)
		} else if r.Reason == "" {
			t.Fatalf("seed %d: no fit without a reason", seed)
		}
	}
	if fits < runs/20 || withRules < runs/40 {
		t.Errorf("only %d of %d random gangs fit, %d with inter-pod rules; the generator no longer exercises placements", fits, runs, withRules)
	}
	t.Logf("%d of %d random gangs fit, %d with inter-pod rules", fits, runs, withRules)
}

// checkInterPod verifies, independently of the placement code, that the final state honours
// every required inter-pod rule that concerns a member: no pod in a member's domain matches one
// of its anti-affinity terms, no pod's anti-affinity term matches a member in that pod's
// domain, and each of a member's affinity terms is met by a pod in its domain (itself, when it
// matches its own term: the first of a group that wants to be together).
func checkInterPod(t *testing.T, nodes map[string]*corev1.Node, pods []scheduling.PodOnNode, g scheduling.Gang, r scheduling.Result) {
	t.Helper()
	var all []scheduling.PodOnNode
	for _, pn := range pods {
		if pn.Pod.Status.Phase != corev1.PodSucceeded && pn.Pod.Status.Phase != corev1.PodFailed {
			all = append(all, pn)
		}
	}
	for i, a := range r.Assignments {
		all = append(all, scheduling.PodOnNode{Pod: g.Members[i], Node: a.Node})
	}
	sameDomain := func(a, b, key string) bool {
		va, ok := nodes[a].Labels[key]
		vb, ok2 := nodes[b].Labels[key]
		return ok && ok2 && va == vb
	}
	matches := func(owner *corev1.Pod, term corev1.PodAffinityTerm, p *corev1.Pod) bool {
		namespaces := term.Namespaces
		if len(namespaces) == 0 {
			namespaces = []string{owner.Namespace}
		}
		sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(namespaces, p.Namespace) && sel.Matches(labels.Set(p.Labels))
	}
	for i, a := range r.Assignments {
		m := g.Members[i]
		for _, o := range all {
			if o.Pod == m {
				continue
			}
			if aff := m.Spec.Affinity; aff != nil && aff.PodAntiAffinity != nil {
				for _, term := range aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
					if sameDomain(a.Node, o.Node, term.TopologyKey) && matches(m, term, o.Pod) {
						t.Errorf("member %s on %s: %s on %s is in its %s and matches its anti-affinity", m.Name, a.Node, o.Pod.Name, o.Node, term.TopologyKey)
					}
				}
			}
			if aff := o.Pod.Spec.Affinity; aff != nil && aff.PodAntiAffinity != nil {
				for _, term := range aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
					if sameDomain(a.Node, o.Node, term.TopologyKey) && matches(o.Pod, term, m) {
						t.Errorf("member %s on %s is in the %s of %s on %s, whose anti-affinity it matches", m.Name, a.Node, term.TopologyKey, o.Pod.Name, o.Node)
					}
				}
			}
		}
		if aff := m.Spec.Affinity; aff != nil && aff.PodAffinity != nil {
			for _, term := range aff.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				met := slices.ContainsFunc(all, func(o scheduling.PodOnNode) bool {
					return sameDomain(a.Node, o.Node, term.TopologyKey) && matches(m, term, o.Pod)
				})
				if !met {
					t.Errorf("member %s on %s: no pod in its %s matches its affinity", m.Name, a.Node, term.TopologyKey)
				}
			}
		}
	}
}

// samePlacement checks that PlaceUnexplained (whose nodes are judged only where there is room)
// places g as Place (which judges every node to explain a gang that does not fit) does.
func samePlacement(t *testing.T, seed int64, explained, quiet scheduling.Result, g scheduling.Gang) {
	t.Helper()
	if explained.Fits() != quiet.Fits() || explained.Placeable != quiet.Placeable || !slices.Equal(explained.Assignments, quiet.Assignments) ||
		len(explained.Unplaced(g)) != len(quiet.Unplaced(g)) {
		t.Fatalf("seed %d: Place and PlaceUnexplained differ: fits %v/%v, placeable %d/%d, %v / %v",
			seed, explained.Fits(), quiet.Fits(), explained.Placeable, quiet.Placeable, explained.Assignments, quiet.Assignments)
	}
}
