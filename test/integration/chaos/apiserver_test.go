package chaos_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestAPIServerRestartMidRun: 30 gangs of 2 one-GPU members arrive while kube-apiserver is
// restarted twice (down for 3 s each time) under the running controller. The controller's
// watches resume and every gang ends bound; the gangs that arrive after the last restart are
// released whole (the test's own watch of the order of writes cannot span a restart: a new
// API server's watch cache starts at its own resourceVersion).
func TestAPIServerRestartMidRun(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	ns := rigtest.Namespace(t, "apiserver")
	for i := range 8 {
		n := builders.Node(fmt.Sprintf("api-%02d", i)).GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj()
		n.Annotations = map[string]string{berthv1alpha1.KwokNodeAnnotation: "fake"}
		n.Status.Conditions = nil
		if err := r.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if berth.Running == "" {
		if err := berth.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = berth.Stop() })
	gangs := map[string][]string{}
	create := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			name := fmt.Sprintf("a%02d", i)
			if err := createRetryingDown(ctx, r.Client, builders.PodGroup(name, ns).MinMember(2).Obj()); err != nil {
				t.Fatal(err)
			}
			for j := range 2 {
				p := builders.Pod(fmt.Sprintf("%s-%d", name, j), ns).Member(name).GPU(1).Obj()
				if err := createRetryingDown(ctx, r.Client, p); err != nil {
					t.Fatal(err)
				}
				gangs[name] = append(gangs[name], p.Name)
			}
		}
	}
	create(0, 10)
	if err := r.RestartAPIServer(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	create(10, 20)
	if err := r.RestartAPIServer(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	rec := rigtest.WatchReleases(t, ns)
	create(20, 30)
	rigtest.Eventually(t, 2*time.Minute, time.Second, "every member bound", func(ctx context.Context) (bool, string, error) {
		bound, unbound, err := rigtest.CountBound(ctx, r.Client, ns)
		if err != nil {
			return false, err.Error(), nil // the API server may still be warming up
		}
		return bound == 60, fmt.Sprintf("%d of 60 bound; unbound: %s", bound, unbound), nil
	})
	if berth.Exited(berth.Running) {
		t.Errorf("the controller exited while the API server restarted")
	}
	last := map[string][]string{}
	for name, members := range gangs {
		if name >= "a20" { // created after the last restart

			last[name] = members
		}
	}
	if partly := rec.CheckWhole(t, last); partly > 0 {
		t.Errorf("%d of %d gangs partly released", partly, len(last))
	}
}

// createRetryingDown creates obj, retrying while the API server or the webhook is not there.
func createRetryingDown(ctx context.Context, c client.Client, obj client.Object) error {
	var err error
	for range 150 {
		if err = rigtest.CreateRetrying(ctx, c, obj); err == nil || apierrors.IsAlreadyExists(err) {
			return nil // created (perhaps by an attempt whose answer was lost)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}
