package server

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/modelstore"
	"github.com/berth-dev/berth/scaler/pods"
	"github.com/berth-dev/berth/scaler/promsource"
)

// memStore is a ModelStore in memory, as modelstore.Store keeps models (one per fleet, never
// written over one that learned later), counting its writes; err fails every call.
type memStore struct {
	mu     sync.Mutex
	snaps  map[[3]string]modelstore.Snapshot
	writes int
	err    error
}

func (s *memStore) Load(_ context.Context, ns, name, fleet string) (modelstore.Snapshot, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return modelstore.Snapshot{}, false, s.err
	}
	snap, ok := s.snaps[[3]string{ns, name, fleet}]
	return snap, ok, nil
}

func (s *memStore) Save(_ context.Context, ns, name string, snap modelstore.Snapshot) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false, s.err
	}
	if s.snaps == nil {
		s.snaps = map[[3]string]modelstore.Snapshot{}
	}
	k := [3]string{ns, name, snap.Fleet}
	if old, ok := s.snaps[k]; ok && old.LastLesson.After(snap.LastLesson) {
		return false, nil
	}
	s.snaps[k] = snap
	s.writes++
	return true, nil
}

func counterValue(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestARestartedScalerGoesOnFromTheStoredModel: a scaler that learned a fleet's capacity
// writes its model; a new scaler (a restart, or the replica KEDA turns to) sizes the fleet on
// it from its first evaluation, where without the store it holds to learn again. A model of
// another fleet under the same name (another objective) is not taken, a model that learned
// nothing new is not written again before RewriteEvery, and a store that fails never fails an
// evaluation.
func TestARestartedScalerGoesOnFromTheStoredModel(t *testing.T) {
	var finished, late atomic.Int64
	port, podList := queuedFleet(t, &finished, &late)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := &memStore{}
	newEngine := func(s ModelStore) *Engine {
		return &Engine{Resolver: &staticResolver{pods: podList}, Pods: pods.New(pods.Options{Clock: clk, TTFTWindow: time.Minute}),
			Prometheus: promsource.New(promsource.Options{}), Policy: scaler.DefaultPolicy, Clock: clk, ModelStore: s}
	}
	md := map[string]string{"ttftSLOSeconds": "2", "coldStartSeconds": "120", "metricsPort": strconv.Itoa(port)}
	capacity := func(eng *Engine, md map[string]string) float64 {
		t.Helper()
		ev, err := eng.Evaluate(context.Background(), "inference", "llama", md)
		if err != nil {
			t.Fatal(err)
		}
		return ev.Decision.Capacity
	}
	ctx := context.Background()

	first := newEngine(store)
	if c := capacity(first, md); c != 0 {
		t.Fatalf("a first evaluation with nothing stored: capacity %v, want none", c)
	}
	clk.Step(time.Minute)
	finished.Store(30) // a minute at the limit: capacity 0.375
	late.Store(20)
	if c := capacity(first, md); c != 0.375 {
		t.Fatalf("after a minute at the limit: capacity %v, want 0.375", c)
	}
	if err := first.SaveModels(ctx, false); err != nil || store.writes != 1 {
		t.Fatalf("SaveModels = %v with %d writes, want the model written once", err, store.writes)
	}
	clk.Step(SaveEvery)
	if err := first.SaveModels(ctx, false); err != nil || store.writes != 1 {
		t.Fatalf("a model that learned nothing since: SaveModels = %v with %d writes, want none more", err, store.writes)
	}

	restored := counterValue(t, modelsRestored.WithLabelValues("restored"))
	if c := capacity(newEngine(nil), md); c != 0 {
		t.Fatalf("a new scaler without the store: capacity %v, want none (learned again)", c)
	}
	if c := capacity(newEngine(store), md); c != 0.375 {
		t.Fatalf("a new scaler with the store: capacity %v, want the 0.375 learned before", c)
	}
	if got := counterValue(t, modelsRestored.WithLabelValues("restored")); got != restored+1 {
		t.Errorf("models_restored_total{outcome=restored} went from %v to %v, want one more", restored, got)
	}

	// Another objective under the same name is another fleet: it learns apart, and writing
	// its model leaves the first one's as it was.
	other := map[string]string{"ttftSLOSeconds": "3", "coldStartSeconds": "120", "metricsPort": strconv.Itoa(port)}
	second := newEngine(store)
	if c := capacity(second, other); c != 0 {
		t.Fatalf("another objective under the same name: capacity %v, want none (another fleet)", c)
	}
	clk.Step(time.Minute)
	finished.Store(60)
	late.Store(40)
	if c := capacity(second, other); c != 0.375 {
		t.Fatalf("the other fleet after a minute at the limit: capacity %v, want 0.375", c)
	}
	if err := second.SaveModels(ctx, true); err != nil || len(store.snaps) != 2 {
		t.Fatalf("SaveModels = %v, %d models kept; want the two fleets' apart", err, len(store.snaps))
	}
	if c := capacity(newEngine(store), md); c != 0.375 {
		t.Fatalf("the first fleet after the second's write: capacity %v, want its own 0.375", c)
	}

	failing := &memStore{err: errors.New("forbidden")}
	loadErrors := counterValue(t, modelStoreErrors.WithLabelValues("load"))
	if c := capacity(newEngine(failing), md); c != 0 {
		t.Fatalf("a failing store: capacity %v, want none", c)
	}
	if got := counterValue(t, modelStoreErrors.WithLabelValues("load")); got != loadErrors+1 {
		t.Errorf("model_store_errors_total{operation=load} went from %v to %v, want one more", loadErrors, got)
	}
}

// TestAModelIsReadOnceAfterAGap: the store is read for a fleet this scaler has no model of,
// or has not fed for reloadAfter (KEDA served by another replica meanwhile), and not on every
// evaluation of a fleet without a stored model; a stored model older than the scaler's own is
// not taken.
func TestAModelIsReadOnceAfterAGap(t *testing.T) {
	var m models
	k := [3]string{"inference", "llama", "fleet"}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if !m.stale(k, now, reloadAfter) {
		t.Fatal("no model: want the store read")
	}
	if m.stale(k, now.Add(15*time.Second), reloadAfter) {
		t.Fatal("read 15 s ago: want no second read")
	}
	fed := scaler.Observation{Windows: []scaler.ReplicaWindow{{Span: time.Minute, End: now.Add(30 * time.Second)}}}
	m.learn(k[0], k[1], k[2], fed, scaler.SLO{TTFT: 2}, now.Add(30*time.Second))
	if m.stale(k, now.Add(time.Minute+30*time.Second), reloadAfter) {
		t.Fatal("fed a minute ago: want no read")
	}
	if !m.stale(k, now.Add(5*time.Minute), reloadAfter) {
		t.Fatal("not fed for four and a half minutes: want the store read")
	}
	never := scaler.FleetModel{Capacity: 9}
	if m.install(k, never, now, now.Add(5*time.Minute)) {
		t.Fatal("a stored model that never learned replaced the scaler's own")
	}
	var stored scaler.FleetModel
	stored.Learn(scaler.Observation{}, scaler.SLO{TTFT: 2}, now.Add(10*time.Second))
	if m.install(k, stored, now, now.Add(5*time.Minute)) {
		t.Fatal("a stored model whose last lesson is older than the scaler's own replaced it")
	}
	// A model begun by the read that brings the stored one (an evaluation beside the read
	// learned a window meanwhile) gives way to it, though its last lesson is later.
	k2 := [3]string{"inference", "mistral", "fleet"}
	if !m.stale(k2, now, reloadAfter) {
		t.Fatal("no model: want the store read")
	}
	m.learn(k2[0], k2[1], k2[2], fed, scaler.SLO{TTFT: 2}, now.Add(20*time.Second)) // later than the stored one's
	if !m.install(k2, stored, now, now.Add(21*time.Second)) {
		t.Fatal("the stored model did not replace one begun by its own read")
	}
}

// TestOnlyAFedModelIsWritten: SaveModels writes a model that learned since its last write
// once per SaveEvery (at once at a clean stop), one fed but unchanged every RewriteEvery, and
// never one this scaler no longer feeds (KEDA moved to another replica).
func TestOnlyAFedModelIsWritten(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var m models
	k := [3]string{"inference", "llama", "fleet"}
	feed := func(at time.Time) { feedAt(&m, k, at) }
	write := func(at time.Time, final bool) int {
		d := m.due(at, final)
		for _, x := range d {
			m.saved(x.key, x.window, at)
		}
		return len(d)
	}
	feed(now)
	if n := write(now, false); n != 1 {
		t.Fatalf("a model never written: %d due, want 1", n)
	}
	feed(now.Add(time.Minute))
	if n := write(now.Add(time.Minute), false); n != 0 {
		t.Fatalf("a model written a minute ago: %d due, want 0 before SaveEvery", n)
	}
	if n := write(now.Add(time.Minute), true); n != 1 {
		t.Fatalf("a clean stop: %d due, want the model that learned since", n)
	}
	if n := write(now.Add(time.Minute+time.Second), true); n != 0 {
		t.Fatalf("a clean stop right after a write: %d due, want none (nothing learned since)", n)
	}
	for at := now.Add(2 * time.Minute); at.Before(now.Add(RewriteEvery)); at = at.Add(time.Minute) {
		m.learn(k[0], k[1], k[2], scaler.Observation{}, scaler.SLO{TTFT: 2}, at) // evaluated, no new window
		if n := write(at, false); n != 0 {
			t.Fatalf("at %s: a fed model that learned nothing was written", at.Sub(now))
		}
	}
	at := now.Add(time.Minute + RewriteEvery)
	m.learn(k[0], k[1], k[2], scaler.Observation{}, scaler.SLO{TTFT: 2}, at)
	if n := write(at, false); n != 1 {
		t.Fatalf("a fed model not written for RewriteEvery: %d due, want 1", n)
	}
	feed(at.Add(time.Minute))
	if n := write(at.Add(time.Minute+reloadAfter+time.Second), true); n != 0 {
		t.Fatalf("a model not fed for longer than reloadAfter: %d due, want none (another replica feeds it)", n)
	}
}

// TestAFailedReadIsNeverWrittenOver: a scaler whose read of the store failed (a timeout, the
// API server down) learns the fleet meanwhile but never writes that model — its minutes of
// lessons would replace the day kept — and reads the store again every reloadAfter though it
// feeds the model; once a read is done (or finds the kept model unreadable for good) the model
// is written as any other.
func TestAFailedReadIsNeverWrittenOver(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var m models
	k := [3]string{"inference", "llama", "fleet"}
	feed := func(at time.Time) { feedAt(&m, k, at) }
	if !m.stale(k, now, reloadAfter) {
		t.Fatal("no model: want the store read")
	}
	m.read(k, false) // the read failed
	for at := now.Add(15 * time.Second); at.Before(now.Add(reloadAfter)); at = at.Add(15 * time.Second) {
		feed(at)
		if m.stale(k, at, reloadAfter) {
			t.Fatalf("at %s: read again before reloadAfter", at.Sub(now))
		}
		if d := m.due(at, true); len(d) != 0 {
			t.Fatalf("at %s: a model whose stored one was not read is due to be written", at.Sub(now))
		}
	}
	at := now.Add(reloadAfter + 15*time.Second)
	feed(at)
	if !m.stale(k, at, reloadAfter) {
		t.Fatal("fed, but the last read failed reloadAfter ago: want the store read again")
	}
	// The read succeeds: the day kept replaces the minutes learned since the failed read,
	// though their last lesson is later.
	var kept scaler.FleetModel
	kept.Learn(scaler.Observation{}, scaler.SLO{TTFT: 2}, now.Add(-time.Hour))
	kept.Capacity = 0.61
	if !m.install(k, kept, now.Add(-time.Hour), at) {
		t.Fatal("the model kept did not replace lessons learned only since a failed read")
	}
	m.read(k, true)
	if d := m.due(at, true); len(d) != 0 {
		t.Fatalf("the model just read: %d due, want none (kept already)", len(d))
	}
	feed(at.Add(15 * time.Second))
	if d := m.due(at.Add(15*time.Second), true); len(d) != 1 || d[0].model.Capacity != 0.61 {
		t.Fatalf("the model read, after a lesson: %v due, want it written with its capacity", d)
	}
}

// feedAt feeds k's model a window that ends at at.
func feedAt(m *models, k [3]string, at time.Time) {
	w := scaler.ReplicaWindow{Span: time.Minute, End: at}
	m.learn(k[0], k[1], k[2], scaler.Observation{Windows: []scaler.ReplicaWindow{w}}, scaler.SLO{TTFT: 2}, at)
}
