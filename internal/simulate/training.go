package simulate

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/gpu"
)

// TrainingPolicy is how gangs are admitted and their capacity provisioned.
type TrainingPolicy string

const (
	// PolicyBerth is berth's gang admission: members are gated until the whole gang fits
	// (scheduling.Place), a gang that does not fit gets seats for its shortfall
	// (scheduling.ComputeShortfall) so Karpenter launches every node in one batch, an attempt
	// that is not whole within the provisioning timeout gives its unused nodes back and backs
	// off, and running gangs are do-not-disrupt (the guard).
	PolicyBerth TrainingPolicy = "berth"
	// PolicyPlain is kube-scheduler and Karpenter alone: every member is scheduled on its own
	// (least-allocated node first, kube-scheduler's default), Karpenter launches nodes for the
	// pending ones, a job computes once all its members run, and one whose members are not all
	// running within the rendezvous timeout fails and starts over.
	PolicyPlain TrainingPolicy = "kube-scheduler"
	// PolicyGangOnly is gang scheduling without whole provisioning (a coscheduling plugin): a
	// gang's members bind only all together, but Karpenter provisions for each pending member
	// as it sees them, for every waiting gang at once.
	PolicyGangOnly TrainingPolicy = "gang-scheduling"
)

// TrainingPolicies lists the policies, berth first.
func TrainingPolicies() []TrainingPolicy {
	return []TrainingPolicy{PolicyBerth, PolicyPlain, PolicyGangOnly}
}

// Cluster is the training NodePool and what its users run on it.
type Cluster struct {
	// Family and Size are the instance type Karpenter launches.
	Family gpu.Family
	Size   gpu.Size
	// LimitGPUs is the NodePool's limit on GPUs.
	LimitGPUs int
	// NodeLaunch is from NodeClaim to Ready; ProvisionDelay Karpenter's batching window.
	NodeLaunch, ProvisionDelay time.Duration
	// Consolidation and ConsolidateAfter are the NodePool's; Guard makes running gangs
	// do-not-disrupt (berth's guard; always on under PolicyBerth unless Unguarded).
	Consolidation    Consolidation
	ConsolidateAfter time.Duration
	Unguarded        bool
	// CheckpointEvery is how often jobs checkpoint: an evicted job loses the work since.
	CheckpointEvery time.Duration
	// RendezvousTimeout is how long a job's started members wait for the rest before the job
	// fails and starts over (torchrun's rendezvous).
	RendezvousTimeout time.Duration
	// ProvisioningTimeout bounds one of berth's capacity attempts (the PodGroup's default).
	ProvisioningTimeout time.Duration
	// Tick is the simulation step.
	Tick time.Duration
}

// P5Cluster is an H100 training pool: p5.48xlarge (8 GPUs) with a 64-GPU limit, the family's
// launch time, Karpenter's default consolidation (WhenEmptyOrUnderutilized after 5 minutes),
// 30-minute checkpoints, torchrun's 15-minute rendezvous and berth's 10-minute provisioning
// timeout.
func P5Cluster() (Cluster, error) {
	fam, ok := gpu.ByGPU("h100")
	if !ok {
		return Cluster{}, errors.New("the GPU catalogue has no H100 family")
	}
	return Cluster{Family: fam, Size: fam.Sizes[0], LimitGPUs: 64, NodeLaunch: fam.LaunchTime, ProvisionDelay: 10 * time.Second,
		Consolidation: WhenEmptyOrUnderutilized, ConsolidateAfter: 5 * time.Minute, CheckpointEvery: 30 * time.Minute,
		RendezvousTimeout: 15 * time.Minute, ProvisioningTimeout: time.Duration(berthv1alpha1.DefaultProvisioningTimeoutSeconds) * time.Second,
		Tick: 5 * time.Second}, nil
}

// Validate reports what keeps c from describing a cluster.
func (c Cluster) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Size.GPUs > 0, "the instance type must have GPUs")
	check(c.LimitGPUs >= int(c.Size.GPUs), "the GPU limit %d must hold one %d-GPU node", c.LimitGPUs, c.Size.GPUs)
	check(c.NodeLaunch >= 0 && c.ProvisionDelay >= 0 && c.ConsolidateAfter >= 0, "delays must not be negative")
	check(c.CheckpointEvery > 0 && c.RendezvousTimeout > 0 && c.ProvisioningTimeout > 0, "checkpoint, rendezvous and provisioning times must be positive")
	check(c.Tick > 0, "tick must be positive")
	check(c.Consolidation == WhenEmpty || c.Consolidation == WhenEmptyOrUnderutilized, "consolidation must be %s or %s", WhenEmpty, WhenEmptyOrUnderutilized)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid cluster: %w", err)
	}
	return nil
}

