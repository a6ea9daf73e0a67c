package warmseats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/targets"
)

// Defaults of the Keeper.
const (
	// DefaultInterval is how often the keeper looks at every fleet's seats.
	DefaultInterval = 5 * time.Second
	// DefaultWantTTL is how long an evaluation's want counts: a ScaledObject that the scaler
	// has not evaluated for that long (KEDA talks to another scaler replica, or stopped) is
	// left alone. After a restart the keeper deletes nothing for that long either.
	DefaultWantTTL = 2 * time.Minute
	// templateTTL is how long a ScaledObject's pod template is reused.
	templateTTL = 30 * time.Second
)

// Keeper keeps each fleet's warm seats at what the scaler's evaluations ask for (Wants).
type Keeper struct {
	// Client creates and deletes seats; Pods lists them (normally an informer cache); API
	// reads ScaledObjects and their targets.
	Client client.Writer
	Pods   client.Reader
	API    client.Reader
	// ScaledObjects, when set, reads a ScaledObject on every pass (normally the scaler's watch,
	// targets.WatchScaledObjects): one retargeted or whose triggers changed is read again at
	// once, not after templateTTL.
	ScaledObjects client.Reader
	Wants         *Wants
	// PauseImage is the seats' own container; Pull how they pull the serving images.
	PauseImage string
	Pull       Pull
	// Interval and WantTTL default to DefaultInterval and DefaultWantTTL.
	Interval, WantTTL time.Duration
	Clock             clock.PassiveClock
	Log               logr.Logger

	started   time.Time
	mu        sync.Mutex
	templates map[Key]cachedTemplate
}

type cachedTemplate struct {
	at       time.Time
	spec     string // the ScaledObject's UID and generation, when read from ScaledObjects
	template *corev1.PodTemplateSpec
	gone     bool // the ScaledObject is not there, or asks for no seats
	refused  *refusal
}

// refusal: a ScaledObject asks for seats its scale target can never have (a LeaderWorkerSet, a
// kind without a pod template, a target that is not there). Its seats go and the policy holds
// none of its headroom as seats.
type refusal struct {
	why   string
	seats int // what the trigger asks for
}

func (r *refusal) Error() string { return r.why }

// Run keeps the seats until ctx is done.
func (k *Keeper) Run(ctx context.Context) {
	k.started = k.clock().Now()
	interval := k.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := k.Reconcile(ctx); err != nil {
			k.Log.Error(err, "keeping warm seats")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Reconcile looks at every fleet with seats or a want once: observe the seats and wants,
// decide each fleet's plan, act. One fleet's errors do not stop the others'.
func (k *Keeper) Reconcile(ctx context.Context) error {
	now := k.clock().Now()
	ttl := k.WantTTL
	if ttl <= 0 {
		ttl = DefaultWantTTL
	}
	wants := k.Wants.Fresh(now.Add(-ttl))
	seats, err := k.listSeats(ctx)
	if err != nil {
		return err
	}
	keys := map[Key]bool{}
	for key := range wants {
		keys[key] = true
	}
	for key := range seats {
		keys[key] = true
	}
	var errs []error
	for key := range keys {
		w, ok := wants[key]
		if !ok && now.Sub(k.started) < ttl {
			continue // just started: the evaluations that ask for these seats are yet to come
		}
		if err := k.keep(ctx, key, w, ok, seats[key], now); err != nil {
			errs = append(errs, fmt.Errorf("warm seats of ScaledObject %s/%s: %w", key.Namespace, key.Name, err))
		}
	}
	forget(keys)
	return errors.Join(errs...)
}

// keep brings one fleet's seats to its want. Without a fresh want, the seats stay unless the
// ScaledObject is gone or no longer asks for seats: another scaler replica may be the one KEDA
// asks.
func (k *Keeper) keep(ctx context.Context, key Key, w Want, fresh bool, seats []Seat, now time.Time) error {
	if fresh && w.Seats == 0 && len(seats) == 0 && k.Wants.Refused(key) == "" {
		return nil // nothing asked, nothing there (a refusal is looked at again: its target may be fixed)
	}
	tmpl, gone, err := k.template(ctx, key, now)
	var refused *refusal
	if errors.As(err, &refused) {
		// Seats this fleet can never have: none kept (those there go), and the policy told,
		// so it holds none of the fleet's headroom as seats.
		if k.Wants.Refused(key) != refused.Error() {
			k.Log.Info("keeping no warm seats for a ScaledObject that asks for them; its headroom is held as serving replicas",
				"namespace", key.Namespace, "scaledObject", key.Name, "why", refused.Error())
		}
		k.Wants.Refuse(key, refused.Error())
		gone, err = true, nil
	} else if err == nil {
		k.Wants.Refuse(key, "")
	}
	if err != nil {
		return err
	}
	want := w.Seats
	switch {
	case gone:
		want = 0
	case !fresh:
		return nil
	}
	hash := ""
	var pod *corev1.Pod
	if !gone {
		if pod, err = SeatPod(key.Namespace, key.Name, tmpl, k.PauseImage, k.Pull); err != nil {
			return err
		}
		hash = pod.Labels[berthv1alpha1.WarmSeatTemplateLabel]
	}
	plan := Decide(want, w.AtLeast && !gone, hash, seats)
	asked := 0
	if refused != nil {
		asked = refused.seats
	}
	record(key, want, seats, hash, asked)
	var errs []error
	for _, s := range plan.Delete {
		errs = append(errs, k.delete(ctx, key, s))
	}
	for range plan.Create {
		errs = append(errs, k.create(ctx, key, pod))
	}
	for _, s := range plan.Unprotect {
		errs = append(errs, k.unprotect(ctx, key, s))
	}
	return errors.Join(errs...)
}

// unprotect takes karpenter.sh/do-not-disrupt off a seat (made so by an older berth), in place:
// the seat keeps its node, which Karpenter's drift and expiry may then replace. The patch names
// the seat's UID, so a pod made since under its name is not touched.
func (k *Keeper) unprotect(ctx context.Context, key Key, s Seat) error {
	p := &corev1.Pod{}
	p.Namespace, p.Name = key.Namespace, s.Name
	patch := fmt.Sprintf(`{"metadata":{"uid":%q,"annotations":{%q:null}}}`, s.UID, karpv1.DoNotDisruptAnnotationKey)
	err := k.Client.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(patch)))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsInvalid(err) {
		err = nil // gone, or another pod of that name (its UID is not the patch's: 422 Invalid)
	}
	count(key, "unprotect", err)
	if err != nil {
		return fmt.Errorf("taking do-not-disrupt off warm seat %s: %w", s.Name, err)
	}
	k.Log.V(1).Info("took do-not-disrupt off a warm seat", "namespace", key.Namespace, "scaledObject", key.Name, "pod", s.Name)
	return nil
}

