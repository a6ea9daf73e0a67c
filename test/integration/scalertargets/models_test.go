package scalertargets_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/modelstore"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestFleetModelsKeptInTheScalersNamespace: with exactly the scaler's shipped RBAC
// (config/rbac/scaler-models.yaml) a fleet model of a day's history is written to a ConfigMap
// in the scaler's namespace, read back whole, written again over itself but never over one
// that learned later, and never taken for another ScaledObject's or another fleet's; Collect
// deletes the models nobody wrote for the time kept (and one whose time cannot be read) and
// leaves the rest — and anything not a model — alone.
func TestFleetModelsKeptInTheScalersNamespace(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	api, err := rigtest.ComponentClient(ctx, r, "scaler")
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	store := &modelstore.Store{Client: api, Namespace: rig.BerthNamespace, Clock: clk}

	// A day of demand at 15 s, learned as the scaler learns it.
	var m scaler.FleetModel
	start := clk.Now().Add(-24 * time.Hour)
	for i := range 5760 {
		at := start.Add(time.Duration(i) * 15 * time.Second)
		o := scaler.Observation{Ready: 1, Sampled: 1, Arrivals: 2 + float64(i%240)/60, ArrivalsSampled: 1}
		o.Windows = []scaler.ReplicaWindow{{Span: time.Minute, Finished: 60, Arrived: 60, End: at}}
		m.Learn(o, scaler.SLO{TTFT: 2, Attainment: 0.99, HeadroomQuantile: 0.99, MaxHeadroom: 3}, at)
	}
	m.Capacity, m.ColdStart = 0.61, 200*time.Second
	data, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 100<<10 {
		t.Fatalf("the model is %d bytes: it holds no day of history to test the store by", len(data))
	}
	fleet := "uid|apps/v1/Deployment/llama|app=llama||2|0.15|0.99"
	snap := modelstore.Snapshot{Fleet: fleet, Model: data, SavedAt: clk.Now(), LastLesson: m.LastLesson()}
	if written, err := store.Save(ctx, "inference", "llama", snap); err != nil || !written {
		t.Fatalf("Save = %v, %v", written, err)
	}
	snap.SavedAt = clk.Now().Add(time.Minute)
	if written, err := store.Save(ctx, "inference", "llama", snap); err != nil || !written {
		t.Fatalf("writing a model over itself: %v, %v", written, err)
	}
	// A replica KEDA has just left, with lessons older than those kept: not written.
	older := snap
	older.LastLesson, older.Model = snap.LastLesson.Add(-time.Minute), []byte("older")
	if written, err := store.Save(ctx, "inference", "llama", older); err != nil || written {
		t.Fatalf("writing older lessons over newer: %v, %v; want refused without an error", written, err)
	}
	got, ok, err := store.Load(ctx, "inference", "llama", fleet)
	if err != nil || !ok {
		t.Fatalf("Load = %v, %v", ok, err)
	}
	if got.Fleet != snap.Fleet || !got.SavedAt.Equal(snap.SavedAt) || !got.LastLesson.Equal(snap.LastLesson) || string(got.Model) != string(data) {
		t.Fatalf("read back %q saved %v (%d bytes), want %q saved %v (%d bytes)", got.Fleet, got.SavedAt, len(got.Model), snap.Fleet, snap.SavedAt, len(data))
	}
	var back scaler.FleetModel
	if err := back.UnmarshalBinary(got.Model); err != nil || back.Capacity != 0.61 || back.ColdStart != 200*time.Second {
		t.Fatalf("the model read back: capacity %v, start-up %v (%v)", back.Capacity, back.ColdStart, err)
	}
	var cm corev1.ConfigMap
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rig.BerthNamespace, Name: modelstore.Name("inference", "llama", fleet)}, &cm); err != nil {
		t.Fatal(err)
	}
	t.Logf("a day's model: %d bytes of JSON, %d in its ConfigMap", len(data), len(cm.BinaryData[modelstore.KeyModel]))
	if n := len(cm.BinaryData[modelstore.KeyModel]); n > 256<<10 {
		t.Errorf("a day's model takes %d bytes of its ConfigMap: too much to write every few minutes", n)
	}

	if _, ok, err := store.Load(ctx, "inference", "mistral", fleet); ok || err != nil {
		t.Errorf("a ScaledObject with no model: ok %v, %v; want none", ok, err)
	}
	if _, ok, err := store.Load(ctx, "inference", "llama", fleet+"|retargeted"); ok || err != nil {
		t.Errorf("another fleet of the same ScaledObject: ok %v, %v; want none (it learns apart)", ok, err)
	}
	// A ConfigMap under a model's name that holds another ScaledObject's model (a hash
	// collision, a hand-made object): never read as this one's, never written over.
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: rig.BerthNamespace, Name: modelstore.Name("inference", "qwen", fleet)},
		Data: map[string]string{modelstore.KeyScaledObject: "other/qwen", modelstore.KeyFleet: fleet}}
	if err := r.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Load(ctx, "inference", "qwen", fleet); !errors.Is(err, modelstore.ErrForeign) {
		t.Errorf("Load of a foreign ConfigMap = %v, want ErrForeign", err)
	}
	if _, err := store.Save(ctx, "inference", "qwen", snap); !errors.Is(err, modelstore.ErrForeign) {
		t.Errorf("Save over a foreign ConfigMap = %v, want ErrForeign", err)
	}

	// A model whose data is not what berth writes (edited by hand, cut short): an error, never
	// a model.
	broken := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: rig.BerthNamespace, Name: modelstore.Name("inference", "phi", fleet)},
		Data: map[string]string{modelstore.KeyScaledObject: "inference/phi", modelstore.KeyFleet: fleet,
			modelstore.KeySavedAt: clk.Now().Format(time.RFC3339), modelstore.KeyLastLesson: clk.Now().Format(time.RFC3339Nano)},
		BinaryData: map[string][]byte{modelstore.KeyModel: []byte("not gzip")}}
	if err := r.Client.Create(ctx, broken); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := store.Load(ctx, "inference", "phi", fleet); ok || err == nil || !strings.Contains(err.Error(), modelstore.KeyModel) {
		t.Errorf("Load of a model that is not gzip: ok %v, %v; want an error naming %s", ok, err, modelstore.KeyModel)
	}

	old := snap
	old.SavedAt = clk.Now().Add(-4 * 24 * time.Hour)
	if _, err := store.Save(ctx, "inference", "gone", old); err != nil {
		t.Fatal(err)
	}
	// A model whose time cannot be read is no model anyone keeps.
	undated := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: rig.BerthNamespace, Name: modelstore.Name("inference", "undated", fleet),
		Labels: map[string]string{berthv1alpha1.ManagedByLabel: berthv1alpha1.ManagedByBerth, berthv1alpha1.ComponentLabel: berthv1alpha1.FleetModelComponent}},
		Data: map[string]string{modelstore.KeyScaledObject: "inference/undated", modelstore.KeyFleet: fleet, modelstore.KeySavedAt: "yesterday"}}
	if err := r.Client.Create(ctx, undated); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Hour)
	n, err := store.Collect(ctx, 72*time.Hour)
	if err != nil || n != 2 {
		t.Fatalf("Collect = %d, %v; want the model nobody wrote for four days and the undated one deleted", n, err)
	}
	if _, ok, err := store.Load(ctx, "inference", "gone", fleet); ok || err != nil {
		t.Errorf("the collected model: ok %v, %v; want gone", ok, err)
	}
	if _, ok, err := store.Load(ctx, "inference", "llama", fleet); !ok || err != nil {
		t.Errorf("the model written an hour ago: ok %v, %v; want kept", ok, err)
	}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(foreign), &corev1.ConfigMap{}); err != nil {
		t.Errorf("a ConfigMap that is not a model was touched: %v", err)
	}

	// Outside its namespace the scaler's RBAC writes nothing.
	elsewhere := &modelstore.Store{Client: api, Namespace: "default", Clock: clk}
	if _, err := elsewhere.Save(ctx, "inference", "llama", snap); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("a model written outside the scaler's namespace: %v, want forbidden", err)
	}
}