// TrainingResult is what one policy did with one job trace.
type TrainingResult struct {
	Policy string
	// Jobs arrived; Completed finished by the end of the run; Unplaceable can never fit the
	// NodePool's limit.
	Jobs, Completed, Unplaceable int
	// WaitP50 and WaitP95 are from arrival to every member running (the last start); JCTMean
	// the mean arrival-to-completion time of completed jobs.
	WaitP50, WaitP95, JCTMean time.Duration
	// GPUHours and Dollars are the nodes' (launch to removal); BusyGPUHours the GPU-hours of
	// jobs computing.
	GPUHours, Dollars, BusyGPUHours float64
	// PartialIdleGPUHours is GPUs bound to members of gangs that are not all running: allocated
	// and waiting for the rest. HeldGPUHours is capacity on Ready nodes kept for gangs waiting
	// for theirs (berth's seats and reservations).
	PartialIdleGPUHours, HeldGPUHours float64
	// BootingGPUHours is nodes launching; FreeGPUHours free GPUs on Ready nodes held by
	// nobody (waiting for consolidation, or for a gang that does not fit them). Busy, partial
	// idle, held, booting and free add up to GPUHours.
	BootingGPUHours, FreeGPUHours float64
	// Evictions is members evicted by consolidation; LostGPUHours the work they threw away
	// (since the last checkpoint, every member's GPUs); Restarts jobs that failed their
	// rendezvous and started over.
	Evictions, Restarts int
	LostGPUHours        float64
	// Series is the run over time, for the report.
	Series []TrainingPoint
}

// TrainingPoint is one bucket of a training run.
type TrainingPoint struct {
	At                       time.Duration
	NodeGPUs, BusyGPUs, Idle float64
	Waiting, Running         int
}

type tnode struct {
	name            string
	launched, ready time.Duration
	used            int
	pods            []*tpod
	nominated       []*tpod
	changed         time.Duration
	// wanted is when a pending pod last fitted the node's free GPUs.
	wanted time.Duration
	obj    *corev1.Node
}

type tpod struct {
	job          *tjob
	gpus         int
	node         *tnode
	nominated    *tnode
	seat         bool
	index        int // the member's rank in its gang
	pendingSince time.Duration
	obj          *corev1.Pod
}

type tjob struct {
	Job
	id           int
	members      []*tpod
	seats        []*tpod
	running      bool
	runSince     time.Duration
	progress     time.Duration
	partialSince time.Duration
	started      bool
	firstRun     time.Duration
	done         bool
	attempt      int
	failures     int // attempts in a row withdrawn at the provisioning timeout (the backoff's)
	attemptStart time.Duration
	retryAt      time.Duration
	reserved     []*tnode
	seatNodes    map[*tnode]bool
}

func (j *tjob) gpus() int { return j.Members * j.GPUsPerMember }

// RunTraining replays jobs on cluster c under policy p.
func RunTraining(c Cluster, jobs []Job, p TrainingPolicy) (*TrainingResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if !slices.Contains(TrainingPolicies(), p) {
		return nil, fmt.Errorf("training policy %q: want one of %v", p, TrainingPolicies())
	}
	if len(jobs) == 0 {
		return nil, errors.New("the job trace has no job")
	}
	s := &trainSim{c: c, p: p, res: TrainingResult{Policy: string(p), Jobs: len(jobs)}, lastDisrupt: -time.Hour}
	if p == PolicyBerth && c.Unguarded {
		s.res.Policy += " (unguarded)"
	}
	for i, j := range jobs {
		tj := &tjob{Job: j, id: i, retryAt: noTime, partialSince: noTime, attemptStart: noTime, seatNodes: map[*tnode]bool{}}
		if perNode := int(c.Size.GPUs) / j.GPUsPerMember; perNode == 0 || (j.Members+perNode-1)/perNode*int(c.Size.GPUs) > c.LimitGPUs {
			// A member larger than a node, or a gang whose nodes exceed the NodePool's limit.
			s.res.Unplaceable++
			continue
		}
		s.pending = append(s.pending, tj)
	}
	s.series = newTrainingSeries(jobs[len(jobs)-1].At)
	s.run(jobs[len(jobs)-1].At)
	return s.result(), nil
}

type trainSim struct {
	c           Cluster
	p           TrainingPolicy
	now         time.Duration
	pending     []*tjob // not arrived yet
	jobs        []*tjob // arrived, not done
	nodes       []*tnode
	nodeSeq     int
	res         TrainingResult
	waits       samples
	jct         time.Duration
	lastDisrupt time.Duration
	series      trainingSeries
}

