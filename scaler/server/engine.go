// Package server is berth's KEDA external scaler: the gRPC service of KEDA's
// externalscaler.proto (IsActive, StreamIsActive, GetMetricSpec, GetMetrics) over the Engine
// that evaluates a ScaledObject — parse the trigger, find the target's pods, read their
// signals from the trigger's source, and apply the replica policy.
package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/pods"
	"github.com/berth-dev/berth/scaler/promsource"
	"github.com/berth-dev/berth/scaler/targets"
	"github.com/berth-dev/berth/scaler/warmseats"
)

// Resolver finds a ScaledObject's pods; *targets.Targets is the real one.
type Resolver interface {
	Resolve(ctx context.Context, namespace, name string, t *scaler.Trigger) (targets.Info, error)
	List(ctx context.Context, namespace string, sel labels.Selector) ([]scaler.Pod, error)
	// Replicas reads the target's spec.replicas now (ok false: info names no target).
	Replicas(ctx context.Context, namespace string, info targets.Info) (replicas int, ok bool, err error)
}

// Engine evaluates ScaledObjects.
type Engine struct {
	Resolver   Resolver
	Pods       *pods.Scraper
	Prometheus *promsource.Source
	Policy     scaler.Policy
	Clock      clock.PassiveClock
	// ModelStore, when set, keeps the fleet models across restarts and between the scaler's
	// replicas: read before a model this scaler has not fed lately learns, written by
	// SaveModels.
	ModelStore ModelStore
	// Seats, when set, receives the warm seats each GetMetrics evaluation asks for
	// (scaler.Decision.WarmSeats), for the warm seat keeper.
	Seats *warmseats.Wants

	series series
	owns   owns
	models models
	specs  specs
	// seatsWarned are the ScaledObjects told once that their warmSeats are ignored.
	seatsWarned sync.Map
}

// models keeps each ScaledObject's FleetModel between evaluations: what its SLO signal has
// learned of the fleet. A model is of a ScaledObject's name and fleet (fleetOf): one deleted
// and created again, pointed at other replicas or given another objective starts a new one,
// and the old one expires with the evaluations that stopped asking for it.
type models struct {
	mu sync.Mutex
	m  map[[3]string]*modelAt
}

type modelAt struct {
	model scaler.FleetModel
	// learned is when the model was last fed; window the end of the newest window it learned
	// from (KEDA asks IsActive and GetMetrics of the same windows, which count once).
	learned, window time.Time
	// born is when this scaler began it; loaded when the store was last read for it; saved
	// when it was last written, as of the window savedWindow (ModelStore).
	born, loaded, saved, savedWindow time.Time
	// gap is how long it may go unfed and still be this scaler's; unread says the store's
	// model of it was not read yet, failed that the last read failed (restoreModel).
	gap            time.Duration
	unread, failed bool
}

// fleetOf names the fleet a ScaledObject's model is of: the ScaledObject itself (its UID), the
// replicas it reads (its scale target and their selector, the model served) and the objective
// their capacity is measured at. What one replica carries at the SLO, its start-up and the
// demand's history belong to that fleet: a ScaledObject deleted and created again under its
// name, pointed at another Deployment (new GPUs, another model) or given another objective
// learns again — it never sizes on what the replicas before it carried. Two triggers of one
// ScaledObject on different replicas (a prefill and a decode pool) learn apart.
func fleetOf(info targets.Info, t *scaler.Trigger) string {
	target, selector := "", ""
	if info.Target != nil {
		target = info.Target.APIVersion + "/" + info.Target.Kind + "/" + info.Target.Name
	}
	if info.Selector != nil {
		selector = info.Selector.String()
	}
	return fmt.Sprintf("%s|%s|%s|%s|%g|%g|%g", info.UID, target, selector, t.Model, t.SLO.TTFT, t.SLO.ITL, t.SLO.Attainment)
}

// learn folds o into the model of the ScaledObject's fleet and returns a copy for Decide.
func (m *models) learn(ns, name, fleet string, o scaler.Observation, slo scaler.SLO, now time.Time) *scaler.FleetModel {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[[3]string]*modelAt{}
	}
	k := [3]string{ns, name, fleet}
	ma := m.m[k]
	if ma == nil {
		ma = &modelAt{born: now}
		m.m[k] = ma
	}
	if end := newestWindow(o); end.After(ma.window) {
		ma.model.Learn(o, slo, now)
		ma.window = end
	}
	ma.learned = now
	cp := ma.model.Clone()
	return &cp
}

