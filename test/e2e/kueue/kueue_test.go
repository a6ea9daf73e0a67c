package kueue_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// Kueue's names the tests read.
const (
	kueueGroupVersion  = "kueue.x-k8s.io/v1beta2"
	kueueAdmissionGate = "kueue.x-k8s.io/admission"
	priorityClassLabel = "kueue.x-k8s.io/priority-class"
	jobUIDLabel        = "batch.kubernetes.io/controller-uid"
	// retriableInGroupAnnotation "false" on a pod of a Kueue pod group ends the group when the
	// pod ends, instead of Kueue waiting for a replacement.
	retriableInGroupAnnotation = "kueue.x-k8s.io/retriable-in-group"
	gpusPerNode                = 8
)

// TestJobRunsOnNodesProvisionedInOneBatch: the sample job (4 pods × 8 L40S GPUs) on a cluster
// with no GPU nodes. Kueue reserves team-a's quota and creates a best-effort-atomic
// ProvisioningRequest; berth gets one node per pod from Karpenter, all asked for at once; Kueue
// admits the workload once the request is Provisioned; every pod runs on those nodes and no
// other node is launched.
func TestJobRunsOnNodesProvisionedInOneBatch(t *testing.T) {
	waitQueuesIdle(t)
	rigtest.RemovePoolNodes(t, rig.GPUNodePoolName("l40s")) // no L40S capacity, whatever ran before
	before := claimNames(t)
	start := time.Now()
	job := createJob(t, "team-a", "", 4, "")
	wl := waitAdmitted(t, job, 3*time.Minute)
	admitted := time.Since(start)
	pr := requestOf(t, wl)
	if pr.Spec.ProvisioningClassName != autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp {
		t.Errorf("Kueue asked for class %q, want %q", pr.Spec.ProvisioningClassName, autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp)
	}
	if c := meta.FindStatusCondition(pr.Status.Conditions, autoscalingv1.Provisioned); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("workload admitted but its ProvisioningRequest is not Provisioned: %v", pr.Status.Conditions)
	}
	nodes := waitRunning(t, job, 4, 2*time.Minute)
	running := time.Since(start)
	launched := newClaims(t, before)
	if len(launched) != 4 {
		t.Fatalf("%d NodeClaims launched for a job of 4 pods, want 4: %v", len(launched), claimSummary(launched))
	}
	first, last := launched[0].CreationTimestamp.Time, launched[len(launched)-1].CreationTimestamp.Time
	if last.Sub(first) > time.Second {
		t.Errorf("NodeClaims created %s apart, want one batch: %v", last.Sub(first), claimSummary(launched))
	}
	for _, nc := range launched {
		if !nodes[nc.Status.NodeName] {
			t.Errorf("NodeClaim %s (node %q) launched for the job runs none of its pods (pods on %v)", nc.Name, nc.Status.NodeName, nodes)
		}
	}
	t.Logf("admitted %.1fs after submission, 4 pods running on 4 new nodes %.1fs after submission; NodeClaims %v",
		admitted.Seconds(), running.Seconds(), claimSummary(launched))
}

// TestAnotherTeamReclaimsLentQuota: team-a borrows team-b's idle GPUs for a 6 × 8-GPU batch job
// (its own quota is 32); team-b then submits a production job within its own quota. Kueue
// reclaims within the cohort: team-a's workload is preempted (its job suspended, its pods gone)
// and requeued, team-b's is admitted once berth has capacity for it, and its pods run.
func TestAnotherTeamReclaimsLentQuota(t *testing.T) {
	waitQueuesIdle(t)
	borrower := createJob(t, "team-a", "pretrain", 6, "batch")
	borrowerWL := waitAdmitted(t, borrower, 3*time.Minute)
	waitRunning(t, borrower, 6, 2*time.Minute)

	start := time.Now()
	reclaimer := createJob(t, "team-b", "finetune", 4, "production")
	waitAdmitted(t, reclaimer, 3*time.Minute)
	reclaimerNodes := waitRunning(t, reclaimer, 4, 2*time.Minute)
	t.Logf("team-b's job running %.1fs after submission, on %v", time.Since(start).Seconds(), keys(reclaimerNodes))

	c := rigtest.Current().Client
	rigtest.Eventually(t, time.Minute, 250*time.Millisecond, "team-a's job preempted and requeued", func(ctx context.Context) (bool, string, error) {
		wl, err := getWorkload(ctx, borrowerWL)
		if err != nil {
			return false, "", err
		}
		preempted := conditionOf(wl, "Preempted")
		reserved := conditionOf(wl, "QuotaReserved")
		var j batchv1.Job
		if err := c.Get(ctx, client.ObjectKeyFromObject(borrower), &j); err != nil {
			return false, "", err
		}
		pods, err := jobPods(ctx, &j)
		if err != nil {
			return false, "", err
		}
		status := fmt.Sprintf("Preempted=%v QuotaReserved=%v suspended=%v pods=%d", preempted, reserved, ptrTrue(j.Spec.Suspend), len(pods))
		done := preempted["status"] == "True" && preempted["reason"] == "InCohortReclamation" &&
			reserved["status"] == "False" && ptrTrue(j.Spec.Suspend) && len(pods) == 0
		return done, status, nil
	})
}

