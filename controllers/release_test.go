package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fakeLock is a resourcelock.Interface over one record in memory.
type fakeLock struct {
	id      string
	rec     *resourcelock.LeaderElectionRecord
	getErr  error
	updated *resourcelock.LeaderElectionRecord
	upErr   error
}

func (f *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if f.getErr != nil {
		return nil, nil, f.getErr
	}
	return f.rec, nil, nil
}
func (f *fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return nil }
func (f *fakeLock) Update(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	if f.upErr != nil {
		return f.upErr
	}
	f.updated = &r
	return nil
}
func (f *fakeLock) RecordEvent(string) {}
func (f *fakeLock) Identity() string   { return f.id }
func (f *fakeLock) Describe() string   { return "berth/lease" }

// TestReleaseLease: a replica that holds the Lease empties its holder (keeping the transition
// count); one that does not hold it, or finds no Lease, leaves it alone; a failed read or write
// is an error that says which Lease.
func TestReleaseLease(t *testing.T) {
	now := time.Date(2026, 12, 5, 15, 0, 0, 0, time.UTC)
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, "lease", errors.New("changed"))
	for _, tc := range []struct {
		name     string
		lock     *fakeLock
		released bool
		err      bool
	}{
		{"held: given up", &fakeLock{id: "a", rec: &resourcelock.LeaderElectionRecord{HolderIdentity: "a", LeaderTransitions: 3, LeaseDurationSeconds: 15}}, true, false},
		{"held by another: left alone", &fakeLock{id: "a", rec: &resourcelock.LeaderElectionRecord{HolderIdentity: "b"}}, false, false},
		{"no holder: left alone", &fakeLock{id: "a", rec: &resourcelock.LeaderElectionRecord{}}, false, false},
		{"no Lease", &fakeLock{id: "a", getErr: apierrors.NewNotFound(schema.GroupResource{Resource: "leases"}, "lease")}, false, false},
		{"read fails", &fakeLock{id: "a", getErr: errors.New("timeout")}, false, true},
		{"taken meanwhile: the write conflicts", &fakeLock{id: "a", rec: &resourcelock.LeaderElectionRecord{HolderIdentity: "a"}, upErr: conflict}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			released, err := releaseLease(context.Background(), tc.lock, now)
			if released != tc.released || (err != nil) != tc.err {
				t.Fatalf("released %v, error %v; want %v, error %v", released, err, tc.released, tc.err)
			}
			if tc.err && err != nil && !strings.Contains(err.Error(), "berth/lease") {
				t.Errorf("error %q does not name the Lease", err)
			}
			if !tc.released {
				if tc.lock.updated != nil {
					t.Errorf("wrote %+v to a Lease it did not give up", tc.lock.updated)
				}
				return
			}
			u := tc.lock.updated
			if u == nil || u.HolderIdentity != "" || u.LeaderTransitions != tc.lock.rec.LeaderTransitions || u.LeaseDurationSeconds != 1 || !u.RenewTime.Time.Equal(now) {
				t.Errorf("wrote %+v; want no holder, transitions kept, a 1 s Lease renewed now", u)
			}
		})
	}
}
