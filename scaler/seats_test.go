package scaler

import (
	"errors"
	"testing"
)

// The warm seats of the SLO signal's burst headroom: how they stand in for serving replicas
// (splitSeats) and how the trigger asks for them.

func TestSplitSeats(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		desired, serving       int
		held                   Held
		warm, minWarm          int
		wantDesired, wantSeats int
		wantHeld               bool
	}{
		{name: "no warm seats asked", desired: 10, serving: 6, wantDesired: 10},
		{name: "no warm seats asked, a burst", desired: 10, serving: 13, wantDesired: 10},
		{name: "seats up to the budget stand in for headroom", desired: 10, serving: 6, warm: 3, wantDesired: 7, wantSeats: 3},
		{name: "a budget beyond the headroom holds the headroom", desired: 10, serving: 6, warm: 6, wantDesired: 6, wantSeats: 4},
		{name: "the floor holds seats the headroom does not ask for, taking no replica", desired: 10, serving: 10, warm: 4, minWarm: 2, wantDesired: 10, wantSeats: 2},
		{name: "a burst beyond the forecast takes the floor's seats", desired: 10, serving: 13, warm: 4, minWarm: 2, wantDesired: 12, wantSeats: 2},
		{name: "a burst beyond the forecast takes what it needs of the seats", desired: 10, serving: 11, warm: 4, minWarm: 2, wantDesired: 11, wantSeats: 2},
		{name: "a burst beyond the forecast without a floor has no seat to take", desired: 10, serving: 13, warm: 4, wantDesired: 10},
		{name: "a held signal keeps the seats there are, at least the floor", desired: 10, serving: 13, held: HeldLearning, warm: 4, minWarm: 2, wantDesired: 10, wantSeats: 2, wantHeld: true},
	} {
		sd := SignalDecision{Signal: SignalSLO, Target: 1, Desired: tc.desired, Held: tc.held, Value: metricValue(tc.desired, 1)}
		got, seats, held := splitSeats(sd, tc.serving, &Trigger{WarmSeats: tc.warm, MinWarmSeats: tc.minWarm})
		if got.Desired != tc.wantDesired || seats != tc.wantSeats || held != tc.wantHeld || got.Value != metricValue(tc.wantDesired, 1) {
			t.Errorf("%s: desired %d (value %v), seats %d held %v; want %d, %d, %v", tc.name, got.Desired, got.Value, seats, held, tc.wantDesired, tc.wantSeats, tc.wantHeld)
		}
	}
}

func TestParseTriggerWarmSeats(t *testing.T) {
	tr := trig(t, map[string]string{"ttftSLOSeconds": "2", "warmSeats": "4", "minWarmSeats": "1"})
	if tr.WarmSeats != 4 || tr.MinWarmSeats != 1 {
		t.Errorf("WarmSeats, MinWarmSeats = %d, %d; want 4, 1", tr.WarmSeats, tr.MinWarmSeats)
	}
	for _, tc := range []struct {
		md      map[string]string
		wantKey string
	}{
		{map[string]string{"ttftSLOSeconds": "2", "warmSeats": "-1"}, KeyWarmSeats},
		{map[string]string{"ttftSLOSeconds": "2", "warmSeats": "two"}, KeyWarmSeats},
		{map[string]string{"ttftSLOSeconds": "2", "warmSeats": "2", "minWarmSeats": "3"}, KeyMinWarmSeats},
		{map[string]string{"targetQueueDepth": "4", "warmSeats": "2"}, KeyWarmSeats},
	} {
		_, err := ParseTrigger(tc.md)
		var ik *InvalidKeyError
		if !errors.As(err, &ik) || ik.Key != tc.wantKey {
			t.Errorf("ParseTrigger(%v) = %v, want an InvalidKeyError on %s", tc.md, err, tc.wantKey)
		}
	}
}
