package targets

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
)

// Karpenter's pod event reasons (sigs.k8s.io/karpenter pkg/events, recorded with source
// component "karpenter"): Nominated when it found or is launching a node for the pod,
// FailedScheduling when it cannot.
const (
	karpenterSource           = "karpenter"
	karpenterNominated        = "Nominated"
	karpenterFailedScheduling = "FailedScheduling"
)

// KarpenterVerdicts follows Karpenter's pod events and remembers, per pod, whether its latest
// word was that it cannot launch a node for the pod. It is a CapacityVerdicts.
type KarpenterVerdicts struct {
	mu       sync.Mutex
	latest   map[types.UID]verdict
	informer toolscache.SharedIndexInformer
}

type verdict struct {
	at       time.Time
	noNode   bool
	eventKey types.UID // the event that said it
}

// NewKarpenterVerdicts watches Karpenter's events about pods (events are namespaced; an empty
// namespace watches all). Start it with Run; until its first list completes it knows nothing,
// and unschedulable pods count as starting until their startup timeout.
func NewKarpenterVerdicts(cs kubernetes.Interface, namespace string) *KarpenterVerdicts {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("source", karpenterSource), fields.OneTermEqualSelector("involvedObject.kind", "Pod")).String()
	lw := toolscache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "events", namespace, func(o *metav1.ListOptions) { o.FieldSelector = sel })
	k := &KarpenterVerdicts{latest: map[types.UID]verdict{}}
	k.informer = toolscache.NewSharedIndexInformer(lw, &corev1.Event{}, 0, toolscache.Indexers{})
	_, _ = k.informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.observe(o) },
		UpdateFunc: func(_, o any) { k.observe(o) },
		DeleteFunc: func(o any) { k.forget(o) },
	})
	return k
}

// Run runs the informer until ctx ends.
func (k *KarpenterVerdicts) Run(ctx context.Context) { k.informer.RunWithContext(ctx) }

// NoCapacity reports whether Karpenter's latest word on the pod is FailedScheduling.
func (k *KarpenterVerdicts) NoCapacity(uid types.UID) bool {
	if !k.informer.HasSynced() {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.latest[uid].noNode
}

func (k *KarpenterVerdicts) observe(o any) {
	e, ok := o.(*corev1.Event)
	if !ok || (e.Reason != karpenterNominated && e.Reason != karpenterFailedScheduling) {
		return
	}
	at := eventTime(e)
	k.mu.Lock()
	defer k.mu.Unlock()
	if prev, ok := k.latest[e.InvolvedObject.UID]; ok && prev.at.After(at) {
		return
	}
	k.latest[e.InvolvedObject.UID] = verdict{at: at, noNode: e.Reason == karpenterFailedScheduling, eventKey: e.UID}
}

// forget drops a pod's verdict when the event that gave it expires.
func (k *KarpenterVerdicts) forget(o any) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	e, ok := o.(*corev1.Event)
	if !ok {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if v, ok := k.latest[e.InvolvedObject.UID]; ok && v.eventKey == e.UID {
		delete(k.latest, e.InvolvedObject.UID)
	}
}

// eventTime is when an event last happened: its series' last observation, its last timestamp,
// its event time, or its creation, whichever is set first in that order.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
