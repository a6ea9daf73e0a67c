package simulate

import "time"

// recorder is the Observer of every replica: each request's latencies against the SLO.
type recorder struct {
	slo SLO
	// from is when measured requests start arriving (the warm-up's end).
	from                     time.Time
	ttft, itl                samples
	good, finished, timedOut int
	firstTokens              int
	series                   *seriesBuilder
	// aborted counts the requests an engine aborted when their client gave up.
	aborted int
}

// FirstToken records a request's time to first token.
func (r *recorder) FirstToken(arrived, at time.Time) {
	if arrived.Before(r.from) {
		return
	}
	d := at.Sub(arrived)
	r.firstTokens++
	r.ttft.add(d.Seconds())
	if d > r.slo.Timeout {
		r.timedOut++
	}
	r.series.firstToken(at.Sub(epoch), d.Seconds())
}

// Finished records a completed request and whether it met the SLO.
func (r *recorder) Finished(arrived, first, at time.Time, output int) {
	if arrived.Before(r.from) {
		return
	}
	r.finished++
	tpot := time.Duration(0)
	if output > 1 {
		tpot = at.Sub(first) / time.Duration(output-1)
	}
	r.itl.add(tpot.Seconds())
	if first.Sub(arrived) <= r.slo.TTFT && tpot <= r.slo.ITL {
		r.good++
		r.series.good(arrived.Sub(epoch))
	}
}

// Aborted records a request its engine aborted: its client gave up without a first token.
func (r *recorder) Aborted(arrived time.Time) {
	if !arrived.Before(r.from) {
		r.aborted++
	}
}

// outstanding is how many requests have neither finished nor been aborted nor been counted as
// failed or lost (gone).
func (r *recorder) outstanding(requests, gone int) int {
	return max(0, requests-gone-r.finished-r.aborted)
}

// seriesBuilder folds a run into buckets for the report's plots.
type seriesBuilder struct {
	width time.Duration
	pts   []Point
	n     []int
	ttft  []samples
}

// seriesPoints is about how many points a run's series has.
const seriesPoints = 288

func newSeriesBuilder(span time.Duration) seriesBuilder {
	width := max(time.Second, (span / seriesPoints).Round(time.Second))
	return seriesBuilder{width: width}
}

func (b *seriesBuilder) bucket(at time.Duration) int {
	i := int(max(0, at) / b.width)
	for len(b.pts) <= i {
		b.pts = append(b.pts, Point{At: time.Duration(len(b.pts)) * b.width})
		b.n = append(b.n, 0)
		b.ttft = append(b.ttft, samples{})
	}
	return i
}

func (b *seriesBuilder) sample(at time.Duration, serving, nodes, desired, waiting int) {
	i := b.bucket(at)
	p := &b.pts[i]
	p.Replicas += float64(serving)
	p.Nodes += float64(nodes)
	p.Waiting += float64(waiting)
	p.Desired = desired
	b.n[i]++
}

// arrival counts a measured request in the bucket of its arrival, and whether it can meet
// the SLO at all.
func (b *seriesBuilder) arrival(at time.Duration, attainable bool) {
	p := &b.pts[b.bucket(at)]
	p.Arrived++
	if attainable {
		p.Attainable++
	}
}

// good counts a request that met the SLO in the bucket of its arrival.
func (b *seriesBuilder) good(arrived time.Duration) { b.pts[b.bucket(arrived)].Good++ }

func (b *seriesBuilder) firstToken(at time.Duration, ttft float64) {
	b.ttft[b.bucket(at)].add(ttft)
}

func (b *seriesBuilder) points() []Point {
	out := make([]Point, len(b.pts))
	for i, p := range b.pts {
		if n := float64(b.n[i]); n > 0 {
			p.Replicas /= n
			p.Nodes /= n
			p.Waiting /= n
		}
		p.TTFTP95 = b.ttft[i].quantile(0.95) // NaN: no first token in the bucket
		out[i] = p
	}
	return out
}