func (k *Keeper) create(ctx context.Context, key Key, pod *corev1.Pod) error {
	p := pod.DeepCopy()
	err := k.Client.Create(ctx, p)
	count(key, "create", err)
	if err != nil {
		return fmt.Errorf("creating a warm seat: %w", err)
	}
	k.Log.V(1).Info("created a warm seat", "namespace", key.Namespace, "scaledObject", key.Name, "pod", p.Name)
	return nil
}

func (k *Keeper) delete(ctx context.Context, key Key, s Seat) error {
	p := &corev1.Pod{}
	p.Namespace, p.Name = key.Namespace, s.Name
	err := k.Client.Delete(ctx, p, client.Preconditions{UID: ptrUID(s.UID)})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		err = nil // gone already, or another pod of that name
	}
	count(key, "delete", err)
	if err != nil {
		return fmt.Errorf("deleting warm seat %s: %w", s.Name, err)
	}
	k.Log.V(1).Info("deleted a warm seat", "namespace", key.Namespace, "scaledObject", key.Name, "pod", s.Name)
	return nil
}

func ptrUID(uid string) *types.UID {
	u := types.UID(uid)
	return &u
}

// listSeats returns the warm seats not being deleted, by the ScaledObject they are for.
func (k *Keeper) listSeats(ctx context.Context) (map[Key][]Seat, error) {
	var list corev1.PodList
	if err := k.Pods.List(ctx, &list, client.MatchingLabels{berthv1alpha1.ComponentLabel: berthv1alpha1.WarmSeatComponent}); err != nil {
		return nil, fmt.Errorf("listing warm seats: %w", err)
	}
	out := map[Key][]Seat{}
	for i := range list.Items {
		p := &list.Items[i]
		so := p.Labels[berthv1alpha1.WarmSeatForLabel]
		if so == "" || p.DeletionTimestamp != nil {
			continue
		}
		key := Key{p.Namespace, so}
		out[key] = append(out[key], Seat{Name: p.Name, UID: string(p.UID), Template: p.Labels[berthv1alpha1.WarmSeatTemplateLabel],
			Node: p.Spec.NodeName, Ready: podReady(p), Created: p.CreationTimestamp.Time,
			Dead:         p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded,
			DoNotDisrupt: p.Annotations[karpv1.DoNotDisruptAnnotationKey] == "true"})
	}
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// template is the pod template of the ScaledObject's scale target (reused for templateTTL,
// while the ScaledObject's spec is the same); gone when the ScaledObject is not there or none
// of its triggers asks for warm seats.
func (k *Keeper) template(ctx context.Context, key Key, now time.Time) (*corev1.PodTemplateSpec, bool, error) {
	var so *unstructured.Unstructured
	spec := ""
	if k.ScaledObjects != nil {
		so = &unstructured.Unstructured{}
		so.SetGroupVersionKind(targets.ScaledObjectGVK)
		switch err := k.ScaledObjects.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, so); {
		case apierrors.IsNotFound(err):
			so = nil // gone, or created a moment ago: read through the API
		case err != nil:
			return nil, false, fmt.Errorf("reading the ScaledObject: %w", err)
		default:
			spec = fmt.Sprintf("%s/%d", so.GetUID(), so.GetGeneration())
		}
	}
	k.mu.Lock()
	c, ok := k.templates[key]
	k.mu.Unlock()
	if ok && now.Sub(c.at) < templateTTL && c.spec == spec {
		if c.refused != nil {
			return nil, true, c.refused
		}
		return c.template, c.gone, nil
	}
	tmpl, gone, err := k.readTemplate(ctx, key, so)
	var refused *refusal
	if err != nil && !errors.As(err, &refused) {
		return nil, false, err
	}
	k.mu.Lock()
	if k.templates == nil {
		k.templates = map[Key]cachedTemplate{}
	}
	k.templates[key] = cachedTemplate{at: now, spec: spec, template: tmpl, gone: gone, refused: refused}
	for other, old := range k.templates {
		if now.Sub(old.at) > 10*templateTTL {
			delete(k.templates, other)
		}
	}
	k.mu.Unlock()
	if refused != nil {
		return nil, true, refused
	}
	return tmpl, gone, nil
}