// run steps until every job is done, or for a week past the last arrival.
func (s *trainSim) run(last time.Duration) {
	limit := last + 7*24*time.Hour
	for s.now = 0; s.now <= limit; s.now += s.c.Tick {
		s.arrive()
		s.finish()
		switch s.p {
		case PolicyBerth:
			s.admitBerth()
		case PolicyPlain:
			s.schedulePlain()
		case PolicyGangOnly:
			s.scheduleGangs()
		}
		s.provision()
		s.consolidate()
		s.account()
		if len(s.pending) == 0 && len(s.jobs) == 0 {
			break
		}
	}
}

func (s *trainSim) arrive() {
	for len(s.pending) > 0 && s.pending[0].At <= s.now {
		j := s.pending[0]
		s.pending = s.pending[1:]
		for i := range j.Members {
			j.members = append(j.members, s.newPod(j, j.GPUsPerMember, false, i))
		}
		s.jobs = append(s.jobs, j)
	}
}

func (s *trainSim) newPod(j *tjob, gpus int, seat bool, i int) *tpod {
	name := fmt.Sprintf("job%d-%d", j.id, i)
	if seat {
		name = fmt.Sprintf("seat-job%d-a%d-%d", j.id, j.attempt, i)
	}
	q := resource.MustParse(strconv.Itoa(gpus))
	obj := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "training"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{berthv1alpha1.GPUResource: q}, Limits: corev1.ResourceList{berthv1alpha1.GPUResource: q}}}}}}
	return &tpod{job: j, gpus: gpus, seat: seat, index: i, pendingSince: s.now, obj: obj}
}

// finish completes the jobs whose work is done.
func (s *trainSim) finish() {
	s.jobs = slices.DeleteFunc(s.jobs, func(j *tjob) bool {
		if !j.running || j.progress+(s.now-j.runSince) < j.Duration {
			return false
		}
		j.done = true
		s.res.Completed++
		s.jct += s.now - j.At
		for _, m := range j.members {
			s.unbind(m)
		}
		return true
	})
}

func (s *trainSim) bind(p *tpod, n *tnode) {
	if p.nominated != nil {
		p.nominated.nominated = slices.DeleteFunc(p.nominated.nominated, func(q *tpod) bool { return q == p })
		p.nominated = nil
	}
	p.node = n
	n.pods = append(n.pods, p)
	n.used += p.gpus
	n.changed = s.now
	j := p.job
	if !p.seat && !isSet(j.partialSince) {
		j.partialSince = s.now
	}
	s.checkRunning(j)
}

func (s *trainSim) unbind(p *tpod) {
	if p.nominated != nil {
		p.nominated.nominated = slices.DeleteFunc(p.nominated.nominated, func(q *tpod) bool { return q == p })
		p.nominated = nil
	}
	if n := p.node; n != nil {
		n.pods = slices.DeleteFunc(n.pods, func(q *tpod) bool { return q == p })
		n.used -= p.gpus
		n.changed = s.now
		p.node = nil
	}
	p.pendingSince = s.now
}

// checkRunning starts a job whose members all run.
func (s *trainSim) checkRunning(j *tjob) {
	if j.running {
		return
	}
	for _, m := range j.members {
		if m.node == nil {
			return
		}
	}
	j.running, j.runSince = true, s.now
	j.partialSince = noTime
	if !j.started {
		j.started, j.firstRun = true, s.now
		s.waits.add((s.now - j.At).Seconds())
	}
}

// noTime marks an unset time.
const noTime = time.Duration(-1)

// isSet reports whether d is a set time (not noTime).
func isSet(d time.Duration) bool { return d >= 0 }

func (s *trainSim) readyNodes() []*tnode {
	var out []*tnode
	for _, n := range s.nodes {
		if s.now >= n.ready {
			out = append(out, n)
		}
	}
	return out
}

func (s *trainSim) free(n *tnode) int { return int(s.c.Size.GPUs) - n.used }

// schedulePlain is kube-scheduler: each pending member alone, onto its nominated node when
// that is Ready, else the Ready node with the most free GPUs that fits it; members of a job
// that has waited out the rendezvous with some but not all running start over.
func (s *trainSim) schedulePlain() {
	var queue []*tpod
	for _, j := range s.jobs {
		if !j.running && isSet(j.partialSince) && s.now-j.partialSince >= s.c.RendezvousTimeout {
			s.res.Restarts++
			for _, m := range j.members {
				s.unbind(m)
			}
			j.partialSince = noTime
		}
		for _, m := range j.members {
			if m.node == nil {
				queue = append(queue, m)
			}
		}
	}
	// kube-scheduler's queue: oldest first; the pods of jobs created together interleave.
	sort.SliceStable(queue, func(a, b int) bool {
		pa, pb := queue[a], queue[b]
		if pa.pendingSince != pb.pendingSince {
			return pa.pendingSince < pb.pendingSince
		}
		return pa.index < pb.index
	})
	for _, m := range queue {
		if n := m.nominated; n != nil && s.now >= n.ready && s.free(n) >= m.gpus {
			s.bind(m, n)
			continue
		}
		if n := s.leastAllocated(m.gpus, nil); n != nil {
			s.bind(m, n)
		}
	}
}

