package nativegang

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/events"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	base := func(mod func(*state)) state {
		s := state{now: now, minCount: 4, unplaced: true, pending: []string{"m0", "m1", "m2", "m3"},
			timeout: 10 * time.Minute, retryAfter: time.Minute}
		if mod != nil {
			mod(&s)
		}
		return s
	}
	asked := now.Add(-time.Minute)
	for _, tc := range []struct {
		name  string
		s     state
		check func(t *testing.T, p plan)
	}{
		{"kube-scheduler cannot place the whole gang: a seat per pending member, one batch", base(nil), func(t *testing.T, p plan) {
			t.Helper()
			if !slices.Equal(p.seatsFor, []string{"m0", "m1", "m2", "m3"}) || p.eventReason != events.ReasonCapacityRequested {
				t.Errorf("plan %+v", p)
			}
		}},
		{"claims no seat can carry: no seats, and the gang's Events say why", base(func(s *state) { s.claimsBlocked = "member m0 names ResourceClaim x" }), func(t *testing.T, p plan) {
			t.Helper()
			if len(p.seatsFor) > 0 || !p.warn || p.eventReason != events.ReasonCapacityNotRequested || p.requeue != time.Minute ||
				!strings.Contains(p.eventNote, "member m0 names ResourceClaim x") {
				t.Errorf("plan %+v", p)
			}
		}},
		{"Unschedulable: Karpenter provisions for the members; berth only keeps the clock", base(func(s *state) { s.unplacedReason = "Unschedulable" }), func(t *testing.T, p plan) {
			t.Helper()
			if !p.watch || len(p.seatsFor) > 0 || p.requeue != 10*time.Minute {
				t.Errorf("plan %+v", p)
			}
		}},
		{"watched attempt not placed in time: withdraw what Karpenter launched for it", base(func(s *state) {
			s.unplacedReason, s.requestedAt, s.handedOver = "Unschedulable", now.Add(-10*time.Minute), now.Add(-10*time.Minute)
		}), func(t *testing.T, p plan) {
			t.Helper()
			if !p.reclaim || p.watch {
				t.Errorf("plan %+v", p)
			}
		}},
		{"the gang cycle has not judged yet: nothing", base(func(s *state) { s.unplaced = false }), func(t *testing.T, p plan) {
			t.Helper()
			if len(p.seatsFor) > 0 || p.eventReason != "" {
				t.Errorf("plan %+v", p)
			}
		}},
		{"not every member exists yet: nothing", base(func(s *state) { s.pending = s.pending[:3] }), func(t *testing.T, p plan) {
			t.Helper()
			if len(p.seatsFor) > 0 {
				t.Errorf("plan %+v", p)
			}
		}},
		{"some seats have no node launched yet: wait", base(func(s *state) { s.seats, s.seatsLaunched, s.requestedAt = 4, 3, asked }), func(t *testing.T, p plan) {
			t.Helper()
			if len(p.seatsFor) > 0 || p.handOver || p.reclaim || p.requeue != 9*time.Minute {
				t.Errorf("plan %+v", p)
			}
		}},
		{"every seat's node launched: the seats give way", base(func(s *state) { s.seats, s.seatsLaunched, s.requestedAt = 4, 4, asked }), func(t *testing.T, p plan) {
			t.Helper()
			if !p.handOver || p.eventReason != events.ReasonCapacityHandedOver || p.requeue != 9*time.Minute || !p.holdUntil.Equal(asked.Add(10*time.Minute)) || p.release {
				t.Errorf("plan %+v", p)
			}
		}},
		{"handed over, nodes coming up: no second request", base(func(s *state) { s.requestedAt, s.handedOver = asked, asked.Add(5*time.Second) }), func(t *testing.T, p plan) {
			t.Helper()
			if len(p.seatsFor) > 0 || p.reclaim || p.requeue != 9*time.Minute {
				t.Errorf("plan %+v", p)
			}
		}},
		{"seats still waiting at the timeout: withdraw, reclaim, retry later", base(func(s *state) { s.seats, s.seatsLaunched, s.requestedAt = 4, 2, now.Add(-10*time.Minute) }), func(t *testing.T, p plan) {
			t.Helper()
			if !p.reclaim || !p.release || !p.warn || !p.retryAt.Equal(now.Add(time.Minute)) || p.eventReason != events.ReasonCapacityNotProvisioned {
				t.Errorf("plan %+v", p)
			}
		}},
		{"handed over but still unplaced at the timeout: withdraw", base(func(s *state) {
			s.requestedAt, s.handedOver = now.Add(-11*time.Minute), now.Add(-10*time.Minute)
		}), func(t *testing.T, p plan) {
			t.Helper()
			if !p.reclaim || len(p.seatsFor) > 0 {
				t.Errorf("plan %+v", p)
			}
		}},
		{"withdrawn: back off, then ask again", base(func(s *state) {
			s.requestedAt, s.handedOver, s.retryAt = now.Add(-11*time.Minute), now.Add(-10*time.Minute), now.Add(20*time.Second)
		}), func(t *testing.T, p plan) {
			t.Helper()
			if p.reclaim || len(p.seatsFor) > 0 || p.requeue != 20*time.Second {
				t.Errorf("plan %+v", p)
			}
		}},
		{"backoff over: a new attempt", base(func(s *state) {
			s.requestedAt, s.handedOver, s.retryAt = now.Add(-12*time.Minute), now.Add(-11*time.Minute), now.Add(-time.Second)
		}), func(t *testing.T, p plan) {
			t.Helper()
			if len(p.seatsFor) != 4 {
				t.Errorf("plan %+v", p)
			}
		}},
		{"placed: leftover seats go; disruptionMode all protects the bound members", base(func(s *state) {
			s.placed, s.unplaced, s.pending, s.bound, s.seats = true, false, nil, []string{"m0", "m1", "m2", "m3"}, 1
			s.protect, s.unprotected = true, []string{"m2"}
		}), func(t *testing.T, p plan) {
			t.Helper()
			if !p.clear || !p.release || !slices.Equal(p.protect, []string{"m2"}) || len(p.seatsFor) > 0 {
				t.Errorf("plan %+v", p)
			}
		}},
		{"placed, the cache not showing every bind yet: the room stays held", base(func(s *state) {
			s.placed, s.unplaced, s.pending, s.bound = true, false, []string{"m3"}, []string{"m0", "m1", "m2"}
		}), func(t *testing.T, p plan) {
			t.Helper()
			if p.release || len(p.seatsFor) > 0 {
				t.Errorf("plan %+v", p)
			}
		}},
		{"disruptionMode single: no do-not-disrupt", base(func(s *state) { s.unprotected = []string{"m0"} }), func(t *testing.T, p plan) {
			t.Helper()
			if len(p.protect) > 0 {
				t.Errorf("plan %+v", p)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, decide(tc.s)) })
	}
}
