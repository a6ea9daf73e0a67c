// Package warmseats keeps warm seats for ScaledObjects whose berth trigger holds part of its
// burst headroom as seats (warmSeats): seat pods with one replica's requests, placement and
// serving images, at the lowest priority, so that Karpenter keeps a node up for each with the
// image pulled. A scale-up's replica preempts a seat and pays only its model load; the keeper
// then creates the seat again, and Karpenter launches its node. The scaler's policy decides
// how many seats a fleet should have (scaler.Decision.WarmSeats); the Keeper observes the
// seats there are, decides what to change with the pure Decide, and acts.
package warmseats

import (
	"cmp"
	"slices"
	"time"
)

// Seat is what the keeper knows of one warm seat pod.
type Seat struct {
	// Name and UID identify the pod (the UID is the delete's precondition).
	Name, UID string
	// Template is the hash of the pod template the seat was made from.
	Template string
	// Node is the node it is bound to ("" while pending).
	Node string
	// Ready is whether it runs: its node is up and the serving image pulled.
	Ready bool
	// Created is when it was created.
	Created time.Time
	// Dead is whether it failed or finished (a kubelet rejected or evicted it): it holds no
	// node and nothing deletes it but the keeper.
	Dead bool
	// DoNotDisrupt is whether it carries karpenter.sh/do-not-disrupt, as seats made before
	// warm seats were disruptable did: the annotation is taken off (Plan.Unprotect), so that it
	// does not keep its node from drift and expiry for as long as it lives.
	DoNotDisrupt bool
}

// Plan is what the keeper does for one fleet: create that many seats, delete those, and take
// karpenter.sh/do-not-disrupt off those it keeps that carry it (Unprotect).
type Plan struct {
	Create    int
	Delete    []Seat
	Unprotect []Seat
}

// Decide is the plan that brings seats to want seats of template — at least want, deleting
// none but stale ones, when atLeast (the scaler holds its decision). Seats of another template
// go (they pull another image), and dead ones (they hold no node: replaced); of those of
// template, pending ones go before bound ones and the newest before the oldest, so the seats
// whose nodes are up stay. Seats being deleted are not in seats: a seat preempted by a replica is
// created again at once. Seats kept that carry do-not-disrupt (an older berth made them so) are
// unprotected in place: replacing them launched a node for each new seat while the old one
// terminated.
func Decide(want int, atLeast bool, template string, seats []Seat) Plan {
	var p Plan
	var current []Seat
	for _, s := range seats {
		if s.Template != template || s.Dead {
			p.Delete = append(p.Delete, s)
			continue
		}
		current = append(current, s)
	}
	if len(current) < want || atLeast {
		p.Create = max(0, want-len(current))
		p.Unprotect = protected(current)
		return p
	}
	// Keep the bound ones, oldest first; delete from the end.
	slices.SortStableFunc(current, func(a, b Seat) int {
		if (a.Node == "") != (b.Node == "") {
			if a.Node == "" {
				return 1
			}
			return -1
		}
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	p.Delete = append(p.Delete, current[want:]...)
	p.Unprotect = protected(current[:want])
	return p
}

// protected are the seats that carry karpenter.sh/do-not-disrupt.
func protected(seats []Seat) []Seat {
	var out []Seat
	for _, s := range seats {
		if s.DoNotDisrupt {
			out = append(out, s)
		}
	}
	return out
}
