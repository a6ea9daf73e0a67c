package scaler

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// snapshotVersion is the layout MarshalBinary writes; UnmarshalBinary refuses any other (a
// model from another layout is learned again, never misread).
const snapshotVersion = 1

// modelSnapshot is a FleetModel as MarshalBinary writes it. The demand's history keeps each
// point's time and rate only — its baseline, slope and stretch are what record makes of them
// and the points a baseline window before it, made again on the way back — but for the points
// of the history's first baseline window, whose own windows reached into points already
// dropped: those are kept whole. A day of 15-second points is about 200 KB of JSON; a history
// of more than maxSnapshotPoints points (a fleet evaluated every few seconds) is thinned to
// about that many.
type modelSnapshot struct {
	Version   int           `json:"version"`
	Capacity  float64       `json:"capacity"`
	GoodMax   float64       `json:"goodMax"`
	ColdStart time.Duration `json:"coldStart"`
	Last      time.Time     `json:"last"`
	Inherited int           `json:"inherited"`
	// Start is the first demand point's time; Head the points of the first baselineWindow
	// whole; At the later points' offsets from Start, in nanoseconds, and Rate their rates.
	Start time.Time   `json:"start"`
	Head  []headPoint `json:"head,omitempty"`
	At    []int64     `json:"at"`
	Rate  []float64   `json:"rate"`
	Stats struct {
		At          time.Time     `json:"at"`
		Horizon     time.Duration `json:"horizon"`
		Q           float64       `json:"quantile"`
		Max         float64       `json:"maxHeadroom"`
		Persistence float64       `json:"persistence"`
		Headroom    float64       `json:"headroom"`
		Falling     float64       `json:"falling"`
		Learning    bool          `json:"learning"`
		Base        float64       `json:"base"`
	} `json:"stats"`
	Floor struct {
		TTFT     float64   `json:"ttft"`
		Start    time.Time `json:"start"`
		Requests float64   `json:"requests"`
		Misses   float64   `json:"misses"`
		Queued   bool      `json:"queued"`
		Blocks   []struct {
			At       time.Time `json:"at"`
			Share    float64   `json:"share"`
			Requests float64   `json:"requests"`
		} `json:"blocks"`
	} `json:"floor"`
}

// headPoint is a demandPoint whole, its times as offsets from the snapshot's Start, in
// nanoseconds.
type headPoint struct {
	At     int64   `json:"at"`
	Rate   float64 `json:"rate"`
	Base   float64 `json:"base"`
	Slope  float64 `json:"slope"`
	Fitted int64   `json:"fitted"`
	Since  int64   `json:"since"`
}

// MarshalBinary writes the model — what one replica carries, the start-up, the demand's
// history and what it says, the miss floor — so that a scaler restarted, or another replica
// KEDA turns to, goes on from it instead of learning the fleet again (docs/scaler.md).
func (m *FleetModel) MarshalBinary() ([]byte, error) {
	s := modelSnapshot{Version: snapshotVersion, Capacity: m.Capacity, GoodMax: m.GoodMax, ColdStart: m.ColdStart,
		Last: m.last, Inherited: m.inherited}
	if len(m.demand) > 0 {
		s.Start = m.demand[0].at
		s.At, s.Rate = make([]int64, 0, min(len(m.demand), maxSnapshotPoints)), make([]float64, 0, min(len(m.demand), maxSnapshotPoints))
		// Thinned to a point every span/maxSnapshotPoints at most, once the history holds a
		// quarter more than that (a day at 15 s is never thinned): the baselines made again
		// from them are medians of fewer points, the same level.
		every := time.Duration(0)
		if n := len(m.demand); n > maxSnapshotPoints+maxSnapshotPoints/4 {
			every = m.demand[n-1].at.Sub(s.Start) / maxSnapshotPoints
		}
		var kept time.Time
		for i, p := range m.demand {
			off := int64(p.at.Sub(s.Start))
			switch {
			case p.at.Sub(s.Start) < baselineWindow:
				s.Head = append(s.Head, headPoint{At: off, Rate: p.rate, Base: p.base, Slope: p.slope, Fitted: int64(p.fitted), Since: int64(p.since.Sub(s.Start))})
				kept = p.at
				continue
			case i < len(m.demand)-1 && p.at.Sub(kept) < every:
				continue
			}
			s.At, s.Rate, kept = append(s.At, off), append(s.Rate, p.rate), p.at
		}
	}
	st := m.stats
	s.Stats.At, s.Stats.Horizon, s.Stats.Q, s.Stats.Max = st.at, st.horizon, st.quantile, st.maxHeadroom
	s.Stats.Persistence, s.Stats.Headroom, s.Stats.Falling, s.Stats.Learning, s.Stats.Base = st.persistence, st.headroom, st.falling, st.learning, st.base
	f := m.floor
	s.Floor.TTFT, s.Floor.Start, s.Floor.Requests, s.Floor.Misses, s.Floor.Queued = f.ttft, f.start, f.requests, f.misses, f.queued
	for _, b := range f.blocks {
		s.Floor.Blocks = append(s.Floor.Blocks, struct {
			At       time.Time `json:"at"`
			Share    float64   `json:"share"`
			Requests float64   `json:"requests"`
		}{b.at, b.share, b.requests})
	}
	data, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("writing the fleet model: %w", err)
	}
	return data, nil
}

