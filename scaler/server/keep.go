package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/modelstore"
)

// ModelStore keeps the fleet models across the scaler's restarts and between its replicas;
// *modelstore.Store is the real one.
type ModelStore interface {
	// Load reads the model of a ScaledObject's fleet (ok false: none kept).
	Load(ctx context.Context, namespace, name, fleet string) (snap modelstore.Snapshot, ok bool, err error)
	// Save writes it, unless the one kept learned later (written false).
	Save(ctx context.Context, namespace, name string, snap modelstore.Snapshot) (written bool, err error)
}

// Timings of the models kept in a ModelStore.
const (
	// SaveEvery is how often a model that learned is written: what a scaler killed without a
	// clean stop loses at most (a clean stop writes every model that learned since).
	SaveEvery = 5 * time.Minute
	// RewriteEvery is how often a model still evaluated is written even if it learned nothing
	// (a fleet at zero overnight): a store collects what nobody wrote for longer
	// (KeepModelsFor).
	RewriteEvery = 6 * time.Hour
	// KeepModelsFor is how long a model nobody writes is kept: its ScaledObject is gone, or
	// the fleet has not been evaluated for that long.
	KeepModelsFor = 72 * time.Hour
	// reloadAfter is the least gap in a model's evaluations after which the store is read
	// again before it learns (another replica may have served the fleet meanwhile), and after
	// which this scaler no longer writes it (it feeds it no more); a longer polling interval
	// stretches it to three of them.
	reloadAfter = 2 * time.Minute
	// loadTimeout bounds the read of a model in an evaluation.
	loadTimeout = 2 * time.Second
)

// restoreModel reads the model of a ScaledObject's fleet from the store when this scaler has
// none or has not fed its own for a while (a restart, or KEDA back from another replica), and
// takes it if it is of the same fleet and newer than its own. A failed read is counted and
// logged, and the model is learned here meanwhile: a store is never a reason not to answer.
// Until a read succeeds the model is *unread*: read again every reloadAfter and never written
// (a few minutes of lessons must not replace a day of them kept in a store that was slow or
// down for a moment) — but for a stored model that cannot be read at all, which the one
// learned here replaces.
func (e *Engine) restoreModel(ctx context.Context, namespace, name, fleet string, polling time.Duration) {
	now := e.clock().Now()
	k := [3]string{namespace, name, fleet}
	if e.ModelStore == nil || !e.models.stale(k, now, max(reloadAfter, 3*polling)) {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	snap, ok, err := e.ModelStore.Load(lctx, namespace, name, fleet)
	// Recorded once the model read is installed: install lets it replace lessons learned
	// since a failed read.
	defer func() { e.models.read(k, err == nil || errors.Is(err, modelstore.ErrUnreadable)) }()
	switch {
	case err != nil:
		modelStoreErrors.WithLabelValues("load").Inc()
		log.FromContext(ctx).Error(err, "fleet model not read: learned here meanwhile", "namespace", namespace, "scaledObject", name)
		return
	case !ok:
		// None kept: a new fleet, or a ScaledObject created again, retargeted or given
		// another objective (another fleet: what the replicas before carried is no lesson for
		// these).
		modelsRestored.WithLabelValues("none").Inc()
		return
	}
	var m scaler.FleetModel
	if uerr := m.UnmarshalBinary(snap.Model); uerr != nil {
		modelStoreErrors.WithLabelValues("load").Inc()
		log.FromContext(ctx).Error(uerr, "the fleet model is learned again (the one kept is replaced)", "namespace", namespace, "scaledObject", name)
		return
	}
	if e.models.install([3]string{namespace, name, fleet}, m, snap.SavedAt, now) {
		modelsRestored.WithLabelValues("restored").Inc()
		log.FromContext(ctx).Info("fleet model restored", "namespace", namespace, "scaledObject", name, "savedAt", snap.SavedAt,
			"capacity", m.Capacity, "coldStart", m.ColdStart)
	} else {
		modelsRestored.WithLabelValues("older").Inc()
	}
}

// SaveModels writes the models this scaler feeds that learned since it last wrote them, at
// most once per SaveEvery each (at once when final: a clean stop), and those it feeds but has
// not written for RewriteEvery. A model it no longer feeds (not evaluated for reloadAfter:
// KEDA moved to another replica) is not written: the replica that feeds it does; nor is one
// whose stored model it could not read yet (restoreModel). Errors are joined; a model that
// failed is written again at the next call.
func (e *Engine) SaveModels(ctx context.Context, final bool) error {
	if e.ModelStore == nil {
		return nil
	}
	now := e.clock().Now()
	due := e.models.due(now, final)
	var errs []error
	for i, d := range due {
		if ctx.Err() != nil {
			// Stopping: what is left is written by the stop's own call, or not at all.
			errs = append(errs, fmt.Errorf("%d fleet models not written: %w", len(due)-i, ctx.Err()))
			break
		}
		data, err := d.model.MarshalBinary()
		if err == nil {
			_, err = e.ModelStore.Save(ctx, d.key[0], d.key[1], modelstore.Snapshot{Fleet: d.key[2], Model: data, SavedAt: now, LastLesson: d.model.LastLesson()})
		}
		if err != nil {
			if ctx.Err() == nil {
				modelStoreErrors.WithLabelValues("save").Inc()
			}
			errs = append(errs, fmt.Errorf("ScaledObject %s/%s: %w", d.key[0], d.key[1], err))
			continue
		}
		// Written, or not over a model that learned later: either way nothing to write
		// until this one learns again.
		e.models.saved(d.key, d.window, now)
	}
	return errors.Join(errs...)
}

// ModelStoreFailed counts a failed operation of the model store done outside the engine (a
// collection of old models).
func ModelStoreFailed(operation string) { modelStoreErrors.WithLabelValues(operation).Inc() }

// stale reports whether the model of k is missing or has not been fed within gap, and no read
// of the store for it was tried within gap (so a fleet without a stored model is not read on
// every evaluation).
func (m *models) stale(k [3]string, now time.Time, gap time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[[3]string]*modelAt{}
	}
	ma := m.m[k]
	switch {
	case ma == nil:
		ma = &modelAt{learned: now, born: now, gap: gap, unread: true}
		m.m[k] = ma
	case ma.unread && now.Sub(ma.loaded) > reloadAfter: // the last read failed: again
	case now.Sub(ma.learned) <= gap || now.Sub(ma.loaded) <= gap:
		ma.gap = gap
		return false
	default:
		ma.unread = true
	}
	ma.gap, ma.loaded = gap, now
	return true
}

