package devcluster

// The demo's waits, shared by its scenes: one poll loop, the objects and Events the scenes wait
// for with it, and the progress they print on the way (a pod's node, a NodePool's NodeClaims, a
// gang's members).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// errTimedOut is what poll returns (wrapped) when its own time is up.
var errTimedOut = errors.New("timed out")

// poll calls check every interval until it reports done or fails; it gives up with errTimedOut
// once within (when positive) has passed, and with ctx's error when ctx ends.
func poll(ctx context.Context, every, within time.Duration, check func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(within)
	for {
		done, err := check(ctx)
		if err != nil || done {
			return err
		}
		if within > 0 && !time.Now().Before(deadline) {
			return fmt.Errorf("%w after %s", errTimedOut, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// waitFor reads obj's object every interval until done holds for it; obj is refreshed with each
// read, so that it tells, on failure too, what was last seen.
func waitFor[T any, P interface {
	*T
	client.Object
}](ctx context.Context, c client.Client, obj P, every time.Duration, done func(P) bool) error {
	key := client.ObjectKeyFromObject(obj)
	return poll(ctx, every, 0, func(ctx context.Context) (bool, error) {
		var fresh T
		if err := c.Get(ctx, key, P(&fresh)); err != nil {
			return false, fmt.Errorf("reading %s: %w", key, err)
		}
		*obj = fresh
		return done(obj), nil
	})
}

// watchEach calls record with each object of type T a watch delivers, from a goroutine, until
// stop is called.
func watchEach[T client.Object](ctx context.Context, c client.WithWatch, list client.ObjectList, record func(T), opts ...client.ListOption) (stop func(), err error) {
	w, err := c.Watch(ctx, list, opts...)
	if err != nil {
		return nil, err
	}
	go func() {
		for ev := range w.ResultChan() {
			if obj, ok := ev.Object.(T); ok {
				record(obj)
			}
		}
	}()
	return w.Stop, nil
}

// waitRunning waits until a pod runs, refreshing it in place.
func waitRunning(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	err := waitFor(ctx, c, pod, 250*time.Millisecond, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if err != nil {
		return fmt.Errorf("pod %s did not start (phase %s, node %q): %w", pod.Name, pod.Status.Phase, pod.Spec.NodeName, err)
	}
	return nil
}

// waitGone waits until every NodeClaim is deleted.
func waitGone(ctx context.Context, c client.Client, claims []karpv1.NodeClaim) error {
	for _, nc := range claims {
		err := poll(ctx, 250*time.Millisecond, 0, func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(&nc), &karpv1.NodeClaim{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		if err != nil {
			return fmt.Errorf("waiting for NodeClaim %s to go: %w", nc.Name, err)
		}
	}
	return nil
}

// waitEvent waits for an Event with a reason about the cluster-scoped object with a UID.
func waitEvent(ctx context.Context, c client.Client, uid types.UID, reason string) (*eventsv1.Event, error) {
	var found *eventsv1.Event
	err := poll(ctx, 200*time.Millisecond, 0, func(ctx context.Context) (bool, error) {
		evs, err := eventsAbout(ctx, c, metav1.NamespaceDefault, uid)
		if i := slices.IndexFunc(evs, func(e eventsv1.Event) bool { return e.Reason == reason }); i >= 0 {
			found = &evs[i]
		}
		return found != nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("no %s Event: %w", reason, err)
	}
	return found, nil
}

// eventsAbout lists the Events of a namespace about any of the objects with uids, oldest first.
// The Events of cluster-scoped objects are in the default namespace.
func eventsAbout(ctx context.Context, c client.Client, namespace string, uids ...types.UID) ([]eventsv1.Event, error) {
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing Events: %w", err)
	}
	out := slices.DeleteFunc(list.Items, func(e eventsv1.Event) bool { return !slices.Contains(uids, e.Regarding.UID) })
	slices.SortFunc(out, func(a, b eventsv1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	return out, nil
}

// eventTime is when an Event was last seen, whichever API recorded it.
func eventTime(e eventsv1.Event) time.Time {
	ts := []time.Time{e.CreationTimestamp.Time, e.EventTime.Time, e.DeprecatedLastTimestamp.Time}
	if e.Series != nil {
		ts = append(ts, e.Series.LastObservedTime.Time)
	}
	return slices.MaxFunc(ts, time.Time.Compare)
}

// karpenterComponent is the name Karpenter records its Events under.
const karpenterComponent = "karpenter"

// fromKarpenter reports whether Karpenter recorded an Event.
func fromKarpenter(e eventsv1.Event) bool {
	return e.ReportingController == karpenterComponent || e.DeprecatedSource.Component == karpenterComponent
}

// follow prints the NodeClaims and nodes of a NodePool and a pod as they change, until the pod
// runs; the pod is refreshed in place.
func (p *printer) follow(ctx context.Context, c client.Client, pod *corev1.Pod, pool string) error {
	err := poll(ctx, 250*time.Millisecond, 0, func(ctx context.Context) (bool, error) {
		var fresh corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &fresh); err != nil {
			return false, fmt.Errorf("reading pod %s: %w", pod.Name, err)
		}
		*pod = fresh
		if cond := podCondition(pod, corev1.PodScheduled); cond != nil && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			p.once("pending/"+pod.Name, "pod %s is Pending: %s", pod.Name, shorten(cond.Message))
		}
		if _, err := p.showClaims(ctx, c, pool); err != nil {
			return false, err
		}
		if pod.Spec.NodeName != "" {
			p.once("bound/"+pod.Name, "kube-scheduler bound pod %s to node %s", pod.Name, pod.Spec.NodeName)
		}
		if pod.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		p.once("running/"+pod.Name, "pod %s is Running with IP %s", pod.Name, pod.Status.PodIP)
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("pod %s did not start in time (phase %s): %w", pod.Name, pod.Status.Phase, err)
	}
	return nil
}

// podCondition is a pod's condition of a type, nil when it has none.
func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// claimView is a NodePool's NodeClaims as last listed (by name), their nodes' names by NodeClaim
// name, how many of those nodes are Ready, and the zones the NodeClaims were launched in.
type claimView struct {
	claims []karpv1.NodeClaim
	nodeOf map[string]string
	ready  int
	zones  map[string]bool
}

// showClaims lists a NodePool's NodeClaims and prints, once each, when Karpenter creates and
// launches one and when its node is Ready.
func (p *printer) showClaims(ctx context.Context, c client.Client, pool string) (claimView, error) {
	v := claimView{nodeOf: map[string]string{}, zones: map[string]bool{}}
	claims, err := claimsOf(ctx, c, pool)
	if err != nil {
		return v, err
	}
	byProvider, err := nodesByProviderID(ctx, c)
	if err != nil {
		return v, err
	}
	v.claims = claims
	for _, nc := range claims {
		l, node := nc.Labels, nodeNameOf(&nc, byProvider)
		v.nodeOf[nc.Name] = node
		p.once("nc/"+nc.Name, "Karpenter created NodeClaim %s (NodePool %s)", nc.Name, pool)
		if cond := nc.StatusConditions().Get(karpv1.ConditionTypeLaunched); cond != nil && cond.IsTrue() {
			v.zones[l[corev1.LabelTopologyZone]] = true
			p.once("nc/launched/"+nc.Name, "  NodeClaim %s launched: %s %s in %s, %s GPUs (%s)", nc.Name, l[corev1.LabelInstanceTypeStable],
				l[karpv1.CapacityTypeLabelKey], l[corev1.LabelTopologyZone], l[awsv1.LabelInstanceGPUCount], l[awsv1.LabelInstanceGPUName])
		}
		n, err := readyNode(ctx, c, node)
		if err != nil {
			return v, err
		}
		if n != nil {
			v.ready++
			p.once("node/ready/"+n.Name, "  node %s is Ready with %s nvidia.com/gpu allocatable", n.Name, quantity(n.Status.Allocatable, berthv1alpha1.GPUResource))
		}
	}
	return v, nil
}

// readyNode is the node of a name when it exists and is Ready, nil otherwise.
func readyNode(ctx context.Context, c client.Client, name string) (*corev1.Node, error) {
	if name == "" {
		return nil, nil
	}
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			return &n, nil
		}
	}
	return nil, nil
}

// gated is the state of a member held at berth's scheduling gate.
const gated = "gated"

// showMembers prints each member of a gang in the demo namespace when its state changes
// (memberState), and returns the states by member name.
func (p *printer) showMembers(ctx context.Context, c client.Client, gang string) (map[string]string, error) {
	pods, err := demoPods(ctx, c, client.MatchingLabels{berthv1alpha1.PodGroupLabel: gang})
	if err != nil {
		return nil, fmt.Errorf("reading the members of %s: %w", gang, err)
	}
	states := make(map[string]string, len(pods))
	for _, m := range pods {
		st := memberState(&m)
		states[m.Name] = st
		p.change("member/"+m.Name, st, "  member %s: %s", m.Name, st)
	}
	return states, nil
}

// memberState is "gated", "released", "bound to NODE" or "running on NODE".
func memberState(m *corev1.Pod) string {
	switch {
	case m.Status.Phase == corev1.PodRunning:
		return "running on " + m.Spec.NodeName
	case m.Spec.NodeName != "":
		return "bound to " + m.Spec.NodeName
	case len(m.Spec.SchedulingGates) == 0:
		return "released"
	}
	return gated
}

// runningMembers counts the members that run.
func runningMembers(states map[string]string) int {
	n := 0
	for _, st := range states {
		if strings.HasPrefix(st, "running on ") {
			n++
		}
	}
	return n
}