// leastAllocated is the Ready node with the most free GPUs that holds gpus more (plan adds
// GPUs already promised in a plan), nil for none.
func (s *trainSim) leastAllocated(gpus int, plan map[*tnode]int) *tnode {
	var best *tnode
	for _, n := range s.readyNodes() {
		free := s.free(n) - plan[n]
		if free >= gpus && (best == nil || free > s.free(best)-plan[best]) {
			best = n
		}
	}
	return best
}

// scheduleGangs is a coscheduling plugin: a gang binds only when every member has a place,
// each placed as kube-scheduler would; gangs are tried in arrival order, and a gang that does
// not fit lets the next one try.
func (s *trainSim) scheduleGangs() {
	for _, j := range s.jobs {
		if j.running {
			continue
		}
		plan := map[*tnode]int{}
		var where []*tnode
		for _, m := range j.members {
			if m.node != nil {
				where = append(where, m.node)
				continue
			}
			n := s.leastAllocated(m.gpus, plan)
			if n == nil {
				where = nil
				break
			}
			plan[n] += m.gpus
			where = append(where, n)
		}
		if len(where) != len(j.members) {
			continue
		}
		for i, m := range j.members {
			if m.node == nil {
				s.bind(m, where[i])
			}
		}
	}
}

// visiblePending is what Karpenter provisions for: pending pods it can see — members that are
// not gated (every policy but berth's), and berth's seats.
func (s *trainSim) visiblePending() []*tpod {
	var out []*tpod
	for _, j := range s.jobs {
		pods := j.members
		if s.p == PolicyBerth {
			pods = j.seats
		}
		for _, p := range pods {
			if p.node == nil && s.now-p.pendingSince >= s.c.ProvisionDelay {
				out = append(out, p)
			}
		}
	}
	return out
}

// provision is Karpenter: a pending pod that fits the free GPUs of a Ready node (less what
// other pending pods were already given there) needs no new capacity; the others go to
// in-flight nodes with room, then to new nodes packed first-fit largest first, within the
// NodePool's GPU limit. Seats bind where they fit; nominations end once the node is Ready
// (kube-scheduler binds the pod there or it is pending again).
func (s *trainSim) provision() {
	pods := s.visiblePending()
	sort.SliceStable(pods, func(a, b int) bool { return pods[a].gpus > pods[b].gpus })
	total := len(s.nodes) * int(s.c.Size.GPUs)
	room := func(n *tnode) int {
		r := s.free(n)
		for _, q := range n.nominated {
			r -= q.gpus
		}
		return r
	}
	ready := s.readyNodes()
	taken := map[*tnode]int{}
	for _, p := range pods {
		if p.nominated != nil {
			continue
		}
		if p.seat {
			if n := s.leastAllocated(p.gpus, nil); n != nil {
				s.bind(p, n)
				continue
			}
		}
		fits := false
		for _, n := range ready {
			if room(n)-taken[n] >= p.gpus {
				taken[n] += p.gpus
				n.wanted = s.now // Karpenter nominates the pod there: not a node to consolidate
				fits = true
				break
			}
		}
		if fits {
			continue // existing capacity holds it: Karpenter launches nothing for it
		}
		var target *tnode
		for _, n := range s.nodes {
			if s.now < n.ready && room(n) >= p.gpus {
				target = n
				break
			}
		}
		if target == nil {
			if total+int(s.c.Size.GPUs) > s.c.LimitGPUs {
				continue // the NodePool's limit: Karpenter launches nothing more
			}
			target = s.launch()
			total += int(s.c.Size.GPUs)
		}
		p.nominated = target
		target.nominated = append(target.nominated, p)
	}
	for _, n := range ready {
		if len(n.nominated) > 0 {
			// Karpenter counts consolidateAfter from the node's initialization; the pods it was
			// launched for still want it.
			n.changed, n.wanted = max(n.changed, n.ready), s.now
		}
		for _, p := range slices.Clone(n.nominated) {
			if p.seat && s.free(n) >= p.gpus {
				s.bind(p, n)
				continue
			}
			p.nominated = nil
		}
		n.nominated = n.nominated[:0]
	}
}

func (s *trainSim) launch() *tnode {
	s.nodeSeq++
	name := fmt.Sprintf("node-%05d", s.nodeSeq)
	gpus := resource.MustParse(strconv.FormatInt(s.c.Size.GPUs, 10))
	obj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{berthv1alpha1.GPUResource: gpus, corev1.ResourcePods: resource.MustParse("110")}}}
	n := &tnode{name: name, launched: s.now, ready: s.now + s.c.NodeLaunch, changed: s.now, wanted: noTime, obj: obj}
	s.nodes = append(s.nodes, n)
	return n
}