// readTemplate reads the pod template of the ScaledObject so's scale target (so read through
// the API where nil).
func (k *Keeper) readTemplate(ctx context.Context, key Key, so *unstructured.Unstructured) (*corev1.PodTemplateSpec, bool, error) {
	if so == nil {
		so = &unstructured.Unstructured{}
		so.SetGroupVersionKind(targets.ScaledObjectGVK)
		if err := k.API.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, so); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, true, nil
			}
			return nil, false, fmt.Errorf("reading the ScaledObject: %w", err)
		}
	}
	asked := asksForSeats(so)
	if asked == 0 {
		return nil, true, nil
	}
	if len(key.Name) > validation.LabelValueMaxLength {
		return nil, false, &refusal{fmt.Sprintf("the ScaledObject's name is %d characters: its seats are labelled with it, and a label value holds at most %d", len(key.Name), validation.LabelValueMaxLength), asked}
	}
	ref, _, _ := unstructured.NestedStringMap(so.Object, "spec", "scaleTargetRef")
	apiVersion, kind := ref["apiVersion"], ref["kind"]
	if apiVersion == "" {
		apiVersion = "apps/v1"
	}
	if kind == "" {
		kind = "Deployment"
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, false, fmt.Errorf("scaleTargetRef.apiVersion %q: %w", apiVersion, err)
	}
	if gv.Group == berthv1alpha1.LWSGroup {
		return nil, false, &refusal{fmt.Sprintf("%s %s: warm seats hold a node for a one-pod replica, and a LeaderWorkerSet group spans nodes (its capacity comes whole from gang provisioning; docs/multi-node-inference.md): remove warmSeats from the trigger", kind, ref["name"]), asked}
	}
	target := &unstructured.Unstructured{}
	target.SetGroupVersionKind(gv.WithKind(kind))
	if err := k.API.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: ref["name"]}, target); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, &refusal{fmt.Sprintf("%s %s, the scale target, is not there", kind, ref["name"]), asked}
		}
		return nil, false, fmt.Errorf("reading %s %s, the scale target: %w", kind, ref["name"], err)
	}
	raw, found, err := unstructured.NestedMap(target.Object, "spec", "template")
	if err != nil || !found {
		return nil, false, &refusal{fmt.Sprintf("%s %s has no spec.template: warm seats need a pod template (Deployment, StatefulSet, ReplicaSet or alike)", kind, ref["name"]), asked}
	}
	tmpl := &corev1.PodTemplateSpec{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, tmpl); err != nil {
		return nil, false, fmt.Errorf("reading the pod template of %s %s: %w", kind, ref["name"], err)
	}
	return tmpl, false, nil
}

// asksForSeats is the most warm seats a trigger of the ScaledObject asks for (0: none).
func asksForSeats(so *unstructured.Unstructured) int {
	most := 0
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	for _, t := range triggers {
		tm, _ := t.(map[string]any)
		md, _, _ := unstructured.NestedStringMap(tm, "metadata")
		if n, err := strconv.Atoi(strings.TrimSpace(md[scaler.KeyWarmSeats])); err == nil {
			most = max(most, n)
		}
	}
	return most
}

func (k *Keeper) clock() clock.PassiveClock {
	if k.Clock == nil {
		return clock.RealClock{}
	}
	return k.Clock
}
