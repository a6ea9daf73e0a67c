package scaler

import (
	"fmt"
	"math"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The contract between berth's metric values and what KEDA v2.21.0 and the HPA of Kubernetes
// v1.37 do with them, written out from their sources rather than imported (KEDA's scalers
// package drags in every cloud SDK):
//
//   - KEDA's external scaler sends MetricValueFloat (when > 0) through GenerateMetricInMili and
//     TargetSizeFloat through GetMetricTargetMili; both call quantityFromFloat64, which is
//     resource.MustParse(fmt.Sprintf("%.3f", v)) — rounding to thousandths — with NaN, ±Inf and
//     negatives as 0. KEDA before v2.20 truncated instead: NewMilliQuantity(int64(v*1000)).
//   - The HPA's GetExternalPerPodMetricReplicas (AverageValue target) sums the metric's
//     MilliValue()s into usage, takes ratio = usage / (targetMilli · currentReplicas), keeps
//     currentReplicas while 1−tolDown ≤ ratio ≤ 1+tolUp, and otherwise computes
//     ceil(usage / targetMilli).

// kedaMilli is KEDA v2.21.0's quantityFromFloat64, in milli-units.
func kedaMilli(v float64) int64 {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0
	}
	q := resource.MustParse(fmt.Sprintf("%.3f", v))
	return q.MilliValue()
}

// legacyKEDAMilli is KEDA's conversion before v2.20: truncation.
func legacyKEDAMilli(v float64) int64 { return int64(v * 1000) }

// hpaDesired is the HPA's replica count for an external AverageValue metric, with the same
// tolerance both ways (the cluster default is 0.1; HPA behavior can set it per direction).
func hpaDesired(usageMilli, targetMilli int64, current int32, tolerance float64) int32 {
	ratio := float64(usageMilli) / (float64(targetMilli) * float64(current))
	if 1-tolerance <= ratio && ratio <= 1+tolerance {
		return current
	}
	return int32(math.Ceil(float64(usageMilli) / float64(targetMilli)))
}

// contractTargets are targets as ParseTrigger keeps them (thousandths), common and awkward.
// 1.001, 2.01, 4.02, 8.03, 32.3 and 64.1 are below their milli count in binary: truncating
// them·1000 gives one milli less.
var contractTargets = []float64{0.001, 0.003, 0.07, 0.125, 0.29, 0.333, 0.57, 0.8, 0.813, 0.999, 1, 1.001, 2.01, 2.5, 3.3, 4, 4.02, 7.777, 8.03, 10, 32.3, 64, 64.1, 1000, 123456.789}

// TestWireTargetEveryMilli: every target ParseTrigger can keep, from 0.001 to 1,000 in
// thousandths, reaches the HPA as exactly its milli count under both KEDA conversions (the bare
// target truncated one milli short for 5,907 of the first million).
func TestWireTargetEveryMilli(t *testing.T) {
	short := 0
	for m := int64(1); m <= 1_000_000; m++ {
		target := float64(m) / 1000
		if legacyKEDAMilli(target) != m {
			short++
		}
		w := WireTarget(target)
		if got := kedaMilli(w); got != m {
			t.Fatalf("target %v: KEDA v2.21 makes %d milli of %v, want %d", target, got, w, m)
		}
		if got := legacyKEDAMilli(w); got != m {
			t.Fatalf("target %v: KEDA before v2.20 makes %d milli of %v, want %d", target, got, w, m)
		}
	}
	if short == 0 {
		t.Error("no bare target truncates short; the legacy conversion is no longer modelled")
	}
}

// TestKEDAContractExactReplicas: for every target, every replica count berth can decide (0 to
// 1,000) and every current replica count, the value berth sends makes the HPA of KEDA v2.21.0
// (rounding) and of older KEDA (truncation) compute exactly the intended replicas when it acts,
// and act whenever the intended count differs from the current one with tolerance 0.
func TestKEDAContractExactReplicas(t *testing.T) {
	currents := []int32{1, 2, 3, 4, 5, 7, 10, 16, 33, 100, 500, 1000}
	conversions := []struct {
		name  string
		milli func(float64) int64
	}{{"keda-v2.21", kedaMilli}, {"keda-before-v2.20", legacyKEDAMilli}}
	for _, conv := range conversions {
		for _, target := range contractTargets {
			tm := conv.milli(WireTarget(target))
			if want := int64(targetMilli(target)); tm != want {
				t.Fatalf("%s target %v: KEDA sends %d milli, berth assumes %d", conv.name, target, tm, want)
			}
			for n := 0; n <= 1000; n++ {
				v := metricValue(n, target)
				um := conv.milli(v)
				if um != int64(n)*tm {
					t.Fatalf("%s target %v, %d replicas: value %v arrives as %d milli, want exactly %d", conv.name, target, n, v, um, int64(n)*tm)
				}
				for _, cur := range append(currents, int32(max(n, 1))) {
					// Tolerance 0 (what berth's examples set): the HPA follows berth exactly.
					if got := hpaDesired(um, tm, cur, 0); n > 0 && got != int32(n) {
						t.Fatalf("%s target %v, %d intended, %d current: HPA (tolerance 0) computes %d", conv.name, target, n, cur, got)
					}
					// The default 10%: the HPA either keeps current (within the band) or lands on n.
					got := hpaDesired(um, tm, cur, 0.1)
					ratio := float64(n) / float64(cur)
					want := int32(n)
					if 0.9 <= ratio && ratio <= 1.1 {
						want = cur
					}
					if got != want {
						t.Fatalf("%s target %v, %d intended, %d current: HPA (tolerance 0.1) computes %d, want %d", conv.name, target, n, cur, got, want)
					}
				}
			}
		}
	}
}

// TestOldMetricValueWasOffByOne keeps the bug this contract caught: the old value (exact milli
// product plus half a milli) is rounded up by KEDA v2.20+'s %.3f for about half of all counts.
func TestOldMetricValueWasOffByOne(t *testing.T) {
	old := func(n int, target float64) float64 { return (float64(n)*math.Round(target*1000) + 0.5) / 1000 }
	wrong := 0
	for n := 8; n <= 20; n++ {
		if got := hpaDesired(kedaMilli(old(n, 4)), 4000, 1, 0); got != int32(n) {
			wrong++
		}
		if got := hpaDesired(kedaMilli(metricValue(n, 4)), 4000, 1, 0); got != int32(n) {
			t.Errorf("targetQueueDepth 4, %d replicas: HPA computes %d", n, got)
		}
	}
	if wrong == 0 {
		t.Error("the old value never rounded up under KEDA v2.21's conversion; the contract helpers no longer model it")
	}
}
