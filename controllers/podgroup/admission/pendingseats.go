package admission

import (
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/ledger"
	"github.com/berth-dev/berth/scheduling"
)

// Seats kube-scheduler has not bound yet.
//
// A seat holds room from the moment it exists, not from the moment it binds: Karpenter launched
// a node for it, and kube-scheduler will put it there (or on any Ready node with room) as soon
// as it can. The ledger counts bound pods and pinned ones; an unbound seat names no node, so it
// counted against nothing, and what kept its room from other gangs was only the order of the
// cycle — the seats' own gang, looked at first, reserving the room its members would use. That
// failed whenever the seats' gang was not looked at first: a younger gang of higher priority, a
// gang whose step had just failed and backed off, a gang whose status write lost a race after a
// restart. Seen on the rig: a controller killed just after creating a gang's seats, its
// successor admitted a younger gang that had asked for no capacity (the booting node read as
// free) onto the node launched for the older gang's seats.

// seatOwner is one owner's seats that are not bound yet (unboundSeats).
type seatOwner struct {
	// key names the owner (seatOwnerKey); oldest is its oldest seat's creation.
	key    string
	oldest int64
	// seats are its seats by name; topologyKey is the domain its gang's seats share.
	seats       []*corev1.Pod
	topologyKey string
}

// unboundSeats are the seats berth created that are not bound yet (nor pinned: the ledger
// counts those), by owner, oldest owner first.
func (cy *cycle) unboundSeats(pods []*corev1.Pod) []*seatOwner {
	var owners map[string]*seatOwner
	for _, p := range pods {
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed ||
			p.Annotations[berthv1alpha1.PinnedNodeAnnotation] != "" || !ledger.IsSeat(p) {
			continue
		}
		k := seatOwnerKey(p)
		if owners == nil {
			owners = map[string]*seatOwner{}
		}
		o := owners[k]
		if o == nil {
			o = &seatOwner{key: k, oldest: p.CreationTimestamp.UnixNano()}
			if uid := p.Labels[berthv1alpha1.SeatOfLabel]; uid != "" {
				if g := cy.groupByUID(types.UID(uid)); g != nil && g.Spec.Topology != nil {
					o.topologyKey = g.Spec.Topology.RequiredKey
				}
			}
			owners[k] = o
		}
		o.oldest = min(o.oldest, p.CreationTimestamp.UnixNano())
		o.seats = append(o.seats, p)
	}
	order := make([]*seatOwner, 0, len(owners))
	for _, o := range owners {
		sort.Slice(o.seats, func(i, j int) bool { return o.seats[i].Name < o.seats[j].Name })
		order = append(order, o)
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].oldest != order[j].oldest {
			return order[i].oldest < order[j].oldest
		}
		return order[i].key < order[j].key
	})
	return order
}

// holdUnboundSeats counts every seat not bound yet (cy.pending) against the room kube-scheduler
// will give it, before any gang is looked at: each owner's seats placed together, as far as
// the nodes allow, oldest owner first — in the cycle's snapshot (Ready nodes: a seat's node
// turned Ready a moment before kube-scheduler binds it there), and on the same nodes in the
// booting one, where the seats that found no Ready node are placed on the nodes coming up (what
// Karpenter launched for them). Placed on their own there, seats counted on a Ready node in
// one snapshot sat on a booting node in the other, and a gang judging what it lacks read the
// Ready node as free. A gang places into its own seats' room as into its bound seats'
// (gangView.holding).
func (cy *cycle) holdUnboundSeats() {
	for _, o := range cy.pending {
		gang := scheduling.Gang{Members: o.seats, TopologyKey: o.topologyKey}
		res := scheduling.PlaceUnexplained(cy.snap, gang)
		rest := res.Unplaced(gang)
		if len(rest) < len(o.seats) {
			if cy.onReady == nil {
				cy.onReady = map[*corev1.Pod]bool{}
			}
			for _, s := range o.seats {
				cy.onReady[s] = !slices.Contains(rest, s)
			}
		}
		if res.Fits() {
			_ = cy.assume(o.seats, res) // placed in cy.snap just now: its nodes are there
			continue
		}
		cy.reservePlaced(gang, res)
		if len(rest) > 0 {
			cy.keepBooting(func(s *scheduling.Snapshot) {
				s.ReservePartial(scheduling.Gang{Members: rest, TopologyKey: o.topologyKey})
			})
		}
	}
}

// counted are the seats of held that count in the cycle's snapshot: the bound ones, the pinned
// ones (the ledger counts them on their node), and those not bound yet that holdUnboundSeats
// counted on a Ready node. Leaving the others out of Snapshot.Without changes nothing and
// spares a copy of the snapshot per gang per cycle: on a cluster out of room, every gang
// waiting for Karpenter holds seats counted nowhere.
func (cy *cycle) counted(held []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, s := range held {
		if s.Spec.NodeName != "" || s.Annotations[berthv1alpha1.PinnedNodeAnnotation] != "" || cy.onReady[s] {
			out = append(out, s)
		}
	}
	return out
}

// seatsUseClaims reports whether some seat not bound yet has resource claims.
func seatsUseClaims(owners []*seatOwner) bool {
	for _, o := range owners {
		for _, s := range o.seats {
			if len(s.Spec.ResourceClaims) > 0 {
				return true
			}
		}
	}
	return false
}

// seatOwnerKey names what a seat holds room for: its seat label and value, in its namespace.
func seatOwnerKey(p *corev1.Pod) string {
	for _, k := range []string{berthv1alpha1.SeatOfLabel, berthv1alpha1.SeatForProvisioningRequestLabel, berthv1alpha1.SeatForNativeGroupLabel, berthv1alpha1.WarmSeatForLabel} {
		if v, ok := p.Labels[k]; ok {
			return p.Namespace + "/" + k + "=" + v
		}
	}
	return p.Namespace + "/" + p.Name
}

// unbound are the seats kube-scheduler has not bound yet. Where they are counted in the booting
// snapshot (holdUnboundSeats) is a guess — any node coming up they fit on, first come — so a
// gang judging its own attempt on that snapshot leaves them out: the capacity they stand for is
// on its way, wherever it lands, and counting it on a node the gang's members could use made
// an attempt that had counted a booting node as room grow a seat for it every cycle.
func unbound(seats []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, s := range seats {
		if s.Spec.NodeName == "" {
			out = append(out, s)
		}
	}
	return out
}

// countingBooting records that g's capacity request judged what it lacks counting nodes coming
// up (cycle.countsBooting).
func (cy *cycle) countingBooting(g *berthv1alpha1.PodGroup) {
	if cy.countsBooting == nil {
		cy.countsBooting = map[types.UID]bool{}
	}
	cy.countsBooting[g.UID] = true
}
