package ledger

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// The property: whatever the order in which gang admission, ProvisioningRequests and native
// gangs' hand-overs go,
// however far each one's cache trails the API server, no node is promised more GPUs than it
// has. The world below is the API server's truth; each user decides on a cache that shows the
// truth of some earlier step, as an informer does (one cache, moving forward only), and on the
// shared ledger.

const (
	nodes       = 3
	gpusPerNode = 8
)

// world is the API server's state: pods (members, seats) and gangs.
type world struct {
	pods   []*corev1.Pod
	groups []*berthv1alpha1.PodGroup
	next   int
	rv     int // the API server's last resourceVersion
}

func (w *world) clone() world {
	c := world{next: w.next, rv: w.rv}
	for _, p := range w.pods {
		c.pods = append(c.pods, p.DeepCopy())
	}
	for _, g := range w.groups {
		c.groups = append(c.groups, g.DeepCopy())
	}
	return c
}

func gpusOf(p *corev1.Pod) int64 {
	q := p.Spec.Containers[0].Resources.Requests[berthv1alpha1.GPUResource]
	return q.Value()
}

// free is the GPUs each node has left in a view of what is promised.
func free(promised []scheduling.PodOnNode) map[string]int64 {
	out := map[string]int64{}
	for i := range nodes {
		out[fmt.Sprintf("n%d", i)] = gpusPerNode
	}
	for _, pn := range promised {
		out[pn.Node] -= gpusOf(pn.Pod)
	}
	return out
}

// pick is a node with room for gpus in the view, or "".
func pick(view map[string]int64, gpus int64, rng *rand.Rand) string {
	var fits []string
	for i := range nodes {
		if n := fmt.Sprintf("n%d", i); view[n] >= gpus {
			fits = append(fits, n)
		}
	}
	if len(fits) == 0 {
		return ""
	}
	return fits[rng.IntN(len(fits))]
}

// submit is a user creating a gang of one member, gated, not promised anything yet.
func (w *world) submit(rng *rand.Rand) {
	w.next++
	name := fmt.Sprintf("g%d", w.next)
	g := builders.PodGroup(name, "ml").MinMember(1).Obj()
	g.UID = types.UID("uid-" + name)
	w.rv++
	g.ResourceVersion = strconv.Itoa(w.rv)
	m := builders.Pod(name+"-0", "ml").Member(name).GPU(1 + rng.IntN(gpusPerNode)).Gated().Obj()
	m.UID = types.UID("uid-" + m.Name)
	w.groups = append(w.groups, g)
	w.pods = append(w.pods, m)
}

// admitGang is gang admission: a gang the cache shows with no promise yet gets a node with
// room in the ledger's view; the promise is written (the status's assignments, and the member
// pinned and released, or still gated under its promise) and recorded in the ledger l.
func (w *world) admitGang(cache world, l *Ledger, rng *rand.Rand) {
	l.Lock()
	defer l.Unlock()
	view := free(l.Promised(cache.pods, cache.groups))
	for _, cg := range cache.groups {
		if len(l.Assignments(cg)) > 0 {
			continue
		}
		var m *corev1.Pod
		for _, p := range cache.pods {
			if p.Labels[berthv1alpha1.PodGroupLabel] == cg.Name && p.Status.Phase == "" {
				m = p
			}
		}
		if m == nil {
			continue
		}
		node := pick(view, gpusOf(m), rng)
		if node == "" {
			continue
		}
		as := []berthv1alpha1.MemberAssignment{{Pod: m.Name, UID: m.UID, Node: node}}
		w.rv++
		rv := strconv.Itoa(w.rv)
		for _, g := range w.groups {
			if g.UID == cg.UID {
				g.Status.Assignments, g.ResourceVersion = as, rv
			}
		}
		for _, p := range w.pods {
			if p.UID == m.UID && rng.IntN(2) == 0 { // released at once, or later
				p.Annotations = map[string]string{berthv1alpha1.PinnedNodeAnnotation: node}
				p.Spec.SchedulingGates = nil
			}
		}
		l.AssumeAssignments(cg.UID, as, rv)
		return
	}
}

