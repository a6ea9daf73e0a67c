package simulate

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/berth-dev/berth/scheduling"
)

// Berth's retry backoff after a withdrawn attempt (controllers/podgroup/admission): 30 s,
// doubling per failure in a row, at most 10 minutes.
const (
	berthBackoffBase = 30 * time.Second
	berthBackoffMax  = 10 * time.Minute
)

func berthBackoff(failures int) time.Duration {
	d := berthBackoffBase
	for i := 1; i < failures && d < berthBackoffMax; i++ {
		d *= 2
	}
	return min(d, berthBackoffMax)
}

// snapshot is the cluster as berth's admission sees it: Ready nodes (others unavailable), the
// members and seats bound to them, and the nodes other gangs have reserved unavailable; booting
// counts nodes that are still launching as available, with the pods nominated to them.
func (s *trainSim) snapshot(self *tjob, booting bool) *scheduling.Snapshot {
	reserved := map[*tnode]bool{}
	for _, j := range s.jobs {
		if j != self {
			for _, n := range j.reserved {
				reserved[n] = true
			}
		}
	}
	objs := make([]*corev1.Node, 0, len(s.nodes))
	var pods []scheduling.PodOnNode
	unavailable := map[string]string{}
	for _, n := range s.nodes {
		objs = append(objs, n.obj)
		switch {
		case s.now < n.ready && !booting:
			unavailable[n.name] = "not Ready"
		case reserved[n]:
			unavailable[n.name] = "reserved for another gang"
		}
		for _, p := range n.pods {
			if !p.seat || p.job != self {
				pods = append(pods, scheduling.PodOnNode{Pod: p.obj, Node: n.name})
			}
		}
		if booting && s.now < n.ready {
			for _, p := range n.nominated {
				pods = append(pods, scheduling.PodOnNode{Pod: p.obj, Node: n.name})
			}
		}
	}
	return scheduling.NewSnapshot(objs, pods, unavailable)
}

// admitBerth is berth's admission cycle: gangs in arrival order; one that fits (its own seats
// discounted) is admitted whole onto the nodes placement chose; one that does not gets (or
// keeps) a capacity attempt with seats for its shortfall, withdrawn at the provisioning
// timeout with the unused nodes it launched.
func (s *trainSim) admitBerth() {
	for _, j := range s.jobs {
		if j.running {
			continue
		}
		members := make([]*corev1.Pod, 0, len(j.members))
		var missing []*tpod
		for _, m := range j.members {
			if m.node == nil {
				members = append(members, m.obj)
				missing = append(missing, m)
			}
		}
		if len(missing) == 0 {
			continue
		}
		gang := scheduling.Gang{Members: members}
		snap := s.snapshot(j, false)
		if r := scheduling.Place(snap, gang); r.Fits() {
			if isSet(j.attemptStart) {
				j.failures = 0 // the attempt got its capacity
			}
			s.deleteSeats(j)
			j.reserved = nil
			byName := map[string]*tnode{}
			for _, n := range s.nodes {
				byName[n.name] = n
			}
			for i, a := range r.Assignments {
				s.bind(missing[i], byName[a.Node])
			}
			continue
		}
		s.provisionBerth(j, gang, snap)
	}
}

// provisionBerth is admission's provision step for a gang that does not fit.
func (s *trainSim) provisionBerth(j *tjob, gang scheduling.Gang, snap *scheduling.Snapshot) {
	active := isSet(j.attemptStart)
	switch {
	case active && s.now-j.attemptStart >= s.c.ProvisioningTimeout:
		s.withdraw(j)
		return
	case active:
		return
	case isSet(j.retryAt) && s.now < j.retryAt:
		return
	}
	sf, ok := scheduling.ComputeShortfall(s.snapshot(j, true), gang)
	if !ok || len(sf.Missing) == 0 {
		return // capacity for every member is booting
	}
	if base, ok := scheduling.ComputeShortfall(snap, gang); ok {
		j.reserved = j.reserved[:0]
		for _, name := range base.Nodes {
			for _, n := range s.nodes {
				if n.name == name {
					j.reserved = append(j.reserved, n)
				}
			}
		}
	}
	j.attempt++
	j.attemptStart = s.now
	for i := range sf.Missing {
		j.seats = append(j.seats, s.newPod(j, j.GPUsPerMember, true, i))
	}
}

// withdraw ends an attempt that ran out of time: the nodes launched for its seats that no
// other pod uses go, its seats go, and the next attempt waits out the backoff.
func (s *trainSim) withdraw(j *tjob) {
	ours := map[*tnode]bool{}
	for _, p := range j.seats {
		if p.node != nil {
			ours[p.node] = true
		}
		if p.nominated != nil {
			ours[p.nominated] = true
		}
	}
	s.deleteSeats(j)
	s.dropNodes(func(n *tnode) bool {
		return ours[n] && len(n.pods) == 0 && len(n.nominated) == 0
	})
	j.reserved = nil
	j.failures++
	j.retryAt = s.now + berthBackoff(j.failures)
	j.attemptStart = noTime
}

func (s *trainSim) deleteSeats(j *tjob) {
	for _, p := range j.seats {
		s.unbind(p)
	}
	j.seats = nil
	j.attemptStart = noTime
}
