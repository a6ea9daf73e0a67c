package lifecycle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// jobSet is a JobSet of 2 Jobs × 2 pods × 1 GPU, restarted (every Job recreated) up to 3 times
// when a Job fails, spelled out in full: the rig does not run JobSet's defaulting webhook.
func jobSet(ns, name string) (*unstructured.Unstructured, error) {
	tpl := podTemplate(name, "g6e", "1h", container(1, nil))
	tplMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&tpl)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"network":       map[string]any{"enableDNSHostnames": true, "publishNotReadyAddresses": true},
			"successPolicy": map[string]any{"operator": "All"},
			"failurePolicy": map[string]any{"maxRestarts": int64(3), "restartStrategy": "Recreate"},
			"startupPolicy": map[string]any{"startupPolicyOrder": "AnyOrder"},
			"replicatedJobs": []any{map[string]any{
				"name": "workers", "replicas": int64(2),
				"template": map[string]any{"spec": map[string]any{
					"parallelism": int64(2), "completions": int64(2), "backoffLimit": int64(0),
					"completionMode": "Indexed", "template": tplMap,
				}},
			}},
		},
	}}, nil
}

// TestJobSetRestartsAreAdmittedWhole: a real JobSet controller restarts a JobSet whose Job
// failed (a pod crashed): it deletes every Job and creates them again. Each time, the new pods
// are admitted as a whole gang — no pod binds while another is gated — and the PodGroup never
// goes final while the JobSet is active.
func TestJobSetRestartsAreAdmittedWhole(t *testing.T) {
	c := rigtest.Current().Client
	ns := namespace(t, "jobset")
	js, err := jobSet(ns, "trainer")
	if err != nil {
		t.Fatal(err)
	}
	create(t, builders.PodGroup("trainer", ns).MinMember(4).Obj(), js)
	stop := observe(ns, "trainer")
	defer func() { stop().check(t) }()
	ms := waitRunning(t, ns, "trainer", 4, 3*time.Minute)
	for attempt := int64(1); attempt <= 2; attempt++ {
		crashed := ms[0]
		failedAt := failPod(t, &crashed)
		rigtest.Eventually(t, time.Minute, 200*time.Millisecond, fmt.Sprintf("JobSet restart %d", attempt), func(ctx context.Context) (bool, string, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(js), js); err != nil {
				return false, "", err
			}
			restarts, _, _ := unstructured.NestedInt64(js.Object, "status", "restarts")
			return restarts == attempt, fmt.Sprintf("restarts %d", restarts), nil
		})
		ms = waitRunning(t, ns, "trainer", 4, 2*time.Minute)
		t.Logf("JobSet restart %d: a pod failed; all 4 pods of the recreated Jobs ran %s later", attempt, time.Since(failedAt).Round(time.Millisecond))
		for _, m := range ms {
			if m.Labels["jobset.sigs.k8s.io/restart-attempt"] != fmt.Sprint(attempt) {
				t.Errorf("running member %s is of restart attempt %q, want %d", m.Name, m.Labels["jobset.sigs.k8s.io/restart-attempt"], attempt)
			}
		}
		rigtest.Eventually(t, 10*time.Second, 100*time.Millisecond, "PodGroup Running again, the restart counted", func(ctx context.Context) (bool, string, error) {
			pg, err := getGroup(ctx, ns, "trainer")
			if err != nil {
				return false, "", err
			}
			if pg.Status.Phase == berthv1alpha1.PodGroupFailed || pg.Status.Phase == berthv1alpha1.PodGroupSucceeded {
				return false, "", fmt.Errorf("PodGroup went final (%s) while its JobSet restarts: %v", pg.Status.Phase, conditionSummary(pg))
			}
			ok := pg.Status.Phase == berthv1alpha1.PodGroupRunning && pg.Status.Restarts == int32(attempt) &&
				pg.Status.Workload != nil && pg.Status.Workload.Kind == "JobSet"
			return ok, fmt.Sprintf("%s, %d restarts, workload %+v: %v", pg.Status.Phase, pg.Status.Restarts, pg.Status.Workload, conditionSummary(pg)), nil
		})
	}
}
