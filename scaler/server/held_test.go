package server

import (
	"testing"
	"time"
)

func TestHeldForCountsAnUnbrokenHold(t *testing.T) {
	var s series
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	steps := []struct {
		at   time.Duration
		held bool
		want time.Duration
	}{
		{0, true, 0},
		{30 * time.Second, true, 30 * time.Second},
		{time.Minute, false, 0}, // the hold breaks
		{90 * time.Second, true, 0},
		{5 * time.Minute, true, 210 * time.Second},
	}
	for _, st := range steps {
		if got := s.heldFor("inference", "llama", st.held, t0.Add(st.at)); got != st.want {
			t.Errorf("at %v (held %v): held for %v, want %v", st.at, st.held, got, st.want)
		}
	}
	if got := s.heldFor("inference", "qwen", true, t0.Add(5*time.Minute)); got != 0 {
		t.Errorf("another ScaledObject inherits the hold: %v", got)
	}
}