// bookRequest is a check-capacity ProvisioningRequest: a seat pinned to a node with room,
// recorded in the ledger l.
func (w *world) bookRequest(cache world, l *Ledger, rng *rand.Rand) {
	l.Lock()
	defer l.Unlock()
	gpus := int64(1 + rng.IntN(gpusPerNode))
	node := pick(free(l.Promised(cache.pods, cache.groups)), gpus, rng)
	if node == "" {
		return
	}
	w.next++
	s := builders.Pod(fmt.Sprintf("seat-%d", w.next), "berth-system").GPU(int(gpus)).
		Label(berthv1alpha1.SeatForProvisioningRequestLabel, fmt.Sprintf("pr-%d", w.next)).Pinned(node).Obj()
	s.UID = types.UID("uid-" + s.Name)
	w.pods = append(w.pods, s)
	l.AssumePod(s, node)
}

// nativeTarget marks, in the model, a native gang's member kube-scheduler is about to place on
// the node its seat held (what the truth counts it on until it binds).
const nativeTarget = "test.berth.dev/native-target"

// nativeSeat is a native gang's seat bound to a node Karpenter launched for it. kube-scheduler
// binds it, not berth: its arrival is outside the ledger's reach (a node that turns Ready is
// room for whoever gets there first), so the model lets it land only on room nobody was
// promised, known to the ledger as it lands, and checks what the ledger is for: the room it holds is not promised again when
// the seat gives way to its gang (handOver).
func (w *world) nativeSeat(l *Ledger, rng *rand.Rand) {
	l.Lock()
	defer l.Unlock()
	gpus := int64(1 + rng.IntN(gpusPerNode))
	node := pick(free(l.Promised(w.pods, w.groups)), gpus, rng)
	if node == "" {
		return
	}
	w.next++
	s := builders.Pod(fmt.Sprintf("native-seat-%d", w.next), "berth-system").GPU(int(gpus)).
		Label(berthv1alpha1.SeatForNativeGroupLabel, fmt.Sprintf("ng-%d", w.next)).Node(node).Obj()
	s.UID = types.UID("uid-" + s.Name)
	w.pods = append(w.pods, s)
	l.AssumePod(s, node) // (the model's simplification above: known from the moment it lands)
}

// handOver is the native-gang controller giving a seat's room to its gang's member: the room is
// held in the ledger l (when hold), then the seat is deleted; the member waits for kube-scheduler
// to place it there.
func (w *world) handOver(l *Ledger, hold bool, rng *rand.Rand) {
	var seats []int
	for i, p := range w.pods {
		if _, ok := p.Labels[berthv1alpha1.SeatForNativeGroupLabel]; ok && p.Status.Phase == "" {
			seats = append(seats, i)
		}
	}
	if len(seats) == 0 {
		return
	}
	i := seats[rng.IntN(len(seats))]
	s := w.pods[i]
	owner := types.UID(s.Labels[berthv1alpha1.SeatForNativeGroupLabel])
	if hold {
		l.Hold(owner, []scheduling.PodOnNode{{Pod: s, Node: s.Spec.NodeName}}, farFuture)
	}
	m := builders.Pod(string(owner)+"-0", "ml").GPU(int(gpusOf(s))).Obj()
	m.UID = types.UID("uid-" + m.Name)
	m.Annotations = map[string]string{nativeTarget: s.Spec.NodeName}
	w.pods = append(append(w.pods[:i:i], w.pods[i+1:]...), m)
}

// releaseNative is the native-gang controller seeing, in its cache, a member placed and
// releasing its hold.
func releaseNative(cache world, l *Ledger) {
	for _, p := range cache.pods {
		if p.Annotations[nativeTarget] != "" && p.Spec.NodeName != "" {
			l.Release(types.UID(p.Name[:len(p.Name)-2]))
		}
	}
}

// bind is kube-scheduler binding a pinned, released pod to its node (or a native gang's member
// to the node its seat held).
func (w *world) bind(rng *rand.Rand) {
	var pinned []*corev1.Pod
	for _, p := range w.pods {
		if node := p.Annotations[berthv1alpha1.PinnedNodeAnnotation]; node != "" && p.Spec.NodeName == "" && !gated(p) {
			pinned = append(pinned, p)
		}
		if p.Annotations[nativeTarget] != "" && p.Spec.NodeName == "" {
			pinned = append(pinned, p)
		}
	}
	if len(pinned) > 0 {
		p := pinned[rng.IntN(len(pinned))]
		p.Spec.NodeName = p.Annotations[berthv1alpha1.PinnedNodeAnnotation]
		if t := p.Annotations[nativeTarget]; t != "" {
			p.Spec.NodeName = t
		}
	}
}

