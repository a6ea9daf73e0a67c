// Package targets finds the replicas of a ScaledObject through the Kubernetes API: the pod
// selector comes from the trigger's podSelector or else from the scale target's /scale
// subresource (what the HPA itself uses), and pods and ScaledObjects come from informer caches.
package targets

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/scaler"
)

// ScaledObjectGVK is KEDA's ScaledObject, read as unstructured so berth does not link KEDA's
// API packages.
var ScaledObjectGVK = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}

// ErrTarget marks a scale target berth cannot resolve (no ScaledObject, no selector): the
// user's configuration, not a transient fault.
var ErrTarget = errors.New("scale target")

// Info is what berth knows about a ScaledObject's target.
type Info struct {
	// UID is the ScaledObject's UID ("" when it was not read: a ScaledJob with podSelector):
	// one deleted and created again under its name is another fleet to learn.
	UID string
	// Selector selects the target's pods.
	Selector labels.Selector
	// MaxReplicas is the ScaledObject's maxReplicaCount (0 when unknown, e.g. with podSelector
	// on a ScaledJob).
	MaxReplicas int
	// PollingInterval is the ScaledObject's pollingInterval (KEDA's default 30 s; 0 when
	// unknown): the cadence the scaler reads the replicas at in the background.
	PollingInterval time.Duration
	// Target is the ScaledObject's scaleTargetRef, whose /scale gave the selector (nil with the
	// trigger's podSelector, and for a ScaledJob): where Replicas reads the count the HPA moves
	// from.
	Target *TargetRef
}

// TargetRef names a ScaledObject's scale target.
type TargetRef struct {
	APIVersion, Kind, Name string
}

// Targets resolves ScaledObjects to their pods.
type Targets struct {
	// Pods reads pods, normally from an informer cache.
	Pods client.Reader
	// API reads /scale subresources (uncached; a target's selector is kept for TTL) and, where
	// ScaledObjects is nil, ScaledObjects (then kept for TTL too).
	API client.Client
	// ScaledObjects, when set, reads ScaledObjects on every resolution, normally from an
	// informer cache: a ScaledObject pointed at another target (blue to green) or given another
	// maxReplicaCount is resolved anew as soon as the watch brings it. Without it a
	// ScaledObject read through API is reused for TTL, and a retarget is seen up to TTL late.
	ScaledObjects client.Reader
	// Capacity, when set, tells whether Karpenter said it cannot launch a node for an
	// unschedulable pod; without it an unschedulable pod counts as starting until the
	// trigger's startup timeout.
	Capacity CapacityVerdicts
	// TTL is how long a target's /scale selector is reused, and a ScaledObject read through
	// API (default 30s).
	TTL   time.Duration
	Clock clock.PassiveClock

	mu        sync.Mutex
	objects   map[client.ObjectKey]cachedObject
	selectors map[targetKey]cachedSelector
}

// targetKey names a scale target in a namespace.
type targetKey struct {
	namespace string
	TargetRef
}

type cachedObject struct {
	at  time.Time
	obj *unstructured.Unstructured
	err error // not found, or KEDA's API not served (obj nil)
}

type cachedSelector struct {
	at  time.Time
	sel labels.Selector
}

// Resolve returns the target's selector (the trigger's podSelector, if set) and limits.
func (t *Targets) Resolve(ctx context.Context, namespace, name string, tr *scaler.Trigger) (Info, error) {
	needSelector := tr.PodSelector == nil
	so, err := t.scaledObject(ctx, namespace, name, needSelector)
	if err != nil {
		if !needSelector && (apierrors.IsNotFound(err) || isNoKind(err)) {
			// A ScaledJob, or KEDA's API absent: podSelector is enough.
			return Info{Selector: tr.PodSelector}, nil
		}
		if apierrors.IsNotFound(err) {
			return Info{}, fmt.Errorf("%w: ScaledObject %s/%s not found (a ScaledJob needs podSelector in the trigger metadata): %w", ErrTarget, namespace, name, err)
		}
		return Info{}, fmt.Errorf("reading ScaledObject %s/%s: %w", namespace, name, err)
	}
	info, target := parseScaledObject(so)
	if !needSelector {
		// The trigger's podSelector is the replicas: the target's /scale is not read (berth's
		// RBAC may not cover its kind), and held decisions keep the live replicas.
		info.Selector = tr.PodSelector
		return info, nil
	}
	if target.Name == "" {
		return Info{}, fmt.Errorf("%w: ScaledObject %s/%s has no spec.scaleTargetRef.name", ErrTarget, namespace, name)
	}
	sel, err := t.selector(ctx, namespace, target)
	if err != nil {
		return Info{}, fmt.Errorf("ScaledObject %s/%s: %w", namespace, name, err)
	}
	info.Selector, info.Target = sel, &target
	return info, nil
}

