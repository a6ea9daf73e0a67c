package simulate

import (
	"testing"
	"time"
)

// BenchmarkReplayDay replays DefaultSynthetic — a day of one million requests — through an
// L4 fleet sized by berth's scaler (one policy; the run is single-threaded). The target, in
// docs/benchmarks.md: under 60 s on one core.
func BenchmarkReplayDay(b *testing.B) {
	trace, err := DefaultSynthetic.Generate()
	if err != nil {
		b.Fatal(err)
	}
	f, err := L4Fleet()
	if err != nil {
		b.Fatal(err)
	}
	f.Max = 64
	var r *InferenceResult
	for b.Loop() {
		a, err := NewBerth(BerthName, L4Trigger, BerthBehavior, 15*time.Second, f.Min, f.Max)
		if err != nil {
			b.Fatal(err)
		}
		if r, err = RunInference(f, trace, a); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(trace)), "requests")
	b.ReportMetric(r.GPUHours, "gpu-hours")
}

// BenchmarkTrainingDay replays DefaultSyntheticJobs through berth's gang admission.
func BenchmarkTrainingDay(b *testing.B) {
	jobs, err := DefaultSyntheticJobs.Generate()
	if err != nil {
		b.Fatal(err)
	}
	c, err := P5Cluster()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := RunTraining(c, jobs, PolicyBerth); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(jobs)), "jobs")
}
