package scalertargets_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/targets"
	"github.com/berth-dev/berth/test/rigtest"
)

// componentWatch is WatchScaledObjects acting as berth's component, as the scaler runs it: with
// exactly the component's shipped RBAC.
func componentWatch(t *testing.T, component string, timeout time.Duration) (client.Reader, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := rigtest.Current()
	cfg, err := rigtest.ComponentConfig(ctx, r, component)
	if err != nil {
		t.Fatal(err)
	}
	api, err := rigtest.ComponentClient(ctx, r, component)
	if err != nil {
		t.Fatal(err)
	}
	return targets.WatchScaledObjects(ctx, cfg, "", api, timeout)
}

// TestARetargetIsResolvedAtOnce: a ScaledObject pointed from one Deployment to another (blue to
// green) is resolved to the new one's pods at the next evaluation once the scaler watches
// ScaledObjects — with the scaler's own RBAC — where a ScaledObject read through the API is
// kept for the TTL. Without the rights to watch them (an older ClusterRole) the scaler's start
// is not held, and it says why. A ScaledObject created a moment ago is resolved though the
// watch has not brought it yet.
func TestARetargetIsResolvedAtOnce(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	for _, color := range []string{"blue", "green"} {
		sel := map[string]string{"app": "shop", "color": color}
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "shop-" + color, Namespace: ns},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: podTemplate(sel)}}
		if err := c.Create(ctx, dep); err != nil {
			t.Fatal(err)
		}
	}
	so := scaledObject("shop", map[string]any{"name": "shop-blue"}, 8)
	if err := c.Create(ctx, so); err != nil {
		t.Fatal(err)
	}

	watched, err := componentWatch(t, "scaler", 30*time.Second)
	if err != nil {
		t.Fatalf("watching ScaledObjects as berth's scaler (config/rbac/scaler.yaml): %v", err)
	}
	clk := clocktesting.NewFakePassiveClock(time.Now())
	hour := time.Hour // nothing is read again for the TTL in this test
	watching := &targets.Targets{Pods: c, API: c, ScaledObjects: watched, TTL: hour, Clock: clk}
	polling := &targets.Targets{Pods: c, API: c, TTL: hour, Clock: clk}
	noSel := &scaler.Trigger{}
	for name, tg := range map[string]*targets.Targets{"watching": watching, "polling": polling} {
		if info, err := tg.Resolve(ctx, ns, "shop", noSel); err != nil || info.Selector.String() != "app=shop,color=blue" || info.MaxReplicas != 8 {
			t.Fatalf("%s, before the retarget: %+v, %v; want blue's selector and 8 replicas at most", name, info, err)
		}
	}

	if err := c.Get(ctx, client.ObjectKeyFromObject(so), so); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(so.Object, "shop-green", "spec", "scaleTargetRef", "name"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(so.Object, int64(12), "spec", "maxReplicaCount"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, so); err != nil {
		t.Fatal(err)
	}
	var info targets.Info
	deadline := time.Now().Add(10 * time.Second) // the watch's delivery, not a TTL
	for {
		if info, err = watching.Resolve(ctx, ns, "shop", noSel); err != nil {
			t.Fatal(err)
		}
		if info.Selector.String() == "app=shop,color=green" || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if info.Selector.String() != "app=shop,color=green" || info.MaxReplicas != 12 || info.Target == nil || info.Target.Name != "shop-green" {
		t.Fatalf("watching, after the retarget: %+v (target %+v); want green's selector, target and 12 replicas at most", info, info.Target)
	}
	// One KEDA created a moment ago is resolved, whether the watch has brought it or not.
	if err := c.Create(ctx, scaledObject("shop-new", map[string]any{"name": "shop-blue"}, 0)); err != nil {
		t.Fatal(err)
	}
	if info, err := watching.Resolve(ctx, ns, "shop-new", noSel); err != nil || info.Selector.String() != "app=shop,color=blue" {
		t.Fatalf("a ScaledObject just created: %+v, %v; want blue's selector", info, err)
	}
	// Read through the API, the ScaledObject is kept for the TTL, then read again.
	if info, err := polling.Resolve(ctx, ns, "shop", noSel); err != nil || info.Selector.String() != "app=shop,color=blue" {
		t.Fatalf("polling within its TTL: %+v, %v; want blue's (kept)", info, err)
	}
	clk.SetTime(clk.Now().Add(hour + time.Second))
	if info, err := polling.Resolve(ctx, ns, "shop", noSel); err != nil || info.Selector.String() != "app=shop,color=green" {
		t.Fatalf("polling past its TTL: %+v, %v; want green's", info, err)
	}

	// The agent may not list ScaledObjects: the scaler's start is not held for the watch's
	// timeout, and the error says what is missing.
	began := time.Now()
	if _, err := componentWatch(t, "agent", time.Minute); err == nil || !strings.Contains(err.Error(), "list and watch") || !apierrors.IsForbidden(err) {
		t.Fatalf("watching ScaledObjects without the RBAC: %v; want Forbidden, naming list and watch", err)
	}
	if waited := time.Since(began); waited > 20*time.Second {
		t.Fatalf("watching ScaledObjects without the RBAC took %s: a start held that long fails its liveness probe", waited)
	}
}

// TestAListOnlyRoleIsRefusedTheWatch: a ClusterRole that may list ScaledObjects but not watch
// them (written by hand, or a verb dropped from the chart's) passes a check of the list alone,
// and an informer syncs from that list, then hears of a change only from its re-lists after
// each refused watch (logged, every 30 s or so): a cache as stale as the API reads, and
// louder. The watch is refused at once, saying so, and the scaler reads through the API.
func TestAListOnlyRoleIsRefusedTheWatch(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	user := "scaledobjects-list-only-" + rand.String(5) // cluster-scoped: a name of its own
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{targets.ScaledObjectGVK.Group}, Resources: []string{"scaledobjects"}, Verbs: []string{"get", "list"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := r.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Client.Delete(context.Background(), o) })
	}
	cfg := rest.CopyConfig(r.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	api, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 30*time.Second, 100*time.Millisecond, "the role lets the user list ScaledObjects", func(ctx context.Context) (bool, string, error) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(targets.ScaledObjectList)
		err := api.List(ctx, list)
		return err == nil, fmt.Sprint(err), nil
	})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	began := time.Now()
	_, err = targets.WatchScaledObjects(wctx, cfg, "", api, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "watching ScaledObjects") || !apierrors.IsForbidden(err) {
		t.Fatalf("watching ScaledObjects with a role that may list but not watch them: %v; want Forbidden, from the watch", err)
	}
	if waited := time.Since(began); waited > 20*time.Second {
		t.Fatalf("refusing the watch took %s: a start held that long fails its liveness probe", waited)
	}
}
