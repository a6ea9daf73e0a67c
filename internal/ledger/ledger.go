// Package ledger is berth's one account of what room on the cluster's nodes is promised: pods
// bound to a node; pods berth pinned to a node that have not bound yet (released gang members,
// seats of gangs and of ProvisioningRequests); gang members an admission promised a node
// (PodGroup status.assignments); and what this process wrote that the informer cache does not
// show yet (assignments, and seats it created pinned to a node); and the room seats gave way to
// the pods they stood for — a native gang's members, a ProvisioningRequest's consuming pods —
// until kube-scheduler places them (Hold). Gang admission and
// ProvisioningRequests decide under the ledger's one lock, each on the ledger's view and each
// recording its promise before it lets go; the native-gang controller decides no placement
// (kube-scheduler places native gangs) but holds the room its seats leave: no two of them
// promise the same GPUs, however far the cache trails their writes.
package ledger

import (
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
)

// podTTL is how long an assumed pod is kept without the cache showing it: a pod created and
// deleted again before the cache saw it would otherwise be counted for good.
const podTTL = time.Minute

// Ledger is the shared account. The zero value is not usable; New makes one.
type Ledger struct {
	decide sync.Mutex // held from a decision's view to its recorded promise
	mu     sync.Mutex // guards the maps
	clock  clock.PassiveClock
	// assignments are admissions this process wrote, by gang UID, until the cache shows them.
	assignments map[types.UID]assumedAssignments
	// pods are pods this process created pinned to a node, by UID, until the cache shows them.
	pods map[types.UID]assumedPod
	// holds are room kept for pods another scheduler is about to place, by owner UID (Hold).
	holds map[types.UID]hold
}

// hold is room kept on nodes until a time.
type hold struct {
	pods  []scheduling.PodOnNode
	until time.Time
}

// assumedAssignments are a gang's assignments as this process wrote them, at the PodGroup's
// resourceVersion rv after the write.
type assumedAssignments struct {
	as []berthv1alpha1.MemberAssignment
	rv string
}

type assumedPod struct {
	pod  *corev1.Pod
	node string
	at   time.Time
}

// New returns an empty ledger on clock clk (the real clock when nil).
func New(clk clock.PassiveClock) *Ledger {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Ledger{clock: clk, assignments: map[types.UID]assumedAssignments{}, pods: map[types.UID]assumedPod{}, holds: map[types.UID]hold{}}
}

// Lock takes the decision lock: the caller's view (Promised) and the promises it records
// (AssumeAssignments, AssumePod) are consistent with every other decision's. Hold it from the
// view to the recorded promise, no longer.
func (l *Ledger) Lock() { l.decide.Lock() }

// Unlock lets the next decision go.
func (l *Ledger) Unlock() { l.decide.Unlock() }

// AssumeAssignments records assignments this process just wrote for gang uid, the PodGroup
// being at resourceVersion rv after the write: until the cache shows that version (or a later
// one) the cache's status is older than the promise — none for a first admission, one member
// short for a replacement, the last generation's for a new one.
func (l *Ledger) AssumeAssignments(uid types.UID, as []berthv1alpha1.MemberAssignment, rv string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.assignments[uid] = assumedAssignments{as: as, rv: rv}
}

// ForgetAssignments drops what was assumed of gang uid (its generation ended).
func (l *Ledger) ForgetAssignments(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.assignments, uid)
}

// Assignments is gang g's assignments as promised: what this process wrote when g (from the
// cache) is older than that write, else g's status.
func (l *Ledger) Assignments(g *berthv1alpha1.PodGroup) []berthv1alpha1.MemberAssignment {
	l.mu.Lock()
	a, ok := l.assignments[g.UID]
	l.mu.Unlock()
	if ok && !caughtUp(g.ResourceVersion, a.rv) {
		return a.as
	}
	return g.Status.Assignments
}

// caughtUp reports whether an object at resourceVersion seen is at least as new as one at
// written. resourceVersions are etcd revisions: compared as numbers where both are (they are,
// from kube-apiserver), else only equality counts.
func caughtUp(seen, written string) bool {
	if seen == written {
		return true
	}
	a, errA := strconv.ParseUint(seen, 10, 64)
	b, errB := strconv.ParseUint(written, 10, 64)
	return errA == nil && errB == nil && a >= b
}

// AssumePod records a pod this process just created pinned to node (a seat booking room on an
// existing node), until the cache shows it.
func (l *Ledger) AssumePod(p *corev1.Pod, node string) {
	if p.UID == "" || node == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pods[p.UID] = assumedPod{pod: p, node: node, at: l.clock.Now()}
}

