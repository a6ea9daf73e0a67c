package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// namespace creates a namespace for one test and deletes it afterwards.
func namespace(t *testing.T, prefix string) string {
	t.Helper()
	return rigtest.Namespace(t, prefix)
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := rigtest.Current().Client.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// container is a workload container asking for gpus GPUs (and the other resources given).
func container(gpus int, more corev1.ResourceList) corev1.Container {
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("4Gi")}
	lim := corev1.ResourceList{}
	if gpus > 0 {
		q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
		req[berthv1alpha1.GPUResource], lim[berthv1alpha1.GPUResource] = q, q
	}
	for n, q := range more {
		req[n] = q
		if n != corev1.ResourceCPU && n != corev1.ResourceMemory {
			lim[n] = q
		}
	}
	return corev1.Container{Name: "train", Image: "nvcr.io/nvidia/pytorch:25.01-py3", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
}

// podTemplate is a gang member's template: on an EC2 family, tolerating the GPU taint,
// running for runTime (kwok) unless it is empty.
func podTemplate(group, family, runTime string, c corev1.Container) corev1.PodTemplateSpec {
	tpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{berthv1alpha1.PodGroupLabel: group}, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{c},
			NodeSelector:  map[string]string{awsv1.LabelInstanceFamily: family},
			Tolerations:   []corev1.Toleration{{Key: berthv1alpha1.GPUResource, Operator: corev1.TolerationOpExists}},
		},
	}
	if runTime != "" {
		tpl.Annotations[berthv1alpha1.DevRunTimeAnnotation] = runTime
	}
	return tpl
}

// indexedJob is an Indexed Job of completions pods, parallelism at a time, each index retried up
// to retries times (the Job fails at the first failure when retries is 0). As a training Job on
// spot capacity should, it does not count pods lost to a disruption (eviction, preemption, a
// drained node: condition DisruptionTarget) as failures.
func indexedJob(ns, name string, completions, parallelism, retries int32, tpl corev1.PodTemplateSpec) *batchv1.Job {
	limit, perIndex := ptr.To[int32](0), (*int32)(nil)
	if retries > 0 {
		// Per index: the Job controller's failure backoff then counts each rank's failures, not
		// the whole Job's.
		limit, perIndex = nil, ptr.To(retries)
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			Completions: ptr.To(completions), Parallelism: ptr.To(parallelism), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			BackoffLimit: limit, BackoffLimitPerIndex: perIndex, Template: tpl,
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}}},
		},
	}
}

// evict evicts pods through the Eviction API, as a node drain or a spot reclaim does.
func evict(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	c := rigtest.Current().Client
	for i := range pods {
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pods[i].Name, Namespace: pods[i].Namespace}}
		if err := c.SubResource("eviction").Create(context.Background(), &pods[i], ev); err != nil {
			t.Fatalf("evicting %s: %v", pods[i].Name, err)
		}
	}
}

// members lists a gang's member pods that are not being deleted, by name.
func members(ctx context.Context, ns, group string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := rigtest.Current().Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: group}); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func getGroup(ctx context.Context, ns, name string) (*berthv1alpha1.PodGroup, error) {
	var pg berthv1alpha1.PodGroup
	err := rigtest.Current().Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pg)
	return &pg, err
}

// seats lists the live seat pods of a gang (in berth's namespace).
func seats(ctx context.Context, uid string) ([]corev1.Pod, error) {
	var list corev1.PodList
	err := rigtest.Current().Client.List(ctx, &list, client.InNamespace(rig.BerthNamespace), client.MatchingLabels{berthv1alpha1.SeatOfLabel: uid})
	return list.Items, err
}

func gated(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == berthv1alpha1.SchedulingGate {
			return true
		}
	}
	return false
}

// running counts Running members, and names every member with its phase and node.
func running(ms []corev1.Pod) (int, string) {
	n := 0
	var parts []string
	for _, m := range ms {
		if m.Status.Phase == corev1.PodRunning {
			n++
		}
		state := string(m.Status.Phase)
		if gated(&m) {
			state = "gated"
		}
		parts = append(parts, fmt.Sprintf("%s=%s@%s", m.Name, state, m.Spec.NodeName))
	}
	return n, strings.Join(parts, " ")
}

// waitRunning waits until want members of the gang run (and no more are live), and returns
// them.
func waitRunning(t *testing.T, ns, group string, want int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	return waitRunningOr(t, ns, group, want, timeout, nil)
}

