package simulate

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Job is one training job of a trace: a gang of Members pods with GPUsPerMember GPUs each that
// computes for Duration once every member runs.
type Job struct {
	// At is the arrival, from the trace's start.
	At time.Duration
	// Members and GPUsPerMember shape the gang.
	Members, GPUsPerMember int
	// Duration is the compute time the job needs with every member running.
	Duration time.Duration
}

// jobHeader is the training-job trace's header.
const jobHeader = "arrival_seconds,members,gpus_per_member,duration_seconds"

// ReadJobs reads a training-job trace: a header arrival_seconds,members,gpus_per_member,
// duration_seconds and one job per line. Jobs come back sorted by arrival; every malformed
// line is reported with its number.
func ReadJobs(r io.Reader) ([]Job, error) {
	cr := csv.NewReader(bufio.NewReader(r))
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("reading the job trace header: %w", err)
	}
	if got := strings.ToLower(strings.TrimPrefix(strings.Join(header, ","), "\ufeff")); got != jobHeader {
		return nil, fmt.Errorf("job trace header %q: want %s", got, jobHeader)
	}
	var jobs []Job
	var errs []error
	for line := 2; len(errs) <= 20; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", line, err))
			continue
		}
		at, errA := strconv.ParseFloat(rec[0], 64)
		members, errM := strconv.Atoi(rec[1])
		gpus, errG := strconv.Atoi(rec[2])
		dur, errD := strconv.ParseFloat(rec[3], 64)
		switch {
		case errA != nil || at < 0 || math.IsNaN(at) || math.IsInf(at, 0):
			errs = append(errs, fmt.Errorf("line %d: arrival_seconds %q: want seconds from the start, at least 0", line, rec[0]))
		case errM != nil || members < 1:
			errs = append(errs, fmt.Errorf("line %d: members %q: want a whole number, at least 1", line, rec[1]))
		case errG != nil || gpus < 1:
			errs = append(errs, fmt.Errorf("line %d: gpus_per_member %q: want a whole number, at least 1", line, rec[2]))
		case errD != nil || !(dur > 0) || math.IsInf(dur, 0):
			errs = append(errs, fmt.Errorf("line %d: duration_seconds %q: want a positive number of seconds", line, rec[3]))
		default:
			jobs = append(jobs, Job{At: seconds(at), Members: members, GPUsPerMember: gpus, Duration: seconds(dur)})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid job trace: %w", err)
	}
	if len(jobs) == 0 {
		return nil, errors.New("the job trace has no job")
	}
	slices.SortStableFunc(jobs, func(a, b Job) int { return int(a.At - b.At) })
	return jobs, nil
}

// WriteJobs writes jobs in the format ReadJobs reads.
func WriteJobs(w io.Writer, jobs []Job) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, jobHeader)
	for _, j := range jobs {
		fmt.Fprintf(bw, "%.3f,%d,%d,%.3f\n", j.At.Seconds(), j.Members, j.GPUsPerMember, j.Duration.Seconds())
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing the job trace: %w", err)
	}
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// SyntheticJobs describes generated training jobs: Poisson arrivals, gang sizes drawn from
// Sizes by weight, log-normal durations.
type SyntheticJobs struct {
	// Duration is the span arrivals are drawn over; PerHour the mean arrival rate.
	Duration time.Duration
	PerHour  float64
	// Sizes are the gang shapes and their weights.
	Sizes []JobShape
	// DurationMedian and DurationSigma shape the compute time (σ of its logarithm).
	DurationMedian time.Duration
	DurationSigma  float64
	// Seed makes the trace reproducible.
	Seed uint64
}

// JobShape is one gang shape of SyntheticJobs.
type JobShape struct {
	Members, GPUsPerMember int
	Weight                 float64
}

// DefaultSyntheticJobs is a day of distributed training on 8-GPU nodes: 3 jobs an hour, half
// of them 2 × 4 GPUs, a third 4 × 8, the rest 8 × 8 (a whole-node-per-rank gang that needs 8
// nodes at once); compute times log-normal around 40 minutes (σ 0.8), the heavy tail training
// clusters report.
var DefaultSyntheticJobs = SyntheticJobs{
	Duration: 24 * time.Hour, PerHour: 3,
	Sizes:          []JobShape{{2, 4, 0.5}, {4, 8, 0.33}, {8, 8, 0.17}},
	DurationMedian: 40 * time.Minute, DurationSigma: 0.8, Seed: 1,
}

// Generate draws the jobs.
func (s SyntheticJobs) Generate() ([]Job, error) {
	var total float64
	for _, sh := range s.Sizes {
		if sh.Members < 1 || sh.GPUsPerMember < 1 || !(sh.Weight > 0) {
			return nil, fmt.Errorf("invalid job shape %+v: members, GPUs per member and weight must be positive", sh)
		}
		total += sh.Weight
	}
	if s.Duration <= 0 || !(s.PerHour > 0) || s.DurationMedian <= 0 || s.DurationSigma < 0 || len(s.Sizes) == 0 {
		return nil, errors.New("invalid synthetic jobs: duration, rate, shapes and median compute time must be positive")
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x2545f4914f6cdd1d))
	var jobs []Job
	for t := 0.0; ; {
		t += rng.ExpFloat64() / s.PerHour * 3600
		at := seconds(t)
		if at >= s.Duration {
			break
		}
		pick, sh := rng.Float64()*total, s.Sizes[len(s.Sizes)-1]
		for _, c := range s.Sizes {
			if pick < c.Weight {
				sh = c
				break
			}
			pick -= c.Weight
		}
		d := time.Duration(float64(s.DurationMedian) * math.Exp(s.DurationSigma*rng.NormFloat64())).Round(time.Second)
		jobs = append(jobs, Job{At: at, Members: sh.Members, GPUsPerMember: sh.GPUsPerMember, Duration: max(d, time.Minute)})
	}
	if len(jobs) == 0 {
		return nil, errors.New("the synthetic jobs drew no job: raise the rate or the duration")
	}
	return jobs, nil
}
