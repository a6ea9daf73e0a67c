package admission

import (
	corev1 "k8s.io/api/core/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
)

// attemptGrowth decides whether gang g's running attempt, whose seats are seats, must grow, and the
// shortfall its seats are made from if so (ensureSeats makes seat i from Missing[i]).
//
// An attempt grows when room it counted on is gone: the free room it reserved for members
// without a seat went to another gang (whose pending seat kube-scheduler put there, or which
// was admitted there), so more members lack a place than it holds seats for; without more seats
// it would wait out its timeout for room that will not come back. That is judged on the
// snapshot the attempt was sized on — booting nodes count as room, as capacity on its way did
// then — so capacity still booting never reads as room lost. It never holds more seats than the
// gang has members.
//
// Members that awaited seats (a consumed ProvisioningRequest's, on no node yet) stand for are
// not missing (standInFor).
//
// The shortfall keeps each existing seat's member at its seat's index and puts the members no
// seat holds room for after them, so a new seat takes the shape (resources, volumes, claims) of
// a member that has none; it stays in the domain the attempt's seats are confined to, and when
// the room left is only in another domain the attempt does not grow (its seats there could
// never join the others).
func attemptGrowth(booting *scheduling.Snapshot, gang scheduling.Gang, g *berthv1alpha1.PodGroup, seats, awaited []*corev1.Pod) (scheduling.Shortfall, int, bool) {
	p, topology := g.Status.Provisioning, g.Spec.Topology
	held := int(p.Seats)
	sf, ok := scheduling.ComputeShortfall(booting, gang)
	sf, _ = standInFor(sf, awaited)
	want := min(len(sf.Missing), len(gang.Members))
	if !ok || want <= held {
		return scheduling.Shortfall{}, 0, false
	}
	domain := seatDomain(seats, topology)
	if domain == "" {
		// Seats that only prefer a domain (no member had a place) were placed there: new
		// seats go with them.
		if hint := seatHint(seats, topology); hint != "" {
			if sf.Domain != "" && sf.Domain != hint {
				return scheduling.Shortfall{}, 0, false
			}
			sf.Hint = hint
		}
	}
	if topology != nil && domain != "" && sf.Domain != "" && sf.Domain != domain {
		return scheduling.Shortfall{}, 0, false
	}
	if domain != "" {
		sf.Domain = domain
	}
	byName := map[string]*corev1.Pod{}
	for _, m := range gang.Members {
		byName[m.Name] = m
	}
	volumeOf := map[string]scheduling.VolumeTopology{}
	for i, m := range sf.Missing {
		if i < len(sf.Volumes) {
			volumeOf[m.Name] = sf.Volumes[i]
		}
	}
	// Existing seats by index, then the missing members no seat names, then the rest.
	ordered := make([]*corev1.Pod, held)
	index := map[string]int{}
	for i := range held {
		index[seatName(g, p.Attempt, i)] = i
	}
	covered := map[string]bool{}
	for _, s := range seats {
		i, mine := index[s.Name]
		if m := byName[s.Annotations[berthv1alpha1.SeatForMemberAnnotation]]; mine && m != nil {
			ordered[i], covered[m.Name] = m, true
		}
	}
	var rest []*corev1.Pod
	for _, m := range sf.Missing {
		if !covered[m.Name] {
			rest = append(rest, m)
		}
	}
	for _, m := range sf.Missing {
		if covered[m.Name] {
			rest = append(rest, m)
		}
	}
	for i := range ordered {
		if ordered[i] == nil && len(rest) > 0 {
			ordered[i], rest = rest[0], rest[1:]
		}
	}
	for len(ordered) < want && len(rest) > 0 {
		ordered, rest = append(ordered, rest[0]), rest[1:]
	}
	out := scheduling.Shortfall{Nodes: sf.Nodes, Domain: sf.Domain, Hint: sf.Hint}
	for _, m := range ordered {
		if m == nil {
			return scheduling.Shortfall{}, 0, false // a seat whose member is gone: nothing to grow from
		}
		out.Missing = append(out.Missing, m)
		out.Volumes = append(out.Volumes, volumeOf[m.Name])
	}
	return out, len(ordered), len(ordered) > held
}

// seatDomain is the topology domain the seats are confined to (the value their required node
// affinity names for the gang's topology key), "" when none is.
func seatDomain(seats []*corev1.Pod, topology *berthv1alpha1.TopologySpec) string {
	if topology == nil {
		return ""
	}
	for _, s := range seats {
		if s.Spec.Affinity == nil || s.Spec.Affinity.NodeAffinity == nil || s.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			continue
		}
		for _, t := range s.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, e := range t.MatchExpressions {
				if e.Key == topology.RequiredKey && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
					return e.Values[0]
				}
			}
		}
	}
	return ""
}

// seatHint is the topology domain the seats prefer (the value of their first preferred
// node-affinity term on the gang's topology key, preferDomain's), "" when none does.
func seatHint(seats []*corev1.Pod, topology *berthv1alpha1.TopologySpec) string {
	if topology == nil {
		return ""
	}
	for _, s := range seats {
		if s.Spec.Affinity == nil || s.Spec.Affinity.NodeAffinity == nil {
			continue
		}
		for _, t := range s.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			for _, e := range t.Preference.MatchExpressions {
				if e.Key == topology.RequiredKey && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
					return e.Values[0]
				}
			}
			break // only the first term is the hint
		}
	}
	return ""
}