// waitRunningOr is waitRunning, adding what more says to the status it reports.
func waitRunningOr(t *testing.T, ns, group string, want int, timeout time.Duration, more func(context.Context) string) []corev1.Pod {
	t.Helper()
	var ms []corev1.Pod
	rigtest.Eventually(t, timeout, 100*time.Millisecond, fmt.Sprintf("%d members of %s running", want, group), func(ctx context.Context) (bool, string, error) {
		var err error
		if ms, err = members(ctx, ns, group); err != nil {
			return false, "", err
		}
		live := 0
		for _, m := range ms {
			if m.Status.Phase != corev1.PodSucceeded && m.Status.Phase != corev1.PodFailed {
				live++
			}
		}
		n, detail := running(ms)
		pg, err := getGroup(ctx, ns, group)
		if err != nil {
			return false, "", err
		}
		status := fmt.Sprintf("%s; PodGroup %s %v", detail, pg.Status.Phase, conditionSummary(pg))
		if more != nil {
			status += "; " + more(ctx)
		}
		return n == want && live == want, status, nil
	})
	return liveOnly(ms)
}

func liveOnly(ms []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, m := range ms {
		if m.Status.Phase == corev1.PodRunning || m.Status.Phase == corev1.PodPending {
			out = append(out, m)
		}
	}
	return out
}

func conditionSummary(pg *berthv1alpha1.PodGroup) []string {
	var out []string
	for _, c := range pg.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return out
}

// failPod makes a running pod fail as a crashed container would (exit code 1), through the
// status subresource, as the kubelet reports it, and returns when.
func failPod(t *testing.T, p *corev1.Pod) time.Time {
	t.Helper()
	c := rigtest.Current().Client
	now := metav1.Now()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur corev1.Pod
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), &cur); err != nil {
			return err
		}
		cur.Status.Phase = corev1.PodFailed
		for i := range cur.Status.ContainerStatuses {
			cs := &cur.Status.ContainerStatuses[i]
			cs.Ready, cs.Started = false, ptr.To(false)
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", StartedAt: now, FinishedAt: now}}
		}
		for i := range cur.Status.Conditions {
			if cur.Status.Conditions[i].Type == corev1.PodReady || cur.Status.Conditions[i].Type == corev1.ContainersReady {
				cur.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
		return c.Status().Update(context.Background(), &cur)
	})
	if err != nil {
		t.Fatalf("failing pod %s: %v", p.Name, err)
	}
	return now.Time
}

// observation watches a gang's members: a member bound while another live member of the gang
// was still gated is an early bind, the partial gang berth exists to prevent.
type observation struct {
	mu         sync.Mutex
	earlyBinds []string
	seen       map[string]bool // members (by UID) seen bound
	errs       []error
	// failures describe members seen Failed, by name.
	failures map[string]string
}

// observe polls a gang's members until the returned stop is called.
func observe(ns, group string) func() *observation {
	o := &observation{seen: map[string]bool{}, failures: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			ms, err := members(ctx, ns, group)
			o.mu.Lock()
			if err != nil && ctx.Err() == nil {
				o.errs = append(o.errs, err)
			}
			var gatedNow []string
			for i := range ms {
				if gated(&ms[i]) {
					gatedNow = append(gatedNow, ms[i].Name)
				}
			}
			for _, m := range ms {
				if m.Status.Phase == corev1.PodFailed && o.failures[m.Name] == "" {
					o.failures[m.Name] = fmt.Sprintf("%s %s %v %v", m.Status.Reason, m.Status.Message, m.Status.Conditions, m.Status.ContainerStatuses)
				}
				if m.Spec.NodeName == "" || o.seen[string(m.UID)] {
					continue
				}
				o.seen[string(m.UID)] = true
				if len(gatedNow) > 0 {
					o.earlyBinds = append(o.earlyBinds, fmt.Sprintf("%s bound to %s while %v gated", m.Name, m.Spec.NodeName, gatedNow))
				}
			}
			o.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() *observation {
		cancel()
		<-done
		return o
	}
}

// check fails the test for what the observation saw.
func (o *observation) check(t *testing.T) {
	t.Helper()
	if err := errors.Join(o.errs...); err != nil {
		t.Errorf("observer: %v", err)
	}
	for _, e := range o.earlyBinds {
		t.Errorf("partial gang: %s", e)
	}
	for name, why := range o.failures {
		t.Logf("member %s failed: %s", name, why)
	}
}
