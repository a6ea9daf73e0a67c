package simulate

import (
	"slices"
	"time"
)

// consolidate is Karpenter's disruption of the training pool: empty nodes after
// ConsolidateAfter (nothing bound or nominated); under WhenEmptyOrUnderutilized, one node at a
// time whose pods fit the other Ready nodes' free GPUs — unless one of its pods is
// do-not-disrupt (berth's seats, and under the guard every member of a running gang). Evicted
// members go back to pending; their job loses the work since its last checkpoint and waits for
// them again.
func (s *trainSim) consolidate() {
	s.dropNodes(func(n *tnode) bool {
		return len(n.pods) == 0 && len(n.nominated) == 0 && n.wanted != s.now && s.now >= n.ready && s.now-n.changed >= s.c.ConsolidateAfter
	})
	if s.c.Consolidation != WhenEmptyOrUnderutilized || s.now-s.lastDisrupt < consolidationValidation {
		return
	}
	guard := s.p == PolicyBerth && !s.c.Unguarded
	for _, n := range s.nodes {
		if len(n.pods) == 0 || len(n.nominated) > 0 || n.wanted == s.now || s.now < n.ready || s.now-n.changed < s.c.ConsolidateAfter || !s.movable(n, guard) {
			continue
		}
		for _, p := range slices.Clone(n.pods) {
			s.evict(p)
		}
		s.dropNodes(func(o *tnode) bool { return o == n })
		s.lastDisrupt = s.now
		return
	}
}

// dropNodes removes the nodes gone from the pool, and from the gangs' reservations.
func (s *trainSim) dropNodes(gone func(*tnode) bool) {
	s.nodes = slices.DeleteFunc(s.nodes, gone)
	for _, j := range s.jobs {
		j.reserved = slices.DeleteFunc(j.reserved, gone)
	}
}

// movable reports whether every pod on n may be disrupted and fits the other Ready nodes.
func (s *trainSim) movable(n *tnode, guard bool) bool {
	others := slices.DeleteFunc(s.readyNodes(), func(o *tnode) bool { return o == n })
	free := make([]int, len(others))
	for i, o := range others {
		free[i] = s.free(o)
	}
	// Karpenter's simulation schedules the pending pods too: capacity they fit is not free
	// for the pods a drain would move.
	for _, p := range s.visiblePending() {
		for i := range free {
			if free[i] >= p.gpus {
				free[i] -= p.gpus
				break
			}
		}
	}
	for _, p := range n.pods {
		if p.seat || (guard && p.job.running) {
			return false
		}
		placed := false
		for i := range free {
			if free[i] >= p.gpus {
				free[i] -= p.gpus
				placed = true
				break
			}
		}
		if !placed {
			return false
		}
	}
	return true
}

// evict removes a member from its node: a running job stops, keeping its checkpointed work.
func (s *trainSim) evict(p *tpod) {
	s.res.Evictions++
	j := p.job
	if j.running {
		ran := s.now - j.runSince
		kept := ran / s.c.CheckpointEvery * s.c.CheckpointEvery
		s.res.LostGPUHours += (ran - kept).Hours() * float64(j.gpus())
		j.progress += kept
		j.running = false
	}
	s.unbind(p)
	j.partialSince = s.now
}

// account adds the tick's GPU time up to the end of the run and the series' samples.
func (s *trainSim) account() {
	h := s.c.Tick.Hours()
	gpus := int(s.c.Size.GPUs)
	nodeGPUs := len(s.nodes) * gpus
	s.res.GPUHours += float64(nodeGPUs) * h
	s.res.Dollars += float64(len(s.nodes)) * s.c.Size.OnDemandUSD * h
	busy, partial, held, waiting, running := 0, 0, 0, 0, 0
	for _, j := range s.jobs {
		if j.running {
			busy += j.gpus()
			running++
			continue
		}
		waiting++
		for _, m := range j.members {
			if m.node != nil {
				partial += m.gpus
			}
		}
		for _, p := range j.seats {
			if p.node != nil {
				held += p.gpus
			}
		}
	}
	heldNodes := map[*tnode]bool{}
	for _, j := range s.jobs {
		for _, n := range j.reserved {
			if s.now >= n.ready && !heldNodes[n] {
				heldNodes[n] = true
				held += s.free(n)
			}
		}
	}
	booting, free := 0, 0
	reserved := map[*tnode]bool{}
	for _, j := range s.jobs {
		for _, n := range j.reserved {
			reserved[n] = true
		}
	}
	for _, n := range s.nodes {
		switch {
		case s.now < n.ready:
			booting += gpus
		case !reserved[n]:
			free += s.free(n)
		}
	}
	s.res.BusyGPUHours += float64(busy) * h
	s.res.PartialIdleGPUHours += float64(partial) * h
	s.res.HeldGPUHours += float64(held) * h
	s.res.BootingGPUHours += float64(booting) * h
	s.res.FreeGPUHours += float64(free) * h
	s.series.sample(s.now, nodeGPUs, busy, partial+held, waiting, running)
}

func (s *trainSim) result() *TrainingResult {
	r := s.res
	r.WaitP50 = time.Duration(s.waits.quantile(0.5) * float64(time.Second))
	r.WaitP95 = time.Duration(s.waits.quantile(0.95) * float64(time.Second))
	if r.Completed > 0 {
		r.JCTMean = s.jct / time.Duration(r.Completed)
	}
	r.Series = s.series.points()
	return &r
}

// trainingSeries folds a training run into buckets.
type trainingSeries struct {
	width time.Duration
	pts   []TrainingPoint
	n     []int
}

func newTrainingSeries(span time.Duration) trainingSeries {
	return trainingSeries{width: max(time.Minute, (span / seriesPoints).Round(time.Minute))}
}

func (b *trainingSeries) sample(at time.Duration, nodeGPUs, busy, idle, waiting, running int) {
	i := int(at / b.width)
	for len(b.pts) <= i {
		b.pts = append(b.pts, TrainingPoint{At: time.Duration(len(b.pts)) * b.width})
		b.n = append(b.n, 0)
	}
	p := &b.pts[i]
	p.NodeGPUs += float64(nodeGPUs)
	p.BusyGPUs += float64(busy)
	p.Idle += float64(idle)
	p.Waiting, p.Running = waiting, running
	b.n[i]++
}

func (b *trainingSeries) points() []TrainingPoint {
	out := make([]TrainingPoint, len(b.pts))
	for i, p := range b.pts {
		if n := float64(b.n[i]); n > 0 {
			p.NodeGPUs /= n
			p.BusyGPUs /= n
			p.Idle /= n
		}
		out[i] = p
	}
	return out
}
