package simulate

import (
	"testing"
	"time"
)

func p5(t *testing.T, limit int) Cluster {
	t.Helper()
	c, err := P5Cluster()
	if err != nil {
		t.Fatal(err)
	}
	c.LimitGPUs = limit
	return c
}

// Two 3-node gangs arrive together on a pool that holds four nodes: members scheduled one by
// one take the four nodes between them and neither job can start (deadlock until the
// rendezvous timeout, then again); berth admits one whole gang, then the other, and no GPU
// is ever allocated to a gang that is not running.
func TestPartialGangsDeadlockWithoutGangAdmission(t *testing.T) {
	c := p5(t, 32)
	jobs := []Job{{At: 0, Members: 3, GPUsPerMember: 8, Duration: time.Hour}, {At: 0, Members: 3, GPUsPerMember: 8, Duration: time.Hour}}
	plain, err := RunTraining(c, jobs, PolicyPlain)
	if err != nil {
		t.Fatal(err)
	}
	if plain.PartialIdleGPUHours < 1 || plain.Restarts == 0 {
		t.Errorf("kube-scheduler alone: %.1f GPU-hours idle in partial gangs, %d restarts; want the deadlock to show", plain.PartialIdleGPUHours, plain.Restarts)
	}
	b, err := RunTraining(c, jobs, PolicyBerth)
	if err != nil {
		t.Fatal(err)
	}
	if b.PartialIdleGPUHours != 0 || b.Completed != 2 || b.Restarts != 0 {
		t.Errorf("berth: %.2f GPU-hours idle in partial gangs, %d of 2 done, %d restarts", b.PartialIdleGPUHours, b.Completed, b.Restarts)
	}
	if plain.Completed == 2 && plain.JCTMean <= b.JCTMean {
		t.Errorf("kube-scheduler alone finished both jobs in %s on average, berth in %s: no deadlock", plain.JCTMean, b.JCTMean)
	}
}

// Jobs of two 4-GPU members finish at different times and leave half-used nodes: Karpenter's
// WhenEmptyOrUnderutilized moves a running member to pack them, and its job loses the work
// since its checkpoint; berth's guard keeps running gangs where they are.
func TestTheGuardKeepsConsolidationOffRunningGangs(t *testing.T) {
	c := p5(t, 64)
	c.ConsolidateAfter = time.Minute
	var jobs []Job
	for i := range 8 {
		jobs = append(jobs, Job{At: time.Duration(i) * time.Minute, Members: 2, GPUsPerMember: 4, Duration: time.Duration(30+25*i) * time.Minute})
	}
	g, err := RunTraining(c, jobs, PolicyGangOnly)
	if err != nil {
		t.Fatal(err)
	}
	c.Unguarded = true
	u, err := RunTraining(c, jobs, PolicyBerth)
	if err != nil {
		t.Fatal(err)
	}
	c.Unguarded = false
	b, err := RunTraining(c, jobs, PolicyBerth)
	if err != nil {
		t.Fatal(err)
	}
	if g.Evictions == 0 && u.Evictions == 0 {
		t.Errorf("no eviction without the guard (gang scheduling %d, berth unguarded %d): the case does not exercise consolidation", g.Evictions, u.Evictions)
	}
	if b.Evictions != 0 || b.LostGPUHours != 0 {
		t.Errorf("with the guard: %d evictions, %.1f GPU-hours lost", b.Evictions, b.LostGPUHours)
	}
}

func TestTrainingAccountsForEveryGPUHour(t *testing.T) {
	jobs, err := DefaultSyntheticJobs.Generate()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range TrainingPolicies() {
		r, err := RunTraining(p5(t, 64), jobs[:20], p)
		if err != nil {
			t.Fatal(err)
		}
		parts := r.BusyGPUHours + r.PartialIdleGPUHours + r.HeldGPUHours + r.BootingGPUHours + r.FreeGPUHours
		if d := parts - r.GPUHours; d > 0.01*r.GPUHours || d < -0.01*r.GPUHours {
			t.Errorf("%s: busy+partial+held+booting+free = %.1f, GPU-hours %.1f", p, parts, r.GPUHours)
		}
		if p == PolicyBerth && r.Completed != 20-r.Unplaceable {
			t.Errorf("%s: %d of %d jobs done", p, r.Completed, 20-r.Unplaceable)
		}
	}
}