// ErrSnapshot is the error of a model snapshot that cannot be read back.
var ErrSnapshot = errors.New("unreadable fleet model snapshot")

// UnmarshalBinary reads a model MarshalBinary wrote into m, which it replaces whole. A
// snapshot of another layout, or one whose history is not in time order or holds a rate that
// is not a rate, is refused (ErrSnapshot) and m is left as it was.
func (m *FleetModel) UnmarshalBinary(data []byte) error {
	var s modelSnapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	if s.Version != snapshotVersion {
		return fmt.Errorf("%w: layout %d, this scaler reads %d", ErrSnapshot, s.Version, snapshotVersion)
	}
	if len(s.At) != len(s.Rate) {
		return fmt.Errorf("%w: %d times for %d rates", ErrSnapshot, len(s.At), len(s.Rate))
	}
	if !(s.Capacity >= 0) || !(s.GoodMax >= 0) || s.ColdStart < 0 || !(s.Stats.Headroom >= 0) || !(s.Stats.Falling >= 0) {
		return fmt.Errorf("%w: a capacity, start-up or headroom that is negative or not a number", ErrSnapshot)
	}
	out := FleetModel{Capacity: s.Capacity, GoodMax: s.GoodMax, ColdStart: s.ColdStart, last: s.Last, inherited: s.Inherited}
	prev := int64(-1)
	check := func(i int, off int64, rate float64) error {
		if off <= prev || off < 0 {
			return fmt.Errorf("%w: demand point %d is not after the one before it", ErrSnapshot, i)
		}
		if !(rate >= 0) || rate > maxSnapshotRate {
			return fmt.Errorf("%w: demand point %d has rate %v", ErrSnapshot, i, rate)
		}
		prev = off
		return nil
	}
	for i, h := range s.Head {
		if err := check(i, h.At, h.Rate); err != nil {
			return err
		}
		if math.IsNaN(h.Base) || math.IsInf(h.Base, 0) || math.IsNaN(h.Slope) || math.IsInf(h.Slope, 0) {
			return fmt.Errorf("%w: demand point %d has baseline %v and slope %v", ErrSnapshot, i, h.Base, h.Slope)
		}
		out.demand = append(out.demand, demandPoint{at: s.Start.Add(time.Duration(h.At)), rate: h.Rate, base: h.Base, slope: h.Slope,
			fitted: time.Duration(h.Fitted), since: s.Start.Add(time.Duration(h.Since))})
	}
	for i, off := range s.At {
		if err := check(len(s.Head)+i, off, s.Rate[i]); err != nil {
			return err
		}
		out.record(s.Start.Add(time.Duration(off)), s.Rate[i])
	}
	out.stats = demandStats{at: s.Stats.At, horizon: s.Stats.Horizon, quantile: s.Stats.Q, maxHeadroom: s.Stats.Max,
		persistence: s.Stats.Persistence, headroom: s.Stats.Headroom, falling: s.Stats.Falling, learning: s.Stats.Learning, base: s.Stats.Base}
	out.floor = missFloor{ttft: s.Floor.TTFT, start: s.Floor.Start, requests: s.Floor.Requests, misses: s.Floor.Misses, queued: s.Floor.Queued}
	for _, b := range s.Floor.Blocks {
		out.floor.blocks = append(out.floor.blocks, floorBlock{at: b.At, share: b.Share, requests: b.Requests})
	}
	*m = out
	return nil
}

// LastLesson is when the model last learned (zero: never): of two models of one fleet, the
// later's is the one to keep.
func (m *FleetModel) LastLesson() time.Time { return m.last }

// maxSnapshotPoints is the most demand points a snapshot keeps: a day at KEDA's default 15 s
// (a fleet evaluated more often is thinned to it), about 200 KB of JSON.
const maxSnapshotPoints = 5760

// maxSnapshotRate bounds a snapshot's demand: a million requests a second is no fleet's.
const maxSnapshotRate = 1e6