// TestKueuePodGroupUnderBerthGate: a Kueue pod group (plain pods with Kueue's group label) that
// berth's webhook also adopts as a berth gang, on a cluster with no L40S nodes: each pod is held
// by both Kueue's admission gate and berth's. Kueue admits once berth's ProvisioningRequest is
// Provisioned (four nodes in one batch) and lifts its gate; berth then counts the request's
// seats as the gang's room and releases it onto exactly those nodes. Neither waits for the other.
func TestKueuePodGroupUnderBerthGate(t *testing.T) {
	waitQueuesIdle(t)
	ctx := context.Background()
	c := rigtest.Current().Client
	const ns, n = "team-b", 4
	rigtest.RemovePoolNodes(t, rig.GPUNodePoolName("l40s"))
	before := claimNames(t)
	group := fmt.Sprintf("pods-%d", time.Now().UnixNano()%100000)
	start := time.Now()
	names := createPodGroup(t, ns, group, n)
	nodes := map[string]bool{}
	rigtest.Eventually(t, 4*time.Minute, 250*time.Millisecond, "every pod of the group running", func(ctx context.Context) (bool, string, error) {
		var status []string
		clear(nodes)
		running := 0
		for _, name := range names {
			var p corev1.Pod
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
				return false, "", err
			}
			if p.Status.Phase == corev1.PodRunning {
				running++
				nodes[p.Spec.NodeName] = true
			}
			status = append(status, fmt.Sprintf("%s: %s node=%q gates=%v", name, p.Status.Phase, p.Spec.NodeName, gateNames(&p)))
		}
		return running == n, strings.Join(status, "; "), nil
	})
	if len(nodes) != n {
		t.Errorf("the group's %d pods run on %d nodes, want one each: %v", n, len(nodes), keys(nodes))
	}
	launched := newClaims(t, before)
	if len(launched) != n {
		t.Errorf("%d NodeClaims launched for a group of %d, want %d: %v", len(launched), n, n, claimSummary(launched))
	}
	for _, nc := range launched {
		if !nodes[nc.Status.NodeName] {
			t.Errorf("NodeClaim %s (node %q) launched for the group runs none of its pods (pods on %v)", nc.Name, nc.Status.NodeName, keys(nodes))
		}
	}
	var pg berthv1alpha1.PodGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: group}, &pg); err != nil {
		t.Errorf("berth's PodGroup for the Kueue group: %v", err)
	}
	t.Logf("Kueue pod group held by both gates ran whole on %d new nodes %.1fs after submission", len(launched), time.Since(start).Seconds())
}

