// Package targets finds the replicas of a ScaledObject through the Kubernetes API: the pod
// selector comes from the trigger's podSelector or else from the scale target's /scale
// subresource (what the HPA itself uses), and pods come from an informer cache.
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
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
	// API reads ScaledObjects and /scale subresources (uncached; results are kept for TTL).
	API client.Client
	// Capacity, when set, tells whether Karpenter said it cannot launch a node for an
	// unschedulable pod; without it an unschedulable pod counts as starting until the
	// trigger's startup timeout.
	Capacity CapacityVerdicts
	// TTL is how long a resolved selector is reused (default 30s).
	TTL   time.Duration
	Clock clock.PassiveClock

	mu    sync.Mutex
	infos map[infoKey]cachedInfo
}

// infoKey names a cached resolution: a ScaledObject read with or without its target's /scale
// selector. A trigger with podSelector reads none, and another trigger of the same
// ScaledObject without one must not reuse that (it would list no pods).
type infoKey struct {
	client.ObjectKey
	withSelector bool
}

type cachedInfo struct {
	at   time.Time
	info Info
}

// Resolve returns the target's selector (the trigger's podSelector, if set) and limits.
func (t *Targets) Resolve(ctx context.Context, namespace, name string, tr *scaler.Trigger) (Info, error) {
	clk := t.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	ttl := t.TTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	key := infoKey{client.ObjectKey{Namespace: namespace, Name: name}, tr.PodSelector == nil}
	t.mu.Lock()
	c, ok := t.infos[key]
	t.mu.Unlock()
	if !ok || clk.Since(c.at) > ttl {
		info, err := t.read(ctx, namespace, name, key.withSelector)
		if err != nil {
			return Info{}, err
		}
		c = cachedInfo{at: clk.Now(), info: info}
		t.mu.Lock()
		if t.infos == nil {
			t.infos = map[infoKey]cachedInfo{}
		}
		t.infos[key] = c
		for k, old := range t.infos { // forget ScaledObjects KEDA stopped asking about
			if c.at.Sub(old.at) > 10*ttl {
				delete(t.infos, k)
			}
		}
		t.mu.Unlock()
	}
	info := c.info
	if tr.PodSelector != nil {
		// The trigger's pods, whatever another trigger of the ScaledObject resolved: its /scale
		// is not read for it.
		info.Selector, info.Target = tr.PodSelector, nil
	}
	return info, nil
}

// read fetches the ScaledObject and, when needSelector, its target's /scale selector.
func (t *Targets) read(ctx context.Context, namespace, name string, needSelector bool) (Info, error) {
	so := &unstructured.Unstructured{}
	so.SetGroupVersionKind(ScaledObjectGVK)
	err := t.API.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, so)
	if err != nil {
		if !needSelector && (apierrors.IsNotFound(err) || isNoKind(err)) {
			return Info{}, nil // a ScaledJob, or KEDA's API absent: podSelector is enough
		}
		if apierrors.IsNotFound(err) {
			return Info{}, fmt.Errorf("%w: ScaledObject %s/%s not found (a ScaledJob needs podSelector in the trigger metadata): %w", ErrTarget, namespace, name, err)
		}
		return Info{}, fmt.Errorf("reading ScaledObject %s/%s: %w", namespace, name, err)
	}
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
	if !needSelector {
		// The trigger's podSelector is the replicas: the target's /scale is not read (berth's
		// RBAC may not cover its kind), and held decisions keep the live replicas.
		return info, nil
	}
	if target.Name == "" {
		return Info{}, fmt.Errorf("%w: ScaledObject %s/%s has no spec.scaleTargetRef.name", ErrTarget, namespace, name)
	}
	scale, err := t.readScale(ctx, namespace, target)
	if err != nil {
		return Info{}, fmt.Errorf("ScaledObject %s/%s: %w", namespace, name, err)
	}
	selector, _, _ := unstructured.NestedString(scale.Object, "status", "selector")
	if selector == "" {
		return Info{}, fmt.Errorf("%w: %s %s/%s reports no selector in /scale; set podSelector in the trigger metadata", ErrTarget, target.Kind, namespace, target.Name)
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return Info{}, fmt.Errorf("%w: %s %s/%s selector %q: %w", ErrTarget, target.Kind, namespace, target.Name, selector, err)
	}
	info.Selector, info.Target = sel, &target
	return info, nil
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
