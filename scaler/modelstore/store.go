// Package modelstore keeps the scaler's fleet models (scaler.FleetModel: what one replica
// carries at the SLO, the start-up, a day of the demand's history and the burst headroom it
// says) in ConfigMaps of the scaler's own namespace, one per ScaledObject's fleet, so that a scaler
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
	// name is a hash of it and the fleet).
	KeyScaledObject = "scaledObject"
	// KeyFleet is the fleet the model was learned on (its ScaledObject's UID, scale target,
	// selector and objective): two triggers of one ScaledObject on different replicas are two
	// fleets, two models.
	KeyFleet = "fleet"
	// KeySavedAt is when the model was written, RFC 3339.
	KeySavedAt = "savedAt"
	// KeyLastLesson is when the model last learned, RFC 3339 with nanoseconds: a model is
	// never written over one that learned later (another scaler replica's).
	KeyLastLesson = "lastLesson"
	// KeyModel is the model, scaler.FleetModel.MarshalBinary gzipped.
	KeyModel = "model.json.gz"
)

// maxModelBytes bounds a model read back once unzipped: a day of 15-second points is about
// 200 KB; a ConfigMap that unzips to more is not one berth wrote.
const maxModelBytes = 8 << 20

// ErrForeign is the error of a ConfigMap under a model's name that is not that model's.
var ErrForeign = errors.New("not this ScaledObject's fleet model")

// ErrUnreadable is the error of a model's ConfigMap whose content cannot be read (edited by
// hand, cut short): unlike the API's errors, reading it again gives the same.
var ErrUnreadable = errors.New("unreadable fleet model")

// Snapshot is one fleet's model as the store keeps it.
type Snapshot struct {
	// Fleet is the fleet it was learned on (server's fleetOf).
	Fleet string
	// Model is scaler.FleetModel.MarshalBinary's.
	Model []byte
	// SavedAt is when it was written; LastLesson when the model last learned.
	SavedAt, LastLesson time.Time
}

// Store reads and writes the models in Namespace.
type Store struct {
	// Client reads and writes ConfigMaps in Namespace (an uncached client: a model is read
	// once per start, written every few minutes).
	Client    client.Client
	Namespace string
	Clock     clock.PassiveClock
}

// Name is the ConfigMap name of the model of ScaledObject namespace/name's fleet: a hash,
// since the three together may be longer than a name holds.
func Name(namespace, name, fleet string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name + "\x00" + fleet))
	return "berth-fleet-model-" + hex.EncodeToString(sum[:10])
}

// Load reads the model of ScaledObject namespace/name's fleet (ok false: none kept).
func (s *Store) Load(ctx context.Context, namespace, name, fleet string) (snap Snapshot, ok bool, err error) {
	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: s.Namespace, Name: Name(namespace, name, fleet)}
	if err := s.Client.Get(ctx, key, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return Snapshot{}, false, nil
		}
		return Snapshot{}, false, fmt.Errorf("reading the fleet model of %s/%s (ConfigMap %s): %w", namespace, name, key, err)
	}
	if err := owned(&cm, namespace, name, fleet); err != nil {
		return Snapshot{}, false, err
	}
	savedAt, err := time.Parse(time.RFC3339, cm.Data[KeySavedAt])
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("ConfigMap %s: %s: %w: %w", key, KeySavedAt, ErrUnreadable, err)
	}
	lastLesson, err := time.Parse(time.RFC3339Nano, cm.Data[KeyLastLesson])
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("ConfigMap %s: %s: %w: %w", key, KeyLastLesson, ErrUnreadable, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(cm.BinaryData[KeyModel]))
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("ConfigMap %s: %s: %w: %w", key, KeyModel, ErrUnreadable, err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, maxModelBytes+1))
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("ConfigMap %s: %s: %w: %w", key, KeyModel, ErrUnreadable, err)
	}
	if len(data) > maxModelBytes {
		return Snapshot{}, false, fmt.Errorf("ConfigMap %s: %s unzips to more than %d bytes: %w", key, KeyModel, maxModelBytes, ErrUnreadable)
	}
	return Snapshot{Fleet: fleet, Model: data, SavedAt: savedAt, LastLesson: lastLesson}, true, nil
}

