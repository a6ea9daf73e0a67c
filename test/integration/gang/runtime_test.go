package gang_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestPodRunTime checks the rig's pod lifecycle annotations (kwok Stages, also what `berth dev`
// users set): a Job's pod with sim.berth.dev/run-time runs that long, then succeeds; with
// sim.berth.dev/exit-code it fails with that code; a Job's pod with neither succeeds at once;
// any other pod runs until deleted.
func TestPodRunTime(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	node := kwokNode(t, "runtime-a", 0, nil)
	job := func(name string, annotations map[string]string) {
		t.Helper()
		tpl := builders.Pod("x", ns).Node(node.Name).Obj()
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, NodeName: node.Name, Containers: tpl.Spec.Containers}},
		}}
		if err := c.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	job("runs", map[string]string{berthv1alpha1.DevRunTimeAnnotation: "3s"})
	job("crashes", map[string]string{berthv1alpha1.DevRunTimeAnnotation: "1s", berthv1alpha1.DevExitCodeAnnotation: "3"})
	job("instant", nil)
	plain := builders.Pod("plain", ns).Node(node.Name).Obj()
	if err := c.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	phase := func(ctx context.Context, job string) (corev1.PodPhase, int32, error) {
		var list corev1.PodList
		if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{batchv1.JobNameLabel: job}); err != nil || len(list.Items) == 0 {
			return "", 0, err
		}
		p := list.Items[0]
		var code int32
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated != nil {
				code = cs.State.Terminated.ExitCode
			}
		}
		return p.Status.Phase, code, nil
	}
	var instantAt, runsAt time.Duration
	rigtest.Eventually(t, 30*time.Second, 50*time.Millisecond, "every Job's pod finished", func(ctx context.Context) (bool, string, error) {
		runs, _, err1 := phase(ctx, "runs")
		crashes, code, err2 := phase(ctx, "crashes")
		instant, _, err3 := phase(ctx, "instant")
		if instant == corev1.PodSucceeded && instantAt == 0 {
			instantAt = time.Since(start)
		}
		if runs == corev1.PodSucceeded && runsAt == 0 {
			runsAt = time.Since(start)
		}
		done := runs == corev1.PodSucceeded && crashes == corev1.PodFailed && instant == corev1.PodSucceeded
		if done && code != 3 {
			return false, "", fmt.Errorf("the crashing pod exited %d, want 3", code)
		}
		return done, fmt.Sprintf("runs %s, crashes %s (%d), instant %s", runs, crashes, code, instant), firstErr(err1, err2, err3)
	})
	if runsAt < 3*time.Second || runsAt > instantAt+10*time.Second && runsAt > 15*time.Second {
		t.Errorf("the 3s pod finished %s after creation (the instant one after %s)", runsAt, instantAt)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(plain), plain); err != nil || plain.Status.Phase != corev1.PodRunning {
		t.Errorf("a pod without the annotations and without a Job: %s, %v; want Running", plain.Status.Phase, err)
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
