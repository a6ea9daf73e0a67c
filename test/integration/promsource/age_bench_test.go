package promsource_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/pods"
	"github.com/berth-dev/berth/scaler/promsource"
	"github.com/berth-dev/berth/test/scalertest"
)

// BenchmarkSignalAge compares how old the data behind one evaluation is on the two paths, over
// 10 s of evaluations every 100 ms: source pods (berth scrapes at evaluation time) and source
// prometheus (Prometheus scraped at its own interval, 5 s here; 15–30 s is common). KEDA's poll
// and the HPA's sync add the same delay to both paths.
func BenchmarkSignalAge(b *testing.B) {
	reps, port, podList := scalertest.Fleet(b, 10)
	for _, r := range reps {
		r.Set(scalertest.Page(2, 8, 0.6))
	}
	url := startPrometheus(b, reps, podList, port, 5*time.Second)
	promTr, _ := scaler.ParseTrigger(map[string]string{"targetQueueDepth": "4", "source": "prometheus", "prometheusAddress": url})
	podTr, _ := scaler.ParseTrigger(map[string]string{"targetQueueDepth": "4", "metricsPort": strconv.Itoa(port)})
	prom := promsource.New(promsource.Options{FreshFor: time.Nanosecond, MaxAge: time.Minute})
	scr := pods.New(pods.Options{FreshFor: time.Nanosecond})
	ctx := context.Background()
	for b.Loop() {
		var promAge, podAge, promMax time.Duration
		n := 0
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); n++ {
			o, err := prom.Observe(ctx, promTr, "inference", podList)
			if err != nil || o.Sampled == 0 {
				b.Fatalf("prometheus: %+v, %v", o, err)
			}
			promAge += o.OldestSample
			promMax = max(promMax, o.OldestSample)
			start := time.Now()
			po, _ := scr.Observe(ctx, podTr, podList, 0)
			podAge += time.Since(start) + po.OldestSample // the page is as old as the scrape took
			time.Sleep(100 * time.Millisecond)
		}
		b.ReportMetric(float64(promAge.Milliseconds())/float64(n), "prom-mean-age-ms")
		b.ReportMetric(float64(promMax.Milliseconds()), "prom-max-age-ms")
		b.ReportMetric(float64(podAge.Microseconds())/1000/float64(n), "pods-mean-age-ms")
	}
}
