// Package restart_test kills berth's controller process in the middle of releasing a gang and
// checks that a restarted controller finishes the release: nothing is left half-released.
package restart_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/admission"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// berth runs `berth controller` as a process the tests kill and restart.
var berth *rigtest.BerthProcess

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartCluster(ctx, r, rig.KwokOptions{}); err != nil {
			return err
		}
		var err error
		berth, err = rigtest.NewBerthProcess(ctx, r)
		return err
	})
}

func TestRestartFinishesRelease(t *testing.T) {
	for i, fault := range []string{"mid-release", "after-ungate"} {
		t.Run(fault, func(t *testing.T) {
			ctx := context.Background()
			r := rigtest.Current()
			c := r.Client
			node := fmt.Sprintf("restart-%d", i)
			n := builders.Node(node).GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj()
			n.Annotations = map[string]string{berthv1alpha1.KwokNodeAnnotation: "fake"}
			n.Status.Conditions = nil
			if err := c.Create(ctx, n); err != nil {
				t.Fatal(err)
			}
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "restart-"}}
			if err := c.Create(ctx, ns); err != nil {
				t.Fatal(err)
			}
			if err := berth.Start(ctx, admission.FaultEnv+"="+fault); err != nil {
				t.Fatal(err)
			}
			first := berth.Running
			if err := c.Create(ctx, builders.PodGroup("ddp", ns.Name).MinMember(4).Obj()); err != nil {
				t.Fatal(err)
			}
			for j := range 4 {
				if err := c.Create(ctx, builders.Pod(fmt.Sprintf("ddp-%d", j), ns.Name).Member("ddp").GPU(1).Obj()); err != nil {
					t.Fatal(err)
				}
			}
			rigtest.Eventually(t, 15*time.Second, 100*time.Millisecond, "controller dies at "+fault, func(context.Context) (bool, string, error) {
				return berth.Exited(first), "still running", nil
			})
			log, err := os.ReadFile(filepath.Join(r.LogDir(), first+".log"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(log), "fault injection: exiting at "+fault) {
				t.Fatalf("controller exited, but not at the fault point:\n%s", lastLines(string(log), 20))
			}
			// Half-way state: half the members (mid-release) or all but the key member
			// (after-ungate) pinned to one node and ungated, the others still gated and
			// unpinned; none bound, none the key yet.
			pods := members(t, ns.Name)
			node = ""
			released := 0
			for _, p := range pods {
				pin := p.Annotations[berthv1alpha1.PinnedNodeAnnotation]
				gated := len(p.Spec.SchedulingGates) > 0
				switch {
				case pin != "" && !gated:
					released++
					if node == "" {
						node = pin
					}
					if pin != node {
						t.Errorf("member %s pinned to %s, another to %s", p.Name, pin, node)
					}
				case pin == "" && gated:
				default:
					t.Errorf("member %s half-released: pinned to %q, gated %v (pin and ungate are one patch)", p.Name, pin, gated)
				}
				if p.Spec.NodeName != "" {
					t.Errorf("member %s bound to %s while the release was interrupted", p.Name, p.Spec.NodeName)
				}
				if _, key := p.Labels[berthv1alpha1.ReleaseLabel]; key {
					t.Errorf("member %s is the key member before the release got that far", p.Name)
				}
			}
			if want := map[string]int{"mid-release": 2, "after-ungate": 3}[fault]; released != want {
				t.Errorf("%d members released at %s, want %d", released, fault, want)
			}
			time.Sleep(2 * time.Second)
			for _, p := range members(t, ns.Name) {
				if p.Spec.NodeName != "" {
					t.Errorf("member %s bound while no controller ran", p.Name)
				}
			}

			if err := berth.Start(ctx); err != nil {
				t.Fatal(err)
			}
			rigtest.Eventually(t, 15*time.Second, 100*time.Millisecond, "restarted controller releases every member", func(ctx context.Context) (bool, string, error) {
				bound := 0
				for _, p := range members(t, ns.Name) {
					if p.Spec.NodeName == node {
						bound++
					}
				}
				return bound == 4, fmt.Sprintf("%d of 4 bound", bound), nil
			})
			// No node barrier was needed, and the key label comes off once all are bound.
			rigtest.Eventually(t, 5*time.Second, 100*time.Millisecond, "no barrier, no key left", func(ctx context.Context) (bool, string, error) {
				var got corev1.Node
				if err := c.Get(ctx, client.ObjectKey{Name: node}, &got); err != nil {
					return false, "", err
				}
				for k := range got.Labels {
					if strings.HasPrefix(k, berthv1alpha1.BarrierLabelPrefix) {
						return false, "label " + k, nil
					}
				}
				for _, p := range members(t, ns.Name) {
					if _, key := p.Labels[berthv1alpha1.ReleaseLabel]; key {
						return false, "key " + p.Name, nil
					}
				}
				return true, "", nil
			})
			var pg berthv1alpha1.PodGroup
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "ddp"}, &pg); err != nil {
				t.Fatal(err)
			}
			if len(pg.Status.Assignments) != 4 {
				t.Errorf("assignments = %v", pg.Status.Assignments)
			}
			if err := berth.Stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func members(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := rigtest.Current().Client.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: "ddp"}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestReadyOnlyWithTheWebhook: a controller serving the pod-gate webhook reports ready only with
// its webhook server started (the Service routes the API server's calls to ready pods only); one
// without a webhook has no such check.
func TestReadyOnlyWithTheWebhook(t *testing.T) {
	ctx := context.Background()
	wasRunning := berth.Running != ""
	if err := berth.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := berth.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !wasRunning {
		// Leave the controller as the test found it (the other tests start their own).
		defer func() { _ = berth.Stop() }()
	}
	got, err := berth.Readyz(ctx, berth.Running)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "HTTP 200") || !strings.Contains(got, "[+]webhook ok") || !strings.Contains(got, "[+]ping ok") {
		t.Errorf("readiness of a controller with the webhook:\n%s\nwant HTTP 200 with [+]webhook ok and [+]ping ok", got)
	}
	name, err := berth.StartReplica(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rigtest.Current().StopComponent(name, 5*time.Second) }()
	got, err = berth.Readyz(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "HTTP 200") || strings.Contains(got, "webhook") {
		t.Errorf("readiness of a controller without the webhook:\n%s\nwant HTTP 200 and no webhook check", got)
	}
}