func (t *Targets) clock() clock.PassiveClock {
	if t.Clock == nil {
		return clock.RealClock{}
	}
	return t.Clock
}

func (t *Targets) ttl() time.Duration {
	if t.TTL <= 0 {
		return 30 * time.Second
	}
	return t.TTL
}

// scaledObject reads a ScaledObject: from ScaledObjects each time, or from API at most once a
// TTL. Errors are not kept, but for one a trigger with podSelector may go on without (not
// found, KEDA's API not served: a ScaledJob), which would otherwise be read on every
// evaluation.
func (t *Targets) scaledObject(ctx context.Context, namespace, name string, needSelector bool) (*unstructured.Unstructured, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	newSO := func() *unstructured.Unstructured {
		so := &unstructured.Unstructured{}
		so.SetGroupVersionKind(ScaledObjectGVK)
		return so
	}
	if t.ScaledObjects != nil {
		so := newSO()
		err := t.ScaledObjects.Get(ctx, key, so)
		if apierrors.IsNotFound(err) && needSelector {
			// KEDA created it a moment ago, and the watch has not brought it yet.
			so = newSO()
			err = t.API.Get(ctx, key, so)
		}
		if err != nil {
			return nil, err
		}
		return so, nil
	}
	now := t.clock().Now()
	t.mu.Lock()
	c, ok := t.objects[key]
	t.mu.Unlock()
	if ok && now.Sub(c.at) <= t.ttl() && (c.err == nil || !needSelector) {
		return c.obj, c.err
	}
	so := newSO()
	err := t.API.Get(ctx, key, so)
	if err != nil {
		if !apierrors.IsNotFound(err) && !isNoKind(err) {
			return nil, err
		}
		so = nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.objects == nil {
		t.objects = map[client.ObjectKey]cachedObject{}
	}
	t.objects[key] = cachedObject{at: now, obj: so, err: err}
	for k, old := range t.objects { // forget ScaledObjects KEDA stopped asking about
		if now.Sub(old.at) > 10*t.ttl() {
			delete(t.objects, k)
		}
	}
	return so, err
}

// parseScaledObject reads the limits and the scale target of a ScaledObject, with KEDA's
// defaults for what it omits.
func parseScaledObject(so *unstructured.Unstructured) (Info, TargetRef) {
	info := Info{UID: string(so.GetUID()), MaxReplicas: 100, PollingInterval: 30 * time.Second} // KEDA's defaults
	if n, found, _ := unstructured.NestedInt64(so.Object, "spec", "maxReplicaCount"); found {
		info.MaxReplicas = int(n)
	}
	if n, found, _ := unstructured.NestedInt64(so.Object, "spec", "pollingInterval"); found && n > 0 {
		info.PollingInterval = time.Duration(n) * time.Second
	}
	ref, _, _ := unstructured.NestedStringMap(so.Object, "spec", "scaleTargetRef")
	target := TargetRef{APIVersion: ref["apiVersion"], Kind: ref["kind"], Name: ref["name"]}
	if target.APIVersion == "" {
		target.APIVersion = "apps/v1"
	}
	if target.Kind == "" {
		target.Kind = "Deployment"
	}
	return info, target
}

// selector is the pod selector target's /scale reports, read at most once a TTL per target (a
// Deployment's or StatefulSet's selector cannot change; one deleted and created again with
// another is seen up to TTL late).
func (t *Targets) selector(ctx context.Context, namespace string, target TargetRef) (labels.Selector, error) {
	key := targetKey{namespace, target}
	now := t.clock().Now()
	t.mu.Lock()
	c, ok := t.selectors[key]
	t.mu.Unlock()
	if ok && now.Sub(c.at) <= t.ttl() {
		return c.sel, nil
	}
	scale, err := t.readScale(ctx, namespace, target)
	if err != nil {
		return nil, err
	}
	selector, _, _ := unstructured.NestedString(scale.Object, "status", "selector")
	if selector == "" {
		return nil, fmt.Errorf("%w: %s %s/%s reports no selector in /scale; set podSelector in the trigger metadata", ErrTarget, target.Kind, namespace, target.Name)
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s/%s selector %q: %w", ErrTarget, target.Kind, namespace, target.Name, selector, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.selectors == nil {
		t.selectors = map[targetKey]cachedSelector{}
	}
	t.selectors[key] = cachedSelector{at: now, sel: sel}
	for k, old := range t.selectors {
		if now.Sub(old.at) > 10*t.ttl() {
			delete(t.selectors, k)
		}
	}
	return sel, nil
}

// readScale reads the /scale subresource of target in namespace.
func (t *Targets) readScale(ctx context.Context, namespace string, target TargetRef) (*unstructured.Unstructured, error) {
	gv, err := schema.ParseGroupVersion(target.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("%w: scaleTargetRef.apiVersion %q: %w", ErrTarget, target.APIVersion, err)
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gv.WithKind(target.Kind))
	obj.SetNamespace(namespace)
	obj.SetName(target.Name)
	scale := &unstructured.Unstructured{}
	scale.SetGroupVersionKind(autoscalingv1.SchemeGroupVersion.WithKind("Scale"))
	if err := t.API.SubResource("scale").Get(ctx, obj, scale); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("%w: %s %s/%s (the scale target) not found: %w", ErrTarget, target.Kind, namespace, target.Name, err)
		case meta.IsNoMatchError(err):
			return nil, fmt.Errorf("%w: the scale target's kind %s %s is not served by this cluster: %w", ErrTarget, target.APIVersion, target.Kind, err)
		}
		return nil, fmt.Errorf("reading the /scale of %s %s/%s: %w", target.Kind, namespace, target.Name, err)
	}
	return scale, nil
}