// ForgetPod drops an assumed pod (it was deleted).
func (l *Ledger) ForgetPod(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pods, uid)
}

// Hold keeps room on nodes for pods kube-scheduler is about to place there, for owner, until the
// given time: a native gang's seats that give way to its members once Karpenter launched every
// node (kube-scheduler's gang cycle places the members into the room the seats held, and
// without the hold admission could promise that room to a PodGroup gang first), and a booked
// ProvisioningRequest's seats that give way to its consuming pods one by one. Each held pod
// (a seat) counts on its node while it is not in the cache — while it is, it counts as itself —
// and the pod it stands for (the held pod's namespace and name: a copy of the member or
// consuming pod under the seat's UID) is not bound — once it is, it counts as itself — until
// the owner releases it (Release) or the time passes. A later Hold of one owner replaces the
// earlier.
func (l *Ledger) Hold(owner types.UID, pods []scheduling.PodOnNode, until time.Time) {
	if len(pods) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holds[owner] = hold{pods: pods, until: until}
}

// Held returns what owner holds now (nil when nothing, or its time passed): the pods are the
// ledger's, not to be modified.
func (l *Ledger) Held(owner types.UID) []scheduling.PodOnNode {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.holds[owner]
	if !ok || !l.clock.Now().Before(h.until) {
		return nil
	}
	return slices.Clone(h.pods)
}

// Release drops what owner holds (its members are placed, or its attempt ended).
func (l *Ledger) Release(owner types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.holds, owner)
}

// CatchUp drops what the cache now shows: assumed pods it has (by UID), or that are older than
// podTTL, and assumed assignments of gangs the cache shows at the written version or later, or
// that are gone.
func (l *Ledger) CatchUp(pods []*corev1.Pod, groups []*berthv1alpha1.PodGroup) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pods) > 0 {
		seen := make(map[types.UID]bool, len(pods))
		for _, p := range pods {
			seen[p.UID] = true
		}
		now := l.clock.Now()
		for uid, a := range l.pods {
			if seen[uid] || now.Sub(a.at) > podTTL {
				delete(l.pods, uid)
			}
		}
	}
	for owner, h := range l.holds {
		if !l.clock.Now().Before(h.until) {
			delete(l.holds, owner)
		}
	}
	if len(l.assignments) > 0 {
		live := make(map[types.UID]*berthv1alpha1.PodGroup, len(groups))
		for _, g := range groups {
			live[g.UID] = g
		}
		for uid, a := range l.assignments {
			if g, ok := live[uid]; !ok || caughtUp(g.ResourceVersion, a.rv) {
				delete(l.assignments, uid)
			}
		}
	}
}

// Promised is what counts against nodes, each pod once: bound pods that have not finished;
// pods berth pinned to a node (PinnedNodeAnnotation) and released (no gate) that have not bound
// yet — seats always, gang members while their gang lives (a released member of a gang that is
// gone can never bind: its barrier went with the gang); members promised a node by their gang's
// admission and not released yet (status, or assumed); pods this process created pinned to a
// node that the cache does not show yet; and room held for pods kube-scheduler is about to
// place (Hold).
func (l *Ledger) Promised(pods []*corev1.Pod, groups []*berthv1alpha1.PodGroup) []scheduling.PodOnNode {
	return l.AppendPromised(make([]scheduling.PodOnNode, 0, len(pods)), pods, groups)
}

