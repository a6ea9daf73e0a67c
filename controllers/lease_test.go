package controllers

import (
	"strings"
	"testing"
	"time"
)

// TestLeaseTimings: zero timings take client-go's defaults; timings leader election cannot work
// with, or that leave admission's fence no margin, are refused with what is wrong.
func TestLeaseTimings(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name string
		in   LeaseTimings
		want LeaseTimings
		err  string
	}{
		{"defaults", LeaseTimings{}, DefaultLeaseTimings, ""},
		{"a slow API server: longer timings", LeaseTimings{LeaseDuration: 60 * s, RenewDeadline: 40 * s, RetryPeriod: 5 * s}, LeaseTimings{60 * s, 40 * s, 5 * s}, ""},
		{"only the lease longer", LeaseTimings{LeaseDuration: 30 * s}, LeaseTimings{30 * s, 10 * s, 2 * s}, ""},
		{"renew deadline not below the lease", LeaseTimings{LeaseDuration: 10 * s}, LeaseTimings{}, "longer than the renew deadline"},
		{"retry too close to the deadline", LeaseTimings{RetryPeriod: 9 * s}, LeaseTimings{}, "1.2 × the retry period"},
		{"a lease too short for the fence", LeaseTimings{LeaseDuration: 8 * s, RenewDeadline: 6 * s, RetryPeriod: 1 * s}, LeaseTimings{}, "fence margin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.withDefaults()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one saying %q", err, tc.err)
			case tc.err == "" && got != tc.want:
				t.Errorf("timings %+v, want %+v", got, tc.want)
			}
		})
	}
}