// TestKueueHeldGangGetsNoCapacity: a Kueue pod group larger than the whole cohort's quota (9 ×
// 8 GPUs against 64) that berth also adopts as a gang. Kueue never admits it, so its gate stays;
// berth must neither launch capacity for it (no seats, no NodeClaims: the queue, not berth,
// decides whether it runs) nor leave it unexplained: the PodGroup says another scheduler's gate
// holds it and its schedule timeout has not started.
func TestKueueHeldGangGetsNoCapacity(t *testing.T) {
	waitQueuesIdle(t)
	ctx := context.Background()
	c := rigtest.Current().Client
	const ns, n = "team-a", 9
	before := claimNames(t)
	group := fmt.Sprintf("big-%d", time.Now().UnixNano()%100000)
	createPodGroup(t, ns, group, n)
	var pg berthv1alpha1.PodGroup
	rigtest.Eventually(t, time.Minute, 250*time.Millisecond, "berth's PodGroup says Kueue holds the gang", func(ctx context.Context) (bool, string, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: group}, &pg); err != nil {
			return false, "no PodGroup yet", client.IgnoreNotFound(err)
		}
		cond := meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionScheduled)
		return cond != nil && cond.Reason == berthv1alpha1.ReasonHeldByOtherScheduler && strings.Contains(cond.Message, kueueAdmissionGate),
			fmt.Sprintf("conditions %v", pg.Status.Conditions), nil
	})
	if pg.Status.WaitingSince != nil {
		t.Errorf("the schedule timeout started while Kueue holds the gang (waitingSince %v)", pg.Status.WaitingSince)
	}
	// Kueue has judged it: no quota (not merely not looked at yet).
	rigtest.Eventually(t, time.Minute, 250*time.Millisecond, "Kueue finds no quota for the group", func(ctx context.Context) (bool, string, error) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: group + "-0"}, &p); err != nil {
			return false, "", err
		}
		wl, err := workloadOf(ctx, ns, p.UID)
		if err != nil || wl == nil {
			return false, "no Workload yet", err
		}
		reserved := conditionOf(wl, "QuotaReserved")
		return reserved["status"] == "False" && reserved["reason"] == "Pending", fmt.Sprintf("QuotaReserved=%v", reserved), nil
	})
	time.Sleep(5 * time.Second) // what berth would have launched by now, it would have asked for already
	var seats corev1.PodList
	if err := c.List(ctx, &seats, client.MatchingLabels{berthv1alpha1.SeatOfLabel: string(pg.UID)}); err != nil {
		t.Fatal(err)
	}
	if len(seats.Items) > 0 {
		t.Errorf("berth created %d seats for a gang Kueue has not admitted", len(seats.Items))
	}
	if launched := newClaims(t, before); len(launched) > 0 {
		t.Errorf("%d NodeClaims launched for a gang Kueue has not admitted: %v", len(launched), claimSummary(launched))
	}
}

// createPodGroup creates n plain pods of one Kueue pod group (queue gpu, one 8-GPU node's worth
// each) in ns, which berth's webhook also adopts as a gang, checks each carries both Kueue's
// and berth's gate, and ends the group at the end of the test.
func createPodGroup(t *testing.T, ns, group string, n int) []string {
	t.Helper()
	c := rigtest.Current().Client
	var names []string
	t.Cleanup(func() { deletePods(t, ns, names) })
	for i := range n {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-%d", group, i), Namespace: ns,
				Labels:      map[string]string{berthv1alpha1.KueueQueueNameLabel: "gpu", berthv1alpha1.KueuePodGroupNameLabel: group},
				Annotations: map[string]string{berthv1alpha1.KueuePodGroupTotalCountAnnotation: fmt.Sprint(n)},
			},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "trainer", Image: "registry.k8s.io/pause:3.10",
				Resources: gpuResources(),
			}}},
		}
		if err := c.Create(context.Background(), p); err != nil {
			t.Fatalf("creating pod %s: %v", p.Name, err)
		}
		names = append(names, p.Name)
		gates := gateNames(p)
		if !slices.Contains(gates, kueueAdmissionGate) || !slices.Contains(gates, berthv1alpha1.SchedulingGate) {
			t.Fatalf("pod %s was created with gates %v, want Kueue's and berth's", p.Name, gates)
		}
	}
	return names
}

// gpuResources is what each pod of the tests asks for: one 8-GPU L40S node's worth of GPUs.
func gpuResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"),
			berthv1alpha1.GPUResource: resource.MustParse(fmt.Sprint(gpusPerNode)),
		},
		Limits: corev1.ResourceList{berthv1alpha1.GPUResource: resource.MustParse(fmt.Sprint(gpusPerNode))},
	}
}