// AppendPromised is Promised appended to dst: a caller that asks every cycle passes the last
// cycle's list back (dst[:0]) instead of allocating one the size of the cluster each time.
func (l *Ledger) AppendPromised(dst []scheduling.PodOnNode, pods []*corev1.Pod, groups []*berthv1alpha1.PodGroup) []scheduling.PodOnNode {
	out := dst
	var unbound []*corev1.Pod
	// Which pods the cache shows, for the assumed and held ones only: built when there are any
	// (a set of every pod per cycle was garbage on every cycle of a large cluster).
	l.mu.Lock()
	var seen map[types.UID]bool
	// boundAs: the pods a hold stands for (by namespace/name) that the cache shows bound.
	var boundAs map[types.NamespacedName]bool
	if len(l.pods)+len(l.holds) > 0 {
		wanted := make(map[types.UID]bool, len(l.pods))
		for uid := range l.pods {
			wanted[uid] = true
		}
		standsFor := map[types.NamespacedName]bool{}
		for _, h := range l.holds {
			for _, pn := range h.pods {
				wanted[pn.Pod.UID] = true
				standsFor[types.NamespacedName{Namespace: pn.Pod.Namespace, Name: pn.Pod.Name}] = true
			}
		}
		seen = make(map[types.UID]bool, len(wanted))
		boundAs = map[types.NamespacedName]bool{}
		for _, p := range pods {
			if wanted[p.UID] {
				seen[p.UID] = true
			}
			if p.Spec.NodeName != "" && len(standsFor) > 0 && standsFor[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] {
				boundAs[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = true
			}
		}
	}
	l.mu.Unlock()
	for _, p := range pods {
		switch {
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		case p.Spec.NodeName != "":
			out = append(out, scheduling.PodOnNode{Pod: p, Node: p.Spec.NodeName})
		default:
			unbound = append(unbound, p)
		}
	}
	out, rest := appendPinned(out, unbound, groups)
	out = l.appendAssigned(out, rest, groups)
	l.mu.Lock()
	defer l.mu.Unlock()
	for uid, a := range l.pods {
		if !seen[uid] {
			out = append(out, scheduling.PodOnNode{Pod: a.pod, Node: a.node})
		}
	}
	now := l.clock.Now()
	for _, h := range l.holds {
		if !now.Before(h.until) {
			continue
		}
		for _, pn := range h.pods {
			if !seen[pn.Pod.UID] && !boundAs[types.NamespacedName{Namespace: pn.Pod.Namespace, Name: pn.Pod.Name}] {
				out = append(out, pn)
			}
		}
	}
	return out
}

// appendPinned appends the unbound pods berth pinned to a node and released — seats always,
// gang members while their gang (one of groups) lives — and returns the other unbound pods
// (reusing unbound's array).
func appendPinned(out []scheduling.PodOnNode, unbound []*corev1.Pod, groups []*berthv1alpha1.PodGroup) ([]scheduling.PodOnNode, []*corev1.Pod) {
	var gangs map[string]bool
	rest := unbound[:0]
	for _, p := range unbound {
		node := p.Annotations[berthv1alpha1.PinnedNodeAnnotation]
		if node == "" || gated(p) {
			rest = append(rest, p)
			continue
		}
		if IsSeat(p) {
			out = append(out, scheduling.PodOnNode{Pod: p, Node: node})
			continue
		}
		if gangs == nil {
			gangs = make(map[string]bool, len(groups))
			for _, g := range groups {
				gangs[g.Namespace+"/"+g.Name] = true
			}
		}
		if gangs[p.Namespace+"/"+p.Labels[berthv1alpha1.PodGroupLabel]] {
			out = append(out, scheduling.PodOnNode{Pod: p, Node: node})
			continue
		}
		rest = append(rest, p)
	}
	return out, rest
}

// appendAssigned appends the unbound pods (of unbound) that groups' admissions promised a node
// (status, or assumed). Only an unbound pod can be promised: those alone are indexed (a few
// against the cluster's thousands of bound pods), and only once an assignment is looked up (the
// index was garbage of every cycle with members waiting and nothing assigned).
func (l *Ledger) appendAssigned(out []scheduling.PodOnNode, unbound []*corev1.Pod, groups []*berthv1alpha1.PodGroup) []scheduling.PodOnNode {
	var byKey map[string]*corev1.Pod
	var byUID map[types.UID]*corev1.Pod
	for _, g := range groups {
		for _, a := range l.Assignments(g) {
			if byUID == nil {
				byKey, byUID = make(map[string]*corev1.Pod, len(unbound)), make(map[types.UID]*corev1.Pod, len(unbound))
				for _, p := range unbound {
					byKey[p.Namespace+"/"+p.Name] = p
					byUID[p.UID] = p
				}
			}
			p, ok := byKey[g.Namespace+"/"+a.Pod]
			if a.UID != "" {
				p, ok = byUID[a.UID]
			}
			if ok {
				out = append(out, scheduling.PodOnNode{Pod: p, Node: a.Node})
			}
		}
	}
	return out
}

// IsSeat reports whether p is one of berth's seat pods (of a gang, a ProvisioningRequest, a
// native gang, or a fleet's warm seat).
func IsSeat(p *corev1.Pod) bool {
	for _, k := range []string{berthv1alpha1.SeatOfLabel, berthv1alpha1.SeatForProvisioningRequestLabel, berthv1alpha1.SeatForNativeGroupLabel, berthv1alpha1.WarmSeatForLabel} {
		if _, ok := p.Labels[k]; ok {
			return true
		}
	}
	return false
}

// gated reports whether p still carries berth's scheduling gate.
func gated(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == berthv1alpha1.SchedulingGate {
			return true
		}
	}
	return false
}
