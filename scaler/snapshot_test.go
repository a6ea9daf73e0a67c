package scaler

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// learnedModel is a model fed span of evaluations every 15 s: a swinging demand with a burst
// every hour, its fleet's windows meeting the SLO but for a queue in the first bursts (a
// capacity learned), prompts missing the objective now and then (a miss floor).
func learnedModel(t *testing.T, span time.Duration) (*FleetModel, SLO, time.Time) {
	t.Helper()
	slo := trig(t, headroomTrigger).SLO
	m := &FleetModel{}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	for at := time.Duration(0); at <= span; at += 15 * time.Second {
		now = start.Add(at)
		rate := 8 + 4*math.Sin(at.Hours())
		if at%time.Hour < 2*time.Minute {
			rate *= 3
		}
		ready := 20
		windows := make([]ReplicaWindow, ready)
		for i := range windows {
			w := window(rate*60/float64(ready), 40, 39, 0)
			if at < 2*time.Minute {
				w = window(rate*60/float64(ready), 40, 10, 5) // swamped: the first lesson
			}
			w.End = now
			windows[i] = w
		}
		o := Observation{Ready: ready, Sampled: ready, Arrivals: rate, ArrivalsSampled: ready, Windows: windows,
			TTFTP95: math.NaN(), ITLP95: math.NaN(), PreemptionsPerMinute: math.NaN(), FollowReplicas: math.NaN()}
		m.Learn(o, slo, now)
	}
	if m.Capacity == 0 || len(m.demand) == 0 || m.stats.at.IsZero() || len(m.floor.blocks) == 0 {
		t.Fatalf("the model learned too little to test a snapshot by: capacity %v, %d points, stats at %v, %d floor blocks",
			m.Capacity, len(m.demand), m.stats.at, len(m.floor.blocks))
	}
	return m, slo, now
}

// TestASnapshotIsTheModel: a model written and read back is the model — capacity, start-up,
// the demand's history with each point's baseline and slope, its statistics, the miss floor —
// also once the history has dropped its oldest day, and the two decide alike afterwards.
func TestASnapshotIsTheModel(t *testing.T) {
	for _, span := range []time.Duration{40 * time.Minute, 3 * time.Hour, 26 * time.Hour} {
		t.Run(span.String(), func(t *testing.T) {
			m, slo, now := learnedModel(t, span)
			m.ColdStart = 190 * time.Second
			back, data := roundTrip(t, m)
			if !reflect.DeepEqual(*m, back) {
				t.Fatalf("the model read back differs from the one written:\n%+v\n%+v", m.stats, back.stats)
			}
			if span > 24*time.Hour && m.demand[0].at.Equal(m.demand[0].since) {
				t.Fatalf("the history dropped no point: the test does not test the whole points kept at its head")
			}
			tr := trig(t, headroomTrigger)
			o := Observation{Ready: 20, Sampled: 20, Arrivals: 30, ArrivalsSampled: 20,
				TTFTP95: math.NaN(), ITLP95: math.NaN(), PreemptionsPerMinute: math.NaN(), FollowReplicas: math.NaN()}
			for i := range 8 {
				w := window(60, 40, 39, 0)
				w.End = now.Add(time.Duration(i+1) * 15 * time.Second)
				o.Windows = []ReplicaWindow{w}
				m.Learn(o, slo, w.End)
				back.Learn(o, slo, w.End)
				o.Model = m
				want, err := DefaultPolicy.Decide(o, tr)
				if err != nil {
					t.Fatal(err)
				}
				o.Model = &back
				got, err := DefaultPolicy.Decide(o, tr)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("evaluation %d: the model read back decides %+v, the one written %+v", i, got, want)
				}
			}
			if len(data) > 256<<10 {
				t.Errorf("a snapshot of %s is %d bytes: more than a day's 15-second points should take", span, len(data))
			}
		})
	}
}

// TestAnUnreadableSnapshotIsRefused: a snapshot of another layout, or one that is not a
// model's, is refused with ErrSnapshot and leaves the model as it was.
func TestAnUnreadableSnapshotIsRefused(t *testing.T) {
	m, _, _ := learnedModel(t, 40*time.Minute)
	good, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"not JSON":                    "{",
		"another layout":              strings.Replace(string(good), `"version":1`, `"version":2`, 1),
		"a negative capacity":         strings.Replace(string(good), `"capacity":`, `"capacity":-1,"x":`, 1),
		"times out of order":          `{"version":1,"at":[5,5],"rate":[1,1]}`,
		"a negative rate":             `{"version":1,"at":[0,5],"rate":[1,-1]}`,
		"fewer rates than times":      `{"version":1,"at":[0,5],"rate":[1]}`,
		"a head point after the rest": `{"version":1,"head":[{"at":9,"rate":1,"base":1}],"at":[5],"rate":[1]}`,
	} {
		t.Run(name, func(t *testing.T) {
			before := m.Clone()
			if err := m.UnmarshalBinary([]byte(data)); !errors.Is(err, ErrSnapshot) {
				t.Fatalf("UnmarshalBinary = %v, want ErrSnapshot", err)
			}
			if !reflect.DeepEqual(*m, before) {
				t.Fatal("a refused snapshot changed the model")
			}
		})
	}
}

// TestASnapshotOfADenseHistoryIsThinned: a fleet evaluated every 2 s for a day holds 43,200
// points; its snapshot keeps maxSnapshotPoints of them, read back it forecasts the same
// demand and the same headroom within a few percent, and decides within a replica of the
// model written.
func TestASnapshotOfADenseHistoryIsThinned(t *testing.T) {
	slo := trig(t, headroomTrigger).SLO
	m := &FleetModel{Capacity: 0.6}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for at := time.Duration(0); at < 24*time.Hour; at += 2 * time.Second {
		rate := 10 + 5*math.Sin(at.Hours()/4)
		if at%time.Hour < 2*time.Minute {
			rate *= 2.5
		}
		m.record(start.Add(at), rate)
	}
	now := start.Add(24 * time.Hour)
	m.stats = m.computeStats(m.horizon(slo), slo, now)
	back, data := roundTrip(t, m)
	if n := len(back.demand); n > maxSnapshotPoints+1 || n < maxSnapshotPoints/2 {
		t.Fatalf("%d points read back of %d, want about %d", n, len(m.demand), maxSnapshotPoints)
	}
	if len(data) > 256<<10 {
		t.Errorf("the thinned snapshot is %d bytes", len(data))
	}
	back.stats = back.computeStats(back.horizon(slo), slo, now)
	want, got := m.forecast(12, slo), back.forecast(12, slo)
	for _, c := range []struct {
		name      string
		want, got float64
	}{{"baseline", want.Base, got.Base}, {"forecast", want.Rate(), got.Rate()}, {"headroom", want.Headroom, got.Headroom}} {
		if math.Abs(c.got-c.want) > 0.05*c.want {
			t.Errorf("%s read back %v, written %v: more than 5 %% apart", c.name, c.got, c.want)
		}
	}
}

// roundTrip is m written and read back, and what was written.
func roundTrip(t *testing.T, m *FleetModel) (FleetModel, []byte) {
	t.Helper()
	data, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var back FleetModel
	if err := back.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	return back, data
}