// Replicas reads the spec.replicas of a resolved ScaledObject's target from its /scale, uncached
// (one GET per evaluation): the count the HPA moves from, which a held decision must keep — a
// count cached even for seconds could be one the HPA has left since, and holding at it would
// scale the fleet. ok is false where info names no target (a ScaledJob).
func (t *Targets) Replicas(ctx context.Context, namespace string, info Info) (replicas int, ok bool, err error) {
	if info.Target == nil {
		return 0, false, nil
	}
	scale, err := t.readScale(ctx, namespace, *info.Target)
	if err != nil {
		return 0, false, err
	}
	n, found, err := unstructured.NestedInt64(scale.Object, "spec", "replicas")
	if err != nil {
		return 0, false, fmt.Errorf("the /scale of %s %s/%s: spec.replicas: %w", info.Target.Kind, namespace, info.Target.Name, err)
	}
	if !found {
		return 0, true, nil // omitted: zero
	}
	return int(n), true, nil
}

func isNoKind(err error) bool { return meta.IsNoMatchError(err) }

// List returns the live pods matching sel in namespace: pods being deleted and pods that
// finished are left out. A pod that is not ready says when it was created and whether it is
// stuck (see Stuck). A LeaderWorkerSet's group is one replica, its leader, ready once every
// pod of the group is (see foldGroups).
func (t *Targets) List(ctx context.Context, namespace string, sel labels.Selector) ([]scaler.Pod, error) {
	var list corev1.PodList
	if err := t.Pods.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing pods %s in %s: %w", sel, namespace, err)
	}
	pods := list.Items[:0]
	out := make([]scaler.Pod, 0, len(list.Items))
	groups := false
	for i := range list.Items {
		p := &list.Items[i]
		if !live(p) {
			continue
		}
		if member, _, _ := lwsRole(p); member {
			groups = true
		}
		pods = append(pods, *p)
		out = append(out, t.replica(p))
	}
	if groups {
		return t.foldGroups(ctx, namespace, pods, out)
	}
	return out, nil
}