// newestWindow is when the newest of o's replica windows ends (zero without one).
func newestWindow(o scaler.Observation) time.Time {
	var end time.Time
	for _, w := range o.Windows {
		if w.End.After(end) {
			end = w.End
		}
	}
	return end
}

// expire forgets the models of ScaledObjects not evaluated since before.
func (m *models) expire(before time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, ma := range m.m {
		if ma.learned.Before(before) {
			delete(m.m, k)
		}
	}
}

// followFresh is how recent a followed ScaledObject's evaluation must be to count.
const followFresh = 2 * time.Minute

// owns remembers each ScaledObject's own replica count (scaler.Decision.Own) for those that
// follow it.
type owns struct {
	mu sync.Mutex
	m  map[[2]string]ownAt
}

type ownAt struct {
	n  int
	at time.Time
}

func (o *owns) set(ns, name string, n int, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[[2]string]ownAt{}
	}
	o.m[[2]string{ns, name}] = ownAt{n, at}
}

// floor is what t's followed ScaledObject asks of this fleet: its own count times the ratio,
// NaN when it is not followed or not evaluated within followFresh.
func (o *owns) floor(ns string, t *scaler.Trigger, now time.Time) float64 {
	if t.Follow == "" {
		return math.NaN()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	v, ok := o.m[[2]string{ns, t.Follow}]
	if !ok || now.Sub(v.at) > followFresh {
		return math.NaN()
	}
	return float64(v.n) * t.FollowRatio
}

// Evaluation is one ScaledObject's evaluation.
type Evaluation struct {
	Trigger     *scaler.Trigger
	Observation scaler.Observation
	Decision    scaler.Decision
	// SeatsIgnored says why the trigger's warmSeats were not held as seats (no keeper, or the
	// keeper refuses the target): the policy held that headroom as serving replicas.
	SeatsIgnored string
}

// Error reasons of berth_scaler_evaluation_errors_total.
const (
	reasonInvalid     = "invalid_metadata"
	reasonTarget      = "target"
	reasonNoFreshData = "no_fresh_data"
	reasonSource      = "source"
)

// evalError carries the reason an evaluation failed, for metrics and the gRPC status.
type evalError struct {
	reason string
	err    error
}

func (e *evalError) Error() string { return e.err.Error() }
func (e *evalError) Unwrap() error { return e.err }

// Evaluate reads a ScaledObject's signals and decides its replicas. Errors carry a reason:
// bad metadata, an unresolvable target, no fresh data or a failing source — never a silent
// zero.
func (e *Engine) Evaluate(ctx context.Context, namespace, name string, metadata map[string]string) (Evaluation, error) {
	return e.evaluateFor(ctx, namespace, name, metadata, true)
}

// EvaluateActivity is Evaluate for a caller that only asks whether the ScaledObject is active
// (IsActive, StreamIsActive): the scale target's replicas are not read again for it (see
// specs.replicas).
func (e *Engine) EvaluateActivity(ctx context.Context, namespace, name string, metadata map[string]string) (Evaluation, error) {
	return e.evaluateFor(ctx, namespace, name, metadata, false)
}

func (e *Engine) evaluateFor(ctx context.Context, namespace, name string, metadata map[string]string, fresh bool) (Evaluation, error) {
	ev, err := e.evaluate(ctx, namespace, name, metadata, fresh)
	now := e.clock().Now()
	e.series.touch(namespace, name, now)
	if err != nil {
		var ee *evalError
		if errors.As(err, &ee) {
			evaluationErrors.WithLabelValues(namespace, name, ee.reason).Inc()
		}
		return ev, err
	}
	return ev, nil
}

func (e *Engine) evaluate(ctx context.Context, namespace, name string, metadata map[string]string, fresh bool) (Evaluation, error) {
	t, err := scaler.ParseTrigger(metadata)
	if err != nil {
		return Evaluation{}, &evalError{reasonInvalid, err}
	}
	ev := Evaluation{Trigger: t}
	if t.WarmSeats > 0 {
		// Headroom held as seats nobody keeps is headroom lost: without a keeper (the chart's
		// scaler.warmSeats.enabled off) or for a target the keeper refuses, the policy holds
		// all of it as serving replicas.
		if e.Seats == nil {
			ev.SeatsIgnored = "this scaler keeps no warm seats (the chart's scaler.warmSeats.enabled is false)"
		} else {
			ev.SeatsIgnored = e.Seats.Refused(warmseats.Key{Namespace: namespace, Name: name})
		}
		if ev.SeatsIgnored != "" {
			t.WarmSeats, t.MinWarmSeats = 0, 0
			if _, told := e.seatsWarned.LoadOrStore([2]string{namespace, name}, true); !told && e.Seats == nil {
				log.FromContext(ctx).Info("warmSeats ignored: the headroom is held as serving replicas", "namespace", namespace, "scaledObject", name, "why", ev.SeatsIgnored)
			}
		}
	}
	info, err := e.Resolver.Resolve(ctx, namespace, name, t)
	if err != nil {
		return ev, &evalError{reasonTarget, fmt.Errorf("ScaledObject %s/%s: %w", namespace, name, err)}
	}
	podList, err := e.Resolver.List(ctx, namespace, info.Selector)
	if err != nil {
		return ev, &evalError{reasonTarget, fmt.Errorf("ScaledObject %s/%s: %w", namespace, name, err)}
	}
	switch t.Source {
	case scaler.SourcePrometheus:
		ev.Observation, err = e.Prometheus.Observe(ctx, t, namespace, podList)
		if err != nil {
			return ev, &evalError{reasonSource, fmt.Errorf("ScaledObject %s/%s: %w", namespace, name, err)}
		}
	default:
		var results []pods.Result
		ev.Observation, results = e.Pods.Observe(ctx, t, podList, pods.Cadence(info.PollingInterval))
		if ev.Observation.Ready > 0 && ev.Observation.Sampled == 0 {
			return ev, &evalError{reasonNoFreshData, fmt.Errorf("ScaledObject %s/%s: %w; first error: %w", namespace, name, scaler.ErrNoFreshData, firstErr(results))}
		}
	}
	if t.DemandQuery != "" {
		if ev.Observation.Upstream, err = e.Prometheus.Demand(ctx, t); err != nil {
			return ev, &evalError{reasonSource, fmt.Errorf("ScaledObject %s/%s: %w", namespace, name, err)}
		}
	}
	// The count a held decision keeps is the HPA's (the live replicas where it cannot be read).
	ev.Observation.Spec, ev.Observation.HasSpec = e.specs.replicas(ctx, e.Resolver, namespace, name, info, fresh, e.clock().Now())
	ev.Observation.FollowReplicas = e.owns.floor(namespace, t, e.clock().Now())
	if t.SLO.TTFT > 0 {
		e.restoreModel(ctx, namespace, name, fleetOf(info, t), info.PollingInterval)
		ev.Observation.Model = e.models.learn(namespace, name, fleetOf(info, t), ev.Observation, t.SLO, e.clock().Now())
	}
	ev.Decision, err = e.Policy.Decide(ev.Observation, t)
	if err != nil {
		return ev, &evalError{reasonNoFreshData, fmt.Errorf("ScaledObject %s/%s: %w", namespace, name, err)}
	}
	now := e.clock().Now()
	e.owns.set(namespace, name, ev.Decision.Own, now)
	heldFor := e.series.heldFor(namespace, name, ev.Decision.Held == scaler.HeldStarting, now)
	record(namespace, name, t, ev.Decision, ev.Observation, info.MaxReplicas, heldFor, now)
	return ev, nil
}

// WantSeats tells the warm seat keeper what the evaluation ev of a ScaledObject asks for:
// its trigger's warmSeats split of the SLO signal's headroom, or none. The want is the KEDA
// connection's that the call in ctx came over, and goes when that connection ends.
func (e *Engine) WantSeats(ctx context.Context, namespace, name string, ev Evaluation) {
	if e.Seats == nil || ev.Trigger == nil {
		return
	}
	seats, held := 0, false
	if ev.Trigger.WarmSeats > 0 || ev.SeatsIgnored != "" {
		seats, held = ev.Decision.WarmSeats, ev.Decision.SeatsHeld
	}
	e.Seats.SetFrom(connFrom(ctx), warmseats.Key{Namespace: namespace, Name: name}, seats, held, e.clock().Now())
}

func firstErr(rs []pods.Result) error {
	for _, r := range rs {
		if r.Err != nil {
			return fmt.Errorf("pod %s: %w", r.Pod, r.Err)
		}
	}
	return errors.New("none reported")
}

// ExpireSeries drops the metric series of ScaledObjects not evaluated within d.
func (e *Engine) ExpireSeries(d time.Duration) {
	e.series.expire(e.clock().Now().Add(-d))
	e.models.expire(e.clock().Now().Add(-d))
	e.specs.expire(e.clock().Now().Add(-d))
	e.seatsWarned.Clear() // said again once a period, for the ScaledObjects still there
}

func (e *Engine) clock() clock.PassiveClock {
	if e.Clock == nil {
		return clock.RealClock{}
	}
	return e.Clock
}
