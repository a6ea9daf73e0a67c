// Package modelstore keeps the scaler's fleet models (scaler.FleetModel: what one replica
// carries at the SLO, the start-up, a day of the demand's history and the burst headroom it
// says) in ConfigMaps of the scaler's own namespace, one per ScaledObject, so that a scaler
// restarted by an upgrade or a drained node — or the replica KEDA turns to — goes on from what
// the fleet taught instead of learning it again: a model learned again sizes from a first
// lesson and a history a quarter of an hour long (docs/scaler.md#the-model-across-restarts).
package modelstore

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Keys of a model's ConfigMap.
const (
	// KeyScaledObject is the ScaledObject the model is of, namespace/name (the ConfigMap's
	// name is a hash of it).
	KeyScaledObject = "scaledObject"
	// KeyFleet is the fleet the model was learned on (its ScaledObject's UID, scale target,
	// selector and objective): a model of another fleet under the same name is not taken.
	KeyFleet = "fleet"
	// KeySavedAt is when the model was written, RFC 3339.
	KeySavedAt = "savedAt"
	// KeyModel is the model, scaler.FleetModel.MarshalBinary gzipped.
	KeyModel = "model.json.gz"
)

// maxModelBytes bounds a model read back once unzipped: a day of 15-second points is about
// 200 KB; a ConfigMap that unzips to more is not one berth wrote.
const maxModelBytes = 8 << 20

// ErrForeign is the error of a ConfigMap under a model's name that is not that model's.
var ErrForeign = errors.New("not this ScaledObject's fleet model")

// Snapshot is one ScaledObject's model as the store keeps it.
type Snapshot struct {
	// Fleet is the fleet it was learned on (server's fleetOf).
	Fleet string
	// Model is scaler.FleetModel.MarshalBinary's.
	Model []byte
	// SavedAt is when it was written.
	SavedAt time.Time
}

// Store reads and writes the models in Namespace.
type Store struct {
	// Client reads and writes ConfigMaps in Namespace (an uncached client: a model is read
	// once per start, written every few minutes).
	Client    client.Client
	Namespace string
	Clock     clock.PassiveClock
}

// Name is the ConfigMap name of the model of ScaledObject namespace/name: a hash, since the
// two together may be longer than a name holds.
func Name(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	return "berth-fleet-model-" + hex.EncodeToString(sum[:10])
}

// Load reads the model of ScaledObject namespace/name (ok false: none kept).
func (s *Store) Load(ctx context.Context, namespace, name string) (snap Snapshot, ok bool, err error) {
	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: s.Namespace, Name: Name(namespace, name)}
	if err := s.Client.Get(ctx, key, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return Snapshot{}, false, nil
		}
		return Snapshot{}, false, fmt.Errorf("reading the fleet model of %s/%s (ConfigMap %s): %w", namespace, name, key, err)
	}
	if got := cm.Data[KeyScaledObject]; got != namespace+"/"+name {
		return Snapshot{}, false, fmt.Errorf("ConfigMap %s holds %q: %w %s/%s", key, got, ErrForeign, namespace, name)
	}
	savedAt, err := time.Parse(time.RFC3339, cm.Data[KeySavedAt])
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("ConfigMap %s: %s: %w", key, KeySavedAt, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(cm.BinaryData[KeyModel]))
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("ConfigMap %s: %s: %w", key, KeyModel, err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, maxModelBytes+1))
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("ConfigMap %s: %s: %w", key, KeyModel, err)
	}
	if len(data) > maxModelBytes {
		return Snapshot{}, false, fmt.Errorf("ConfigMap %s: %s unzips to more than %d bytes", key, KeyModel, maxModelBytes)
	}
	return Snapshot{Fleet: cm.Data[KeyFleet], Model: data, SavedAt: savedAt}, true, nil
}

// Save writes the model of ScaledObject namespace/name, creating its ConfigMap or replacing
// what it held. A write that meets another (a conflict) fails: the caller writes again later.
func (s *Store) Save(ctx context.Context, namespace, name string, snap Snapshot) error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(snap.Model); err != nil {
		return fmt.Errorf("compressing the fleet model of %s/%s: %w", namespace, name, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compressing the fleet model of %s/%s: %w", namespace, name, err)
	}
	want := corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: Name(namespace, name), Labels: map[string]string{
			berthv1alpha1.ManagedByLabel: berthv1alpha1.ManagedByBerth, berthv1alpha1.ComponentLabel: berthv1alpha1.FleetModelComponent}},
		Data: map[string]string{KeyScaledObject: namespace + "/" + name, KeyFleet: snap.Fleet,
			KeySavedAt: snap.SavedAt.UTC().Format(time.RFC3339)},
		BinaryData: map[string][]byte{KeyModel: buf.Bytes()},
	}
	var cm corev1.ConfigMap
	err := s.Client.Get(ctx, client.ObjectKeyFromObject(&want), &cm)
	switch {
	case apierrors.IsNotFound(err):
		if err := s.Client.Create(ctx, &want); err != nil {
			return fmt.Errorf("creating the fleet model of %s/%s: %w", namespace, name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading the fleet model of %s/%s: %w", namespace, name, err)
	}
	if got := cm.Data[KeyScaledObject]; got != "" && got != namespace+"/"+name {
		return fmt.Errorf("ConfigMap %s/%s holds %q: %w %s/%s", cm.Namespace, cm.Name, got, ErrForeign, namespace, name)
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	for k, v := range want.Labels {
		cm.Labels[k] = v
	}
	cm.Data, cm.BinaryData = want.Data, want.BinaryData
	if err := s.Client.Update(ctx, &cm); err != nil {
		return fmt.Errorf("writing the fleet model of %s/%s: %w", namespace, name, err)
	}
	return nil
}

// Collect deletes the models not written for longer than keep: of ScaledObjects gone (a
// model still evaluated is written again at least every few hours, scaler/server). A model
// whose time cannot be read is deleted too; errors are joined.
func (s *Store) Collect(ctx context.Context, keep time.Duration) (deleted int, err error) {
	var list corev1.ConfigMapList
	if err := s.Client.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{
		berthv1alpha1.ManagedByLabel: berthv1alpha1.ManagedByBerth, berthv1alpha1.ComponentLabel: berthv1alpha1.FleetModelComponent}); err != nil {
		return 0, fmt.Errorf("listing the fleet models in %s: %w", s.Namespace, err)
	}
	now := s.clock().Now()
	var errs []error
	for i := range list.Items {
		cm := &list.Items[i]
		if at, perr := time.Parse(time.RFC3339, cm.Data[KeySavedAt]); perr == nil && now.Sub(at) <= keep {
			continue
		}
		// Only as read: a model written since (its scaler came back) stays.
		err := s.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
		switch {
		case err == nil:
			deleted++
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		default:
			errs = append(errs, fmt.Errorf("deleting the fleet model %s/%s: %w", cm.Namespace, cm.Name, err))
		}
	}
	return deleted, errors.Join(errs...)
}

func (s *Store) clock() clock.PassiveClock {
	if s.Clock == nil {
		return clock.RealClock{}
	}
	return s.Clock
}