// createJob creates config/samples/kueue/job.yaml in ns, named after base (a unique name), with
// pods pods and the given Kueue priority class ("" keeps the sample's), and deletes it at the end.
func createJob(t *testing.T, ns, base string, pods int32, priority string) *batchv1.Job {
	t.Helper()
	data, err := os.ReadFile(jobFile)
	if err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{}
	if err := utilyaml.Unmarshal(data, job); err != nil {
		t.Fatalf("%s: %v", jobFile, err)
	}
	if base == "" {
		base = job.Name
	}
	job.Name = fmt.Sprintf("%s-%d", base, time.Now().UnixNano()%100000)
	job.Namespace = ns
	job.Spec.Parallelism, job.Spec.Completions = &pods, &pods
	if priority != "" {
		job.Labels[priorityClassLabel] = priority
	}
	// The rig's kwok ends a Job's pods as soon as they run unless told how long they run.
	job.Spec.Template.Annotations = map[string]string{berthv1alpha1.DevRunTimeAnnotation: "1h"}
	c := rigtest.Current().Client
	if err := c.Create(context.Background(), job); err != nil {
		t.Fatalf("creating job: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting job %s: %v", job.Name, err)
		}
	})
	return job
}

// waitAdmitted waits until Kueue admits the job's Workload (quota reserved and every admission
// check Ready) and returns the Workload.
func waitAdmitted(t *testing.T, job *batchv1.Job, timeout time.Duration) *unstructured.Unstructured {
	t.Helper()
	var wl *unstructured.Unstructured
	rigtest.Eventually(t, timeout, 250*time.Millisecond, "job "+job.Name+"'s Workload admitted", func(ctx context.Context) (bool, string, error) {
		var err error
		if wl, err = workloadOf(ctx, job.Namespace, job.UID); err != nil || wl == nil {
			return false, "no Workload yet", err
		}
		checks, _, _ := unstructured.NestedSlice(wl.Object, "status", "admissionChecks")
		admitted := conditionOf(wl, "Admitted")
		return admitted["status"] == "True", fmt.Sprintf("Admitted=%v checks=%v", admitted, checks), nil
	})
	return wl
}

// waitRunning waits until n of the job's pods run, each on its own node, and returns the nodes.
func waitRunning(t *testing.T, job *batchv1.Job, n int, timeout time.Duration) map[string]bool {
	t.Helper()
	nodes := map[string]bool{}
	rigtest.Eventually(t, timeout, 250*time.Millisecond, fmt.Sprintf("job %s's %d pods running", job.Name, n), func(ctx context.Context) (bool, string, error) {
		pods, err := jobPods(ctx, job)
		if err != nil {
			return false, "", err
		}
		clear(nodes)
		var status []string
		running := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning {
				running++
				nodes[p.Spec.NodeName] = true
			}
			status = append(status, fmt.Sprintf("%s: %s node=%q", p.Name, p.Status.Phase, p.Spec.NodeName))
		}
		return running == n && len(nodes) == n, strings.Join(status, "; "), nil
	})
	return nodes
}

// jobPods lists the job's pods that are not being deleted.
func jobPods(ctx context.Context, job *batchv1.Job) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := rigtest.Current().Client.List(ctx, &list, client.InNamespace(job.Namespace), client.MatchingLabels{jobUIDLabel: string(job.UID)}); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// workloadOf finds the Workload Kueue made for the object with the given UID (nil if none yet).
func workloadOf(ctx context.Context, ns string, owner types.UID) (*unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion(kueueGroupVersion)
	list.SetKind("WorkloadList")
	if err := rigtest.Current().Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for i := range list.Items {
		for _, ref := range list.Items[i].GetOwnerReferences() {
			if ref.UID == owner {
				return &list.Items[i], nil
			}
		}
	}
	return nil, nil
}

func getWorkload(ctx context.Context, wl *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	out := &unstructured.Unstructured{}
	out.SetAPIVersion(kueueGroupVersion)
	out.SetKind("Workload")
	err := rigtest.Current().Client.Get(ctx, client.ObjectKeyFromObject(wl), out)
	return out, err
}

// conditionOf returns a condition of an unstructured object's status (nil if absent).
func conditionOf(o *unstructured.Unstructured, typ string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return map[string]any{"status": m["status"], "reason": m["reason"], "message": m["message"]}
		}
	}
	return nil
}

