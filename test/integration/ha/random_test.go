package ha_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// promiseWatch samples every PodGroup's promise (status.assignments) while gangs are admitted
// and records any moment at which the GPUs promised on a node exceed what it has.
type promiseWatch struct {
	mu     sync.Mutex
	over   []string
	stop   chan struct{}
	done   chan struct{}
	gpusOf map[string]int64 // member name → GPUs
}

func watchPromises(ns string, allocatable int64, gpusOf map[string]int64) *promiseWatch {
	w := &promiseWatch{stop: make(chan struct{}), done: make(chan struct{}), gpusOf: gpusOf}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var list berthv1alpha1.PodGroupList
			if err := rigtest.Current().Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
				continue
			}
			promised := map[string]int64{}
			for _, g := range list.Items {
				for _, a := range g.Status.Assignments {
					promised[a.Node] += w.gpusOf[a.Pod]
				}
			}
			for node, n := range promised {
				if n > allocatable {
					w.mu.Lock()
					w.over = append(w.over, fmt.Sprintf("%s: %d GPUs promised", node, n))
					w.mu.Unlock()
				}
			}
		}
	}()
	return w
}

func (w *promiseWatch) finish() []string {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.over
}

// TestLeaderKilledAtRandomPromisesNothingTwice: three nodes of 8 GPUs, 12 gangs of two 2-GPU
// members (48 GPUs asked for, 24 there). The leading replica is SIGKILLed at a random moment
// while the gangs arrive; the standby takes the Lease, a new standby starts, and its leader is
// SIGKILLed at another random moment. At no moment do the promises recorded on the PodGroups
// add up to more GPUs than a node has, every gang promised capacity ends bound whole where it
// was promised, and no member of another gang is bound.
func TestLeaderKilledAtRandomPromisesNothingTwice(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	c := r.Client
	ns := rigtest.Namespace(t, "ha-random")
	seed := rigtest.Seed(t)
	rng := rand.New(rand.NewSource(seed))
	for i := range 3 {
		node := builders.Node(fmt.Sprintf("ha-r%d", i)).Zone("ha-random").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj()
		node.Annotations = map[string]string{berthv1alpha1.KwokNodeAnnotation: "fake"}
		node.Status.Conditions = nil
		if err := c.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), node) })
	}
	// The webhook replica stands by for the whole run; the leaders it outlives are killed.
	before := holderNow(t) // a replica of an earlier test may still hold the Lease
	leader, err := berth.StartReplica(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	holder := waitHolder(t, before, "the first replica leads")
	webhook, err := berth.StartReplica(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	replicas := []string{leader, webhook}
	t.Cleanup(func() {
		for _, name := range replicas {
			_ = r.StopComponent(name, 5*time.Second)
		}
	})
	killLeader := func(name string) {
		for _, comp := range r.Components() {
			if comp.Name == name && comp.Running {
				if err := syscall.Kill(comp.PID, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	gpusOf := map[string]int64{}
	gangs := map[string][]string{}
	for i := range 12 {
		for j := range 2 {
			name := fmt.Sprintf("g%02d-%d", i, j)
			gpusOf[name] = 2
			gangs[fmt.Sprintf("g%02d", i)] = append(gangs[fmt.Sprintf("g%02d", i)], name)
		}
	}
	promises := watchPromises(ns, 8, gpusOf)
	rec := rigtest.WatchReleases(t, ns)
	killAt := rng.Intn(12)
	for i := range 12 {
		if i == killAt {
			time.Sleep(time.Duration(rng.Intn(500)) * time.Millisecond)
			killLeader(leader)
			t.Logf("leader %s killed while gang %d of 12 arrives", leader, i)
		}
		name := fmt.Sprintf("g%02d", i)
		if err := c.Create(ctx, builders.PodGroup(name, ns).MinMember(2).Obj()); err != nil {
			t.Fatal(err)
		}
		for _, m := range gangs[name] {
			if err := rigtest.CreateRetrying(ctx, c, builders.Pod(m, ns).Member(name).GPU(2).NodeSelector(corev1.LabelTopologyZone, "ha-random").Obj()); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Duration(rng.Intn(300)) * time.Millisecond)
	}
	// The webhook replica takes over; a new standby joins; the webhook replica, now leading, is
	// killed in turn at a random moment while it admits.
	holder = waitHolder(t, holder, "the standby takes the Lease")
	standby, err := berth.StartReplica(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	replicas = append(replicas, standby)
	time.Sleep(time.Duration(rng.Intn(2000)) * time.Millisecond)
	killLeader(webhook)
	waitHolder(t, holder, "the new standby takes the Lease")

	// Settled: the gangs berth promised capacity are bound whole where promised, no one else is.
	whole := map[string][]string{}
	rigtest.Eventually(t, time.Minute, 250*time.Millisecond, "promised gangs bound where promised", func(ctx context.Context) (bool, string, error) {
		var list berthv1alpha1.PodGroupList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		promisedTo := map[string]string{}
		clear(whole)
		for _, g := range list.Items {
			for _, a := range g.Status.Assignments {
				promisedTo[a.Pod] = a.Node
				whole[g.Name] = append(whole[g.Name], a.Pod)
			}
		}
		var waiting []string
		for _, p := range pods.Items {
			node, ok := promisedTo[p.Name]
			switch {
			case !ok && p.Spec.NodeName != "":
				return false, "", fmt.Errorf("member %s bound to %s without a promise", p.Name, p.Spec.NodeName)
			case ok && p.Spec.NodeName == "":
				waiting = append(waiting, p.Name)
			case ok && p.Spec.NodeName != node:
				return false, "", fmt.Errorf("member %s bound to %s, promised %s", p.Name, p.Spec.NodeName, node)
			}
		}
		return len(whole) == 6 && len(waiting) == 0, fmt.Sprintf("%d gangs promised, not bound yet: %s", len(whole), strings.Join(waiting, ", ")), nil
	})
	rec.CheckWhole(t, whole)
	if over := promises.finish(); len(over) > 0 {
		t.Errorf("capacity promised twice: %v", over)
	}
}
