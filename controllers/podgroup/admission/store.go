package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// clusterReader is where a cycle reads the PodGroups, pods and nodes it decides on. The objects
// it returns are shared (with the cache, or between cycles) and never modified; PodGroups are
// the cycle's own shallow copies, so a status write can record what was stored in them.
type clusterReader interface {
	read(ctx context.Context) ([]*berthv1alpha1.PodGroup, []*corev1.Pod, []*corev1.Node, error)
}

// listReader lists from a client (the cache) without deep copies: a reader for a Reconciler that
// runs without a manager (tests).
type listReader struct{ c client.Reader }

func (l listReader) read(ctx context.Context) ([]*berthv1alpha1.PodGroup, []*corev1.Pod, []*corev1.Node, error) {
	var groups berthv1alpha1.PodGroupList
	if err := l.c.List(ctx, &groups, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, nil, fmt.Errorf("listing PodGroups: %w", err)
	}
	var pods corev1.PodList
	if err := l.c.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	var nodes corev1.NodeList
	if err := l.c.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	return ptrs(groups.Items), ptrs(pods.Items), ptrs(nodes.Items), nil
}

// storeReader reads from stores the informers keep up to date event by event: a cycle starts
// without listing or copying the cluster.
type storeReader struct {
	groups *objectStore[*berthv1alpha1.PodGroup]
	pods   *objectStore[*corev1.Pod]
	nodes  *objectStore[*corev1.Node]
	// podList and nodeList are the last read's lists, refilled by the next: cycles run one at
	// a time and none keeps a list past its end (a list of every pod per cycle was garbage).
	podList  []*corev1.Pod
	nodeList []*corev1.Node
}

// newStoreReader registers the stores with the cache's informers; each fires t after recording
// an event that can change a decision.
func newStoreReader(ctx context.Context, c cache.Cache, t *trigger) (*storeReader, error) {
	s := &storeReader{
		groups: newObjectStore(groupChanged, t.fire),
		pods:   newObjectStore(podChanged, t.fire),
		nodes:  newObjectStore(nodeChanged, t.fire),
	}
	var errs []error
	for _, reg := range []struct {
		obj   client.Object
		store interface {
			toolscache.ResourceEventHandler
			registered(toolscache.ResourceEventHandlerRegistration)
		}
	}{{&berthv1alpha1.PodGroup{}, s.groups}, {&corev1.Pod{}, s.pods}, {&corev1.Node{}, s.nodes}} {
		inf, err := c.GetInformer(ctx, reg.obj)
		if err != nil {
			errs = append(errs, fmt.Errorf("informer for %T: %w", reg.obj, err))
			continue
		}
		h, err := inf.AddEventHandler(reg.store)
		if err != nil {
			errs = append(errs, fmt.Errorf("watching %T: %w", reg.obj, err))
			continue
		}
		reg.store.registered(h)
	}
	t.synced = s.synced
	return s, errors.Join(errs...)
}

// synced reports whether every store has the informers' initial lists.
func (s *storeReader) synced() bool {
	return s.groups.synced() && s.pods.synced() && s.nodes.synced()
}

// errNotSynced: a store has not received the informer's initial list yet.
var errNotSynced = errors.New("the admission stores have not synced with the cache yet")

func (s *storeReader) read(context.Context) ([]*berthv1alpha1.PodGroup, []*corev1.Pod, []*corev1.Node, error) {
	if !s.synced() {
		return nil, nil, nil, errNotSynced
	}
	shared := s.groups.list()
	groups := make([]berthv1alpha1.PodGroup, len(shared))
	for i, g := range shared {
		groups[i] = *g
	}
	s.podList, s.nodeList = s.pods.appendTo(s.podList), s.nodes.appendTo(s.nodeList)
	return ptrs(groups), s.podList, s.nodeList, nil
}

// release drops the last read's lists' pointers (their arrays are kept for the next read).
func (s *storeReader) release() {
	clear(s.podList)
	clear(s.nodeList)
}

// objectStore holds the objects of one kind as informer events leave them, by namespace and
// name (as the informer keys them): pointers to
// the cache's own objects, which nothing may modify. After recording an event it calls fire,
// unless changed says an update alters nothing a decision reads.
type objectStore[T client.Object] struct {
	mu      sync.RWMutex
	items   map[types.NamespacedName]T
	reg     toolscache.ResourceEventHandlerRegistration
	changed func(old, new T) bool
	fire    func()
}

func newObjectStore[T client.Object](changed func(old, new T) bool, fire func()) *objectStore[T] {
	return &objectStore[T]{items: map[types.NamespacedName]T{}, changed: changed, fire: fire}
}

func (s *objectStore[T]) registered(r toolscache.ResourceEventHandlerRegistration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reg = r
}

// synced reports whether the store has every object of the informer's initial list.
func (s *objectStore[T]) synced() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.reg != nil && s.reg.HasSynced()
}

// OnAdd records a new object (or one of the initial list).
func (s *objectStore[T]) OnAdd(obj any, _ bool) {
	if o, ok := obj.(T); ok {
		s.put(o)
		s.fire()
	}
}

// OnUpdate records an object's new version.
func (s *objectStore[T]) OnUpdate(oldObj, newObj any) {
	o, ok1 := oldObj.(T)
	n, ok2 := newObj.(T)
	if !ok2 {
		return
	}
	s.put(n)
	if !ok1 || o.GetUID() != n.GetUID() || s.changed(o, n) {
		s.fire()
	}
}

func (s *objectStore[T]) put(o T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items[client.ObjectKeyFromObject(o)] = o
}

// OnDelete forgets an object, also when the informer only knows its last state.
func (s *objectStore[T]) OnDelete(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if o, ok := obj.(T); ok {
		s.mu.Lock()
		delete(s.items, client.ObjectKeyFromObject(o))
		s.mu.Unlock()
		s.fire()
	}
}

// list is every object, in no particular order.
func (s *objectStore[T]) list() []T { return s.appendTo(nil) }

// appendTo refills buf (its contents are dropped) with every object, in no particular order.
func (s *objectStore[T]) appendTo(buf []T) []T {
	s.mu.RLock()
	defer s.mu.RUnlock()
	clear(buf)
	out := slices.Grow(buf[:0], len(s.items))
	for _, o := range s.items {
		out = append(out, o)
	}
	return out
}

// trigger is the cycle's event source: the stores fire it after recording an event, so a cycle
// never runs ahead of the objects that started it (a watch of its own on the same informers
// could deliver the event first). All events map to the one cycle key; the queue coalesces them.
type trigger struct {
	mu     sync.Mutex
	queue  workqueue.TypedRateLimitingInterface[reconcile.Request]
	synced func() bool
}

var _ source.TypedSyncingSource[reconcile.Request] = &trigger{}

// Start keeps the controller's queue and asks for a first cycle.
func (t *trigger) Start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	t.mu.Lock()
	t.queue = q
	t.mu.Unlock()
	q.Add(cycleKey)
	return nil
}

// WaitForSync holds the controller's workers until the stores have the informers' initial lists.
func (t *trigger) WaitForSync(ctx context.Context) error {
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return t.synced != nil && t.synced(), nil
	}); err != nil {
		return fmt.Errorf("waiting for the admission stores to sync: %w", err)
	}
	return nil
}

func (t *trigger) String() string { return "admission stores" }

// fire asks for a cycle (before Start, the first cycle covers it).
func (t *trigger) fire() {
	t.mu.Lock()
	q := t.queue
	t.mu.Unlock()
	if q != nil {
		q.Add(cycleKey)
	}
}
