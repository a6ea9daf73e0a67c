package scaler

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// windowsWhole reports whether every ready replica has a window and the demand they measure
// (WindowArrivals) is whole enough to keep in the history: the longest spans at least
// minWindowSpan, and every window of a replica that was serving before it (not Joined) spans
// about as long. A window from a first page that came after the replica's first requests
// misses them, and minutes of such joins read as dips and bursts the history would learn from.
func (o Observation) windowsWhole() bool {
	if len(o.Windows) < o.Ready || len(o.Windows) == 0 {
		return false
	}
	longest := slices.MaxFunc(o.Windows, func(a, b ReplicaWindow) int { return cmp.Compare(a.Span, b.Span) }).Span
	if longest < minWindowSpan {
		return false
	}
	for _, w := range o.Windows {
		if !w.Joined && float64(w.Span) < windowSpanTolerance*float64(longest) {
			return false
		}
	}
	return true
}

// WindowArrivals is the fleet's arrival rate over the replicas' windows ws and how many had a
// window. A replica that was serving through its window adds its rate; one that joined inside
// the longest window (Joined: its window starts at its ready time, counters at zero) adds what
// it has had over that longest window. While replicas join, their windows are short and hold
// their share since they joined, and the older ones' windows still hold the minutes they took
// a larger share of every request: rates summed counted the demand more than once (a
// 5.1-requests/s minute read as 9 as nine replicas joined four), and the fleet was sized for
// it. Counting a joined replica from its ready time, not its first scrape, misses none of its
// requests (a window from its first page undercounted a burst and shrank the fleet in it).
func WindowArrivals(ws []ReplicaWindow) (rate float64, n int) {
	var longest time.Duration
	for _, w := range ws {
		if w.Span > 0 {
			longest = max(longest, w.Span)
			n++
		}
	}
	if n == 0 {
		return math.NaN(), 0
	}
	for _, w := range ws {
		switch {
		case w.Span <= 0:
		case w.Joined:
			rate += w.Arrived / longest.Seconds()
		default:
			rate += w.Arrived / w.Span.Seconds()
		}
	}
	return rate, n
}

// RecentArrivals is the fleet's arrival rate over the replicas' last intervals (Recent) as
// far as the requests counted prove it: the rate less surgeSigmas of its Poisson noise. A step
// in the demand shows at nearly its full height one scrape after it came, where the minute's
// window shows a quarter of it; a scrape's noise proves nothing (taken at face value it turned
// warm seats into replicas between bursts, and the bursts found none ready). 0 when a window
// has no last interval; replicas without a window add nothing (a lower bound, as Arrivals).
func RecentArrivals(ws []ReplicaWindow) float64 {
	rate, variance := 0.0, 0.0
	for _, w := range ws {
		if w.Recent <= 0 {
			return 0
		}
		s, n := w.Recent.Seconds(), w.RecentArrived
		if !(n >= 0) { // a count that went down (or none): nothing arrived
			n = 0
		}
		rate += n / s
		variance += n / (s * s)
	}
	return max(0, rate-surgeSigmas*math.Sqrt(variance))
}

// RecentWindow is the span of a window's last interval (ReplicaWindow.Recent): a scrape.
const RecentWindow = 15 * time.Second

// surgeSigmas is how many standard deviations of its Poisson noise a scrape's arrivals must
// rise by to count as demand (three: about one chance in a thousand per scrape).
const surgeSigmas = 3

// arrivalRate is the fleet's arrival rate: Arrivals scaled from the replicas with a window to
// every ready one (extrapolated true), since a replica that has just become ready takes its
// share of the arrivals at once — a lower bound still, as a router that prefers the least
// loaded sends a new replica more. ok is false when no replica has a window.
func (o Observation) arrivalRate() (rate float64, extrapolated, ok bool) {
	if math.IsNaN(o.Arrivals) || o.ArrivalsSampled == 0 {
		return 0, false, false
	}
	if o.ArrivalsSampled < o.Ready {
		return o.Arrivals * float64(o.Ready) / float64(o.ArrivalsSampled), true, true
	}
	return o.Arrivals, false, true
}
