package rigtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/config"
	"github.com/berth-dev/berth/internal/rig"
)

// AdmissionResync is the admission resync every rig test runs berth with: so long that no test
// can pass on the safety net; only event triggers and exact deadlines move gangs.
const AdmissionResync = time.Hour

// InstallBerthCRDs installs berth's own CRDs on the rig.
func InstallBerthCRDs(ctx context.Context, r *rig.Rig) error {
	crds, err := config.CRDs()
	if err != nil {
		return err
	}
	return r.InstallCRDs(ctx, crds)
}

// StartCluster installs berth's CRDs and starts kube-controller-manager, kube-scheduler and
// kwok: a cluster whose fake nodes run the pods kube-scheduler binds.
func StartCluster(ctx context.Context, r *rig.Rig, kwok rig.KwokOptions) error {
	if err := InstallBerthCRDs(ctx, r); err != nil {
		return err
	}
	if err := r.StartControllerManager(ctx); err != nil {
		return err
	}
	if err := r.StartScheduler(ctx); err != nil {
		return err
	}
	return r.StartKwok(ctx, kwok)
}

// RunManager starts a controller manager in the test process; it is stopped after the tests,
// before the rig (see Defer).
func RunManager(mgr manager.Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager stopped:", err)
		}
	}()
	Defer(func() { cancel(); <-done })
}

// WaitEvent waits for an Event with reason about the named object in ns. berth records its
// Events in the reconcile that changes the state a test waited for, so 10 s is ample.
func WaitEvent(t testing.TB, ns, name, reason string) {
	t.Helper()
	Eventually(t, 10*time.Second, 200*time.Millisecond, "event "+reason, func(ctx context.Context) (bool, string, error) {
		var evs eventsv1.EventList
		if err := Current().Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Reason == reason {
				return true, "", nil
			}
			seen = append(seen, e.Reason)
		}
		return false, fmt.Sprintf("events so far: %v", seen), nil
	})
}

// StartKarpenterCluster is StartCluster plus Karpenter's kwok provider with the GPU instance
// types in instanceTypesFile and the rig's NodePools (one per GPU family, and a CPU pool).
func StartKarpenterCluster(ctx context.Context, r *rig.Rig, kwok rig.KwokOptions, instanceTypesFile string) error {
	if err := StartCluster(ctx, r, kwok); err != nil {
		return err
	}
	if err := r.StartKarpenter(ctx, rig.KarpenterOptions{InstanceTypesFile: instanceTypesFile}); err != nil {
		return err
	}
	return r.InstallDevNodePools(ctx)
}

// WaitWebhookGates waits until berth's pod-gate webhook serves: a gang member's server-side dry
// run comes back with berth's gate (the certificate is issued and trusted, the server up).
func WaitWebhookGates(ctx context.Context, c client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "webhook-probe",
			Labels: map[string]string{berthv1alpha1.PodGroupLabel: "webhook-probe"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
		last = c.Create(ctx, p, client.DryRunAll)
		if last == nil && len(p.Spec.SchedulingGates) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("berth's webhook does not gate a member after a minute (last: %w)", errors.Join(last, ctx.Err()))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// LogEventsOnFailure logs, when t has failed, every Event recorded in the namespaces, oldest
// first: what berth, Karpenter and the workload controllers said while the test ran, which
// the tails of the rig's logs rarely reach back to.
func LogEventsOnFailure(t testing.TB, namespaces ...string) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, ns := range namespaces {
			var evs eventsv1.EventList
			if err := Current().Client.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
				t.Logf("events in %s: %v", ns, err)
				continue
			}
			sort.SliceStable(evs.Items, func(i, j int) bool { return eventTime(evs.Items[i]).Before(eventTime(evs.Items[j])) })
			for _, e := range evs.Items {
				t.Logf("event %s %s %s %s/%s: %s", eventTime(e).Format(time.TimeOnly), ns, e.Reason, e.Regarding.Kind, e.Regarding.Name, e.Note)
			}
		}
	})
}

// eventTime is when an Event last happened, whichever of its times its recorder set.
func eventTime(e eventsv1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.DeprecatedLastTimestamp.IsZero():
		return e.DeprecatedLastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}