// read records how k's read of the store ended: done (found, none kept, or unreadable for
// good) or failed (read again, never written meanwhile).
func (m *models) read(k [3]string, done bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ma := m.m[k]; ma != nil {
		ma.unread, ma.failed = !done, !done
	}
}

// install takes model for k, as saved at savedAt, if it is newer than the one there (its last
// lesson later), or the one there was begun by the read that brought it (what an evaluation
// beside the read learned meanwhile is seconds of lessons) or learned only since a read that
// failed (minutes of lessons against the day kept); the window it learned last is forgotten
// (the next one is learned).
func (m *models) install(k [3]string, model scaler.FleetModel, savedAt, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ma := m.m[k]
	if ma == nil {
		ma = &modelAt{learned: now, born: now, loaded: now}
		m.m[k] = ma
	}
	begun := (ma.born.Equal(ma.loaded) || ma.failed) && !model.LastLesson().IsZero()
	if !begun && !model.LastLesson().After(ma.model.LastLesson()) {
		return false
	}
	ma.model, ma.window = model, time.Time{}
	// Written already: not written back until it learns (or RewriteEvery).
	ma.saved, ma.savedWindow = savedAt, time.Time{}
	return true
}

// dueModel is a model to write: a copy, and the newest window it had learned.
type dueModel struct {
	key    [3]string
	model  scaler.FleetModel
	window time.Time
}

// due is the models to write now (SaveModels).
func (m *models) due(now time.Time, final bool) []dueModel {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []dueModel
	for k, ma := range m.m {
		// Only a model this scaler still feeds: one KEDA left for another replica is that
		// replica's to write, and written from here it would put older lessons over newer
		// (the store refuses that too: Save).
		if now.Sub(ma.learned) > max(reloadAfter, ma.gap) || ma.model.LastLesson().IsZero() || ma.unread {
			continue
		}
		learned := ma.window.After(ma.savedWindow) && (final || now.Sub(ma.saved) >= SaveEvery)
		if !learned && now.Sub(ma.saved) < RewriteEvery {
			continue
		}
		out = append(out, dueModel{key: k, model: ma.model.Clone(), window: ma.window})
	}
	return out
}

// saved records that k's model was written at now, as of the window it had learned then.
func (m *models) saved(k [3]string, window, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ma := m.m[k]; ma != nil {
		ma.saved, ma.savedWindow = now, window
	}
}