// finish is a pod ending (its room freed).
func (w *world) finish(rng *rand.Rand) {
	if len(w.pods) > 0 {
		w.pods[rng.IntN(len(w.pods))].Status.Phase = corev1.PodSucceeded
	}
}

// overcommitted names the nodes the truth promises more GPUs than they have (a native gang's
// member counts on the node kube-scheduler is placing it on).
func (w *world) overcommitted() []string {
	var out []string
	promised := New(nil).Promised(w.pods, w.groups)
	for _, p := range w.pods {
		if t := p.Annotations[nativeTarget]; t != "" && p.Spec.NodeName == "" && p.Status.Phase == "" {
			promised = append(promised, scheduling.PodOnNode{Pod: p, Node: t})
		}
	}
	for n, f := range free(promised) {
		if f < 0 {
			out = append(out, fmt.Sprintf("%s by %d GPUs", n, -f))
		}
	}
	return out
}

// farFuture is a hold's end the model never reaches.
var farFuture = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

// run plays steps random steps from seed; shared says whether the users share one ledger
// (berth) or keep one each (before the ledger), hold whether native gangs hold the room their
// seats give way. It returns the first overcommitment seen.
func run(seed uint64, steps int, shared, hold bool) string {
	rng := rand.New(rand.NewPCG(seed, 1))
	var w world
	history := []world{w.clone()} // the truth after each step; caches show an earlier one
	admission, requests, native := New(nil), New(nil), New(nil)
	if shared {
		requests, native = admission, admission
	}
	// One informer cache for both (they run in one manager): it trails the truth by up to 3
	// steps and never goes back.
	at := 0
	cache := func() world {
		at = max(at, len(history)-1-rng.IntN(4))
		return history[at]
	}
	for range steps {
		switch rng.IntN(9) {
		case 0:
			w.submit(rng)
		case 1:
			c := cache()
			admission.CatchUp(c.pods, c.groups)
			w.admitGang(c, admission, rng)
		case 2:
			c := cache()
			requests.CatchUp(c.pods, c.groups)
			w.bookRequest(c, requests, rng)
		case 3, 4:
			w.bind(rng)
		case 5:
			w.finish(rng)
		case 6:
			w.nativeSeat(native, rng)
		case 7:
			w.handOver(native, hold, rng)
		case 8:
			releaseNative(cache(), native)
		}
		if over := w.overcommitted(); len(over) > 0 {
			return fmt.Sprint(over)
		}
		history = append(history, w.clone())
	}
	return ""
}

// TestNoGPUPromisedTwice: with one ledger, no interleaving overcommits a node.
func TestNoGPUPromisedTwice(t *testing.T) {
	for seed := range uint64(300) {
		if over := run(seed, 60, true, true); over != "" {
			t.Fatalf("seed %d: overcommitted %s", seed, over)
		}
	}
}

// TestNativeHandOverWithoutHoldPromisesTwice is the negative control for native gangs: seats
// that give way without holding their room in the ledger let admission promise it to a gang
// while kube-scheduler places the native gang there.
func TestNativeHandOverWithoutHoldPromisesTwice(t *testing.T) {
	for seed := range uint64(300) {
		if run(seed, 60, true, false) != "" {
			return
		}
	}
	t.Fatal("300 interleavings of hand-overs without a hold never overcommitted a node: the property test has no teeth")
}

// TestTwoLedgersPromiseTwice is the property's negative control: with a ledger each (what
// gang admission and ProvisioningRequests kept before), caches that trail their writes let
// them promise the same GPUs — the property test can fail.
func TestTwoLedgersPromiseTwice(t *testing.T) {
	for seed := range uint64(300) {
		if run(seed, 60, false, true) != "" {
			return
		}
	}
	t.Fatal("300 interleavings with a ledger each never overcommitted a node: the property test has no teeth")
}

// FuzzNoGPUPromisedTwice searches more interleavings (make fuzz).
func FuzzNoGPUPromisedTwice(f *testing.F) {
	f.Add(uint64(1))
	f.Fuzz(func(t *testing.T, seed uint64) {
		if over := run(seed, 80, true, true); over != "" {
			t.Fatalf("seed %d: overcommitted %s", seed, over)
		}
	})
}