// owned says whether cm is the model of ScaledObject namespace/name's fleet (ErrForeign if
// not: a hash collision, an object made by hand).
func owned(cm *corev1.ConfigMap, namespace, name, fleet string) error {
	if so, f := cm.Data[KeyScaledObject], cm.Data[KeyFleet]; so != namespace+"/"+name || f != fleet {
		return fmt.Errorf("ConfigMap %s/%s holds %q of fleet %q: %w %s/%s", cm.Namespace, cm.Name, so, f, ErrForeign, namespace, name)
	}
	return nil
}

// ErrTooLarge is the error of a model too large for a ConfigMap.
var ErrTooLarge = errors.New("fleet model too large for a ConfigMap")

// maxStoredBytes is the most a model may take in its ConfigMap, gzipped: below the API
// server's 1 MiB for an object, with room for the rest.
const maxStoredBytes = 900 << 10

// Save writes the model of ScaledObject namespace/name's fleet (snap.Fleet), creating its
// ConfigMap or replacing what it held — unless that learned later (written false, no error: a
// scaler replica KEDA has just left never puts older lessons over the newer ones of the
// replica it turned to). A write that meets another (a conflict) fails: the caller writes
// again later.
func (s *Store) Save(ctx context.Context, namespace, name string, snap Snapshot) (written bool, err error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(snap.Model); err != nil {
		return false, fmt.Errorf("compressing the fleet model of %s/%s: %w", namespace, name, err)
	}
	if err := zw.Close(); err != nil {
		return false, fmt.Errorf("compressing the fleet model of %s/%s: %w", namespace, name, err)
	}
	if buf.Len() > maxStoredBytes {
		return false, fmt.Errorf("%s/%s: %d bytes gzipped, at most %d: %w", namespace, name, buf.Len(), maxStoredBytes, ErrTooLarge)
	}
	want := corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: Name(namespace, name, snap.Fleet), Labels: map[string]string{
			berthv1alpha1.ManagedByLabel: berthv1alpha1.ManagedByBerth, berthv1alpha1.ComponentLabel: berthv1alpha1.FleetModelComponent}},
		Data: map[string]string{KeyScaledObject: namespace + "/" + name, KeyFleet: snap.Fleet,
			KeySavedAt: snap.SavedAt.UTC().Format(time.RFC3339), KeyLastLesson: snap.LastLesson.UTC().Format(time.RFC3339Nano)},
		BinaryData: map[string][]byte{KeyModel: buf.Bytes()},
	}
	var cm corev1.ConfigMap
	err = s.Client.Get(ctx, client.ObjectKeyFromObject(&want), &cm)
	switch {
	case apierrors.IsNotFound(err):
		if err := s.Client.Create(ctx, &want); err != nil {
			return false, fmt.Errorf("creating the fleet model of %s/%s: %w", namespace, name, err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading the fleet model of %s/%s: %w", namespace, name, err)
	}
	if err := owned(&cm, namespace, name, snap.Fleet); err != nil {
		return false, err
	}
	if stored, perr := time.Parse(time.RFC3339Nano, cm.Data[KeyLastLesson]); perr == nil && stored.After(snap.LastLesson) {
		return false, nil
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	for k, v := range want.Labels {
		cm.Labels[k] = v
	}
	cm.Data, cm.BinaryData = want.Data, want.BinaryData
	if err := s.Client.Update(ctx, &cm); err != nil {
		return false, fmt.Errorf("writing the fleet model of %s/%s: %w", namespace, name, err)
	}
	return true, nil
}

// Collect deletes the models not written for longer than keep: of ScaledObjects gone, or of
// a fleet retargeted or given another objective (a model still evaluated is written again at
// least every few hours, scaler/server). A model
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
