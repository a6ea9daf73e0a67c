package rigtest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// Eventually polls cond every interval until it reports done, fails the test when cond returns
// an error or when timeout passes, and then reports the last status cond gave.
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func(ctx context.Context) (done bool, status string, err error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var status string
	for {
		done, s, err := cond(ctx)
		if dl, _ := ctx.Deadline(); err != nil && (ctx.Err() != nil || time.Until(dl) < time.Second) {
			// The wait ran out during a call (or a client refused to start one it could not
			// finish in time): the last status says more than the deadline.
			t.Fatalf("%s: not done after %s; last status: %s%s", what, timeout, status, componentsDown())
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		status = s
		if done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not done after %s; last status: %s%s", what, timeout, status, componentsDown())
		case <-time.After(interval):
		}
	}
}

// componentsDown names the rig's components that are not running, for a timeout's message: a
// wait that times out because, say, the KEDA operator died should say so. Components a test
// stopped or killed on purpose are left out.
func componentsDown() string {
	r := Current()
	if r == nil {
		return ""
	}
	var down []string
	for _, c := range r.Components() {
		if !c.Running && !c.Stopped {
			down = append(down, fmt.Sprintf("%s (log %s)", c.Name, c.LogPath))
		}
	}
	if len(down) == 0 {
		return ""
	}
	return "; rig components not running: " + strings.Join(down, ", ")
}

// Namespace creates a namespace named prefix-<random> for one test and deletes it when the
// test ends.
func Namespace(t testing.TB, prefix string) string {
	t.Helper()
	c := Current().Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	return ns.Name
}

// SeedEnv names the environment variable that fixes a randomized rig test's seed, so that a
// failure seen once (the test logs its seed) can be run again as it was.
const SeedEnv = "BERTH_TEST_SEED"

// Seed is the seed for a randomized rig test: $BERTH_TEST_SEED when set, else a fresh one. The
// test logs it.
func Seed(t testing.TB) int64 {
	t.Helper()
	seed := time.Now().UnixNano()
	if s := os.Getenv(SeedEnv); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", SeedEnv, s, err)
		}
		seed = v
	}
	t.Logf("seed %d (run again with %s=%d)", seed, SeedEnv, seed)
	return seed
}

// RemovePoolNodes deletes the NodeClaims of a Karpenter NodePool (earlier tests' capacity, empty
// once their pods are gone) and waits until their NodeClaims and nodes are gone, so a test starts
// with none of that pool's capacity.
func RemovePoolNodes(t testing.TB, pool string) {
	t.Helper()
	c := Current().Client
	sel := client.MatchingLabels{karpv1.NodePoolLabelKey: pool}
	if err := c.DeleteAllOf(context.Background(), &karpv1.NodeClaim{}, sel); err != nil {
		t.Fatalf("deleting NodePool %s's NodeClaims: %v", pool, err)
	}
	Eventually(t, 2*time.Minute, 250*time.Millisecond, "NodePool "+pool+"'s nodes gone", func(ctx context.Context) (bool, string, error) {
		var claims karpv1.NodeClaimList
		if err := c.List(ctx, &claims, sel); err != nil {
			return false, "", err
		}
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes, sel); err != nil {
			return false, "", err
		}
		return len(claims.Items)+len(nodes.Items) == 0, fmt.Sprintf("%d NodeClaims, %d nodes", len(claims.Items), len(nodes.Items)), nil
	})
}

// CountPods counts the pods in ns matching labels that are not being deleted, and those of them
// that are Ready.
func CountPods(ctx context.Context, c client.Client, ns string, labels map[string]string) (ready, total int, err error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
		return 0, 0, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		total++
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	return ready, total, nil
}