// requestOf returns the ProvisioningRequest Kueue created for a Workload.
func requestOf(t *testing.T, wl *unstructured.Unstructured) *autoscalingv1.ProvisioningRequest {
	t.Helper()
	var list autoscalingv1.ProvisioningRequestList
	if err := rigtest.Current().Client.List(context.Background(), &list, client.InNamespace(wl.GetNamespace())); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		for _, ref := range list.Items[i].OwnerReferences {
			if ref.UID == wl.GetUID() {
				return &list.Items[i]
			}
		}
	}
	t.Fatalf("no ProvisioningRequest owned by Workload %s", wl.GetName())
	return nil
}

// waitQueuesIdle waits until neither ClusterQueue holds a workload (an earlier test's jobs are
// gone), so each test starts from the whole quota.
func waitQueuesIdle(t *testing.T) {
	t.Helper()
	rigtest.Eventually(t, 2*time.Minute, 250*time.Millisecond, "ClusterQueues idle", func(ctx context.Context) (bool, string, error) {
		var status []string
		idle := true
		for _, name := range []string{"team-a", "team-b"} {
			cq := &unstructured.Unstructured{}
			cq.SetAPIVersion(kueueGroupVersion)
			cq.SetKind("ClusterQueue")
			if err := rigtest.Current().Client.Get(ctx, client.ObjectKey{Name: name}, cq); err != nil {
				return false, "", err
			}
			reserving, _, _ := unstructured.NestedInt64(cq.Object, "status", "reservingWorkloads")
			admitted, _, _ := unstructured.NestedInt64(cq.Object, "status", "admittedWorkloads")
			idle = idle && reserving == 0 && admitted == 0
			status = append(status, fmt.Sprintf("%s: reserving %d admitted %d", name, reserving, admitted))
		}
		return idle, strings.Join(status, "; "), nil
	})
}

// claimNames is the set of NodeClaims that exist now.
func claimNames(t *testing.T) map[string]bool {
	t.Helper()
	var list karpv1.NodeClaimList
	if err := rigtest.Current().Client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, nc := range list.Items {
		out[nc.Name] = true
	}
	return out
}

// newClaims returns the NodeClaims not in before, oldest first.
func newClaims(t *testing.T, before map[string]bool) []karpv1.NodeClaim {
	t.Helper()
	var list karpv1.NodeClaimList
	if err := rigtest.Current().Client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var out []karpv1.NodeClaim
	for _, nc := range list.Items {
		if !before[nc.Name] {
			out = append(out, nc)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp) })
	return out
}

func claimSummary(claims []karpv1.NodeClaim) []string {
	var out []string
	for _, nc := range claims {
		out = append(out, fmt.Sprintf("%s@%s→%s", nc.Name, nc.CreationTimestamp.Format("15:04:05"), nc.Status.NodeName))
	}
	return out
}

func gateNames(p *corev1.Pod) []string {
	var out []string
	for _, g := range p.Spec.SchedulingGates {
		out = append(out, g.Name)
	}
	return out
}

// deletePods ends a Kueue pod group as its users do — each pod marked not retriable in the
// group, then deleted — and waits until the pods are gone (Kueue lifts its finalizer once the
// group's workload is finished).
func deletePods(t *testing.T, ns string, names []string) {
	t.Helper()
	c := rigtest.Current().Client
	for _, name := range names {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		patch := []byte(`{"metadata":{"annotations":{"` + retriableInGroupAnnotation + `":"false"}}}`)
		if err := c.Patch(context.Background(), p, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
			t.Errorf("marking pod %s not retriable: %v", name, err)
		}
		if err := c.Delete(context.Background(), p); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting pod %s: %v", name, err)
		}
	}
	rigtest.Eventually(t, time.Minute, 250*time.Millisecond, "the group's pods gone", func(ctx context.Context) (bool, string, error) {
		var left []string
		for _, name := range names {
			var p corev1.Pod
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); client.IgnoreNotFound(err) != nil {
				return false, "", err
			} else if err == nil {
				left = append(left, fmt.Sprintf("%s finalizers=%v", name, p.Finalizers))
			}
		}
		return len(left) == 0, strings.Join(left, "; "), nil
	})
}

func keys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

func ptrTrue(b *bool) bool { return b != nil && *b }