// live reports whether a pod is neither being deleted nor finished.
func live(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// replica is what the scaler reads of one pod.
func (t *Targets) replica(p *corev1.Pod) scaler.Pod {
	sp := scaler.Pod{Name: p.Name, UID: string(p.UID), IP: p.Status.PodIP, Ready: ready(p), Created: p.CreationTimestamp.Time, ReadyAt: readyAt(p), StartedAt: startedAt(p)}
	if !sp.Ready {
		sp.Stuck = Stuck(p, t.Capacity)
	}
	return sp
}

// ScaledObjectList is KEDA's ScaledObjectList, read as unstructured.
var ScaledObjectList = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObjectList"}

// SlimScaledObject is a cache transform that drops what the scaler never reads of a
// ScaledObject (managedFields, the last-applied annotation, status), so a cache of every
// ScaledObject stays small.
func SlimScaledObject(obj any) (any, error) {
	so, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	so.SetManagedFields(nil)
	unstructured.RemoveNestedField(so.Object, "status")
	if a := so.GetAnnotations(); a != nil {
		delete(a, corev1.LastAppliedConfigAnnotation)
		so.SetAnnotations(a)
	}
	return so, nil
}

// WatchScaledObjects starts a watch on ScaledObjects (in namespace, "" for all) with the
// rights of cfg and waits up to timeout for it to list them: the cache it returns serves
// Targets.ScaledObjects until ctx ends. Where it cannot — KEDA's CRD not served, or api may not
// list and watch ScaledObjects (checked first, so a scaler under an older ClusterRole is not
// held at its start), or the watch did not sync — nothing is left running and the error says
// why; the caller reads ScaledObjects through the API instead.
func WatchScaledObjects(ctx context.Context, cfg *rest.Config, namespace string, api client.Reader, timeout time.Duration) (client.Reader, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(ScaledObjectList)
	lctx, lcancel := context.WithTimeout(ctx, timeout)
	defer lcancel()
	if err := api.List(lctx, list, client.InNamespace(namespace), client.Limit(1)); err != nil {
		return nil, fmt.Errorf("listing ScaledObjects (may berth's scaler list and watch keda.sh scaledobjects?): %w", err)
	}
	if err := checkWatch(lctx, cfg, namespace, list.GetResourceVersion()); err != nil {
		return nil, err
	}
	so := &unstructured.Unstructured{}
	so.SetGroupVersionKind(ScaledObjectGVK)
	opts := cache.Options{Scheme: runtime.NewScheme(), ByObject: map[client.Object]cache.ByObject{so: {Transform: SlimScaledObject}}}
	if namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("creating the ScaledObjects' cache: %w", err)
	}
	cctx, stop := context.WithCancel(ctx)
	inf, err := c.GetInformer(cctx, so, cache.BlockUntilSynced(false))
	if err != nil {
		stop()
		return nil, fmt.Errorf("watching ScaledObjects: %w", err)
	}
	go func() { _ = c.Start(cctx) }()
	wctx, cancel := context.WithTimeout(cctx, timeout)
	defer cancel()
	if !toolscache.WaitForCacheSync(wctx.Done(), inf.HasSynced) {
		stop()
		return nil, fmt.Errorf("the ScaledObjects' watch did not sync within %s (may berth's scaler list and watch keda.sh scaledobjects?)", timeout)
	}
	context.AfterFunc(ctx, stop)
	return c, nil
}

// checkWatch opens a watch on ScaledObjects (in namespace, "" for all) from resourceVersion and
// closes it. A role that may list ScaledObjects but not watch them syncs an informer from its
// list; each refused watch is then logged and followed, after a backoff of up to 30 s, by
// another list — a cache as stale as reading through the API, and louder. Refused here (the
// watch Forbidden or Unauthorized), the scaler reads through the API and says why at its start.
// Any other error (a timeout, a server busy) is left to the informer, which retries it.
func checkWatch(ctx context.Context, cfg *rest.Config, namespace, resourceVersion string) error {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("a client to watch ScaledObjects: %w", err)
	}
	gvr := ScaledObjectGVK.GroupVersion().WithResource("scaledobjects")
	w, err := dc.Resource(gvr).Namespace(namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: resourceVersion, TimeoutSeconds: ptr.To[int64](1)})
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return fmt.Errorf("watching ScaledObjects (may berth's scaler list and watch keda.sh scaledobjects?): %w", err)
	case err != nil:
		return nil
	}
	w.Stop()
	return nil
}
