package devcluster

import (
	"context"
	"errors"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
)

func TestClauseAbout(t *testing.T) {
	note := `Failed to schedule pod, no instance type had enough resources, requirements=karpenter.sh/nodepool In [gpu-l40s], resources={}; ` +
		`all available instance types exceed limits for nodepool (NodePool=gpu-h100); no instance type has enough resources, requirements=karpenter.sh/nodepool In [cpu]`
	for _, tc := range []struct {
		name, note, pool, want string
	}{
		{"limit clause", note, "gpu-h100", "all available instance types exceed limits for nodepool (NodePool=gpu-h100)"},
		{"requirements clause", note, "cpu", "no instance type has enough resources, requirements=karpenter.sh/nodepool In [cpu]"},
		{"no clause: whole note", "something else", "gpu-h100", "something else"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := clauseAbout(tc.note, tc.pool); got != tc.want {
				t.Errorf("clauseAbout() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCheapestFit(t *testing.T) {
	for _, tc := range []struct {
		name              string
		instanceType      string
		gpus, cpu, memGiB int64
		want              string
		wantOK            bool
	}{
		{"two 1-GPU pods on g6e", "g6e.48xlarge", 2, 32, 128, "g6e.12xlarge", true},
		{"three pods need more vCPUs", "g6e.48xlarge", 3, 48, 192, "g6e.24xlarge", true},
		{"two pods on g5", "g5.48xlarge", 2, 32, 128, "g5.12xlarge", true},
		{"nothing holds 9 GPUs", "g5.48xlarge", 9, 1, 1, "", false},
		{"unknown family", "x1.large", 1, 1, 1, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := cheapestFit(tc.instanceType, tc.gpus, tc.cpu, tc.memGiB)
			if ok != tc.wantOK || (ok && got != tc.want) {
				t.Errorf("cheapestFit() = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestBudgetList(t *testing.T) {
	budgets := []karpv1.Budget{{Nodes: "100%"}, {Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonUnderutilized}}}
	if got, want := budgetList(budgets), "[nodes 100%] [nodes 0 for Underutilized]"; got != want {
		t.Errorf("budgetList() = %q, want %q", got, want)
	}
	if !guardBudget(budgets) {
		t.Error("guardBudget() = false for a pool with berth's budget")
	}
	if guardBudget(budgets[:1]) {
		t.Error("guardBudget() = true for a pool without berth's budget")
	}
}

func TestBatchNote(t *testing.T) {
	at := func(d time.Duration) karpv1.NodeClaim {
		return karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).Add(d))}}
	}
	for _, tc := range []struct {
		name   string
		claims []karpv1.NodeClaim
		want   string
	}{
		{"same second", []karpv1.NodeClaim{at(0), at(0)}, "in one batch, at 12:00:00"},
		{"a second apart", []karpv1.NodeClaim{at(time.Second), at(0)}, "in one batch, at 12:00:00"},
		{"batches apart", []karpv1.NodeClaim{at(0), at(12 * time.Second)}, "over 12s, from 12:00:00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := batchNote(tc.claims); got != tc.want {
				t.Errorf("batchNote() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestScenesTable(t *testing.T) {
	want := []string{"training", "gang", "provision", "guard", "autoscale", "dra", "lws"}
	if got := sceneNames(); !slices.Equal(got, want) {
		t.Fatalf("scenes = %v, want %v", got, want)
	}
	kebab := regexp.MustCompile(`^[a-z]+(-[a-z]+)*$`)
	for _, s := range scenes {
		if !kebab.MatchString(s.Name) || s.Title == "" || s.run == nil || s.timeout <= 0 {
			t.Errorf("scene %q: want a kebab-case name, a title, a run function and a timeout; got title %q, timeout %s", s.Name, s.Title, s.timeout)
		}
	}
	if got := Scenes(); len(got) != len(scenes) || &got[0] == &scenes[0] {
		t.Error("Scenes() is not a copy of the table")
	}
}

func TestListScenes(t *testing.T) {
	var b strings.Builder
	if err := ListScenes(&b); err != nil {
		t.Fatal(err)
	}
	want := `training   an 8-GPU training pod on a cluster with no GPU nodes
gang       a 4-member gang (2 GPUs each) while the H100 node is busy
provision  a 2-node gang (2 x 8 H200 GPUs, one zone) on a family with no nodes yet
guard      the consolidation guard on a GPU NodePool that consolidates underutilized nodes
autoscale  a vLLM Deployment sized by KEDA and berth's scaler from queue depth and KV-cache usage
dra        a 2-node gang claiming 8 L40S each through DRA (berth dev up --dra) on a family with no nodes yet
lws        a LeaderWorkerSet of 2-node groups (8 A100s a pod) scaled from 1 to 3 groups on load, each group admitted whole
`
	if b.String() != want {
		t.Errorf("ListScenes() =\n%s\nwant\n%s", b.String(), want)
	}
}

func TestPickScenes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		names   []string
		want    []int
		wantErr string
	}{
		{name: "none named: all, in order", want: []int{0, 1, 2, 3, 4, 5, 6}},
		{name: "one", names: []string{"gang"}, want: []int{1}},
		{name: "a subset keeps the table's order", names: []string{"autoscale", "training", "guard"}, want: []int{0, 3, 4}},
		{name: "a name twice plays once", names: []string{"guard", "guard"}, want: []int{3}},
		{name: "unknown", names: []string{"gang", "nope"}, wantErr: `no scene "nope": the scenes are training, gang, provision, guard, autoscale, dra, lws`},
		{name: "empty name", names: []string{""}, wantErr: `no scene "": the scenes are training, gang, provision, guard, autoscale, dra, lws`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickScenes(tc.names)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("pickScenes() error = %v, want %q", err, tc.wantErr)
				}
				if err := CheckScenes(tc.names...); err == nil || err.Error() != tc.wantErr {
					t.Errorf("CheckScenes() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("pickScenes() = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestDemoRejectsAnUnknownSceneBeforeConnecting(t *testing.T) {
	err := Demo(context.Background(), "/nonexistent/kubeconfig", io.Discard, "nope")
	if err == nil || !strings.HasPrefix(err.Error(), `no scene "nope"`) {
		t.Errorf("Demo() error = %v, want the unknown scene", err)
	}
}

func TestPoll(t *testing.T) {
	ctx := context.Background()
	calls := 0
	if err := poll(ctx, time.Millisecond, 0, func(context.Context) (bool, error) { calls++; return calls == 3, nil }); err != nil || calls != 3 {
		t.Errorf("poll() = %v after %d calls, want nil after 3", err, calls)
	}
	boom := errors.New("boom")
	if err := poll(ctx, time.Millisecond, 0, func(context.Context) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Errorf("poll() = %v, want the check's error", err)
	}
	if err := poll(ctx, time.Millisecond, 20*time.Millisecond, func(context.Context) (bool, error) { return false, nil }); !errors.Is(err, errTimedOut) {
		t.Errorf("poll() = %v, want errTimedOut", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := poll(cctx, time.Hour, 0, func(context.Context) (bool, error) { return false, nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("poll() = %v, want context.Canceled", err)
	}
}

func TestPrinterChange(t *testing.T) {
	var b strings.Builder
	p := &printer{out: &b, start: time.Now()}
	p.once("k", "first")
	p.once("k", "again")
	p.change("m", "gated", "gated")
	p.change("m", "gated", "gated again")
	p.change("m", "released", "released")
	if got, want := printed(&b), []string{"first", "gated", "released"}; !slices.Equal(got, want) {
		t.Errorf("printed %q, want %q", got, want)
	}
}

// fakeDemo is a demo on a fake client holding objs, printing to b.
func fakeDemo(t *testing.T, b *strings.Builder, objs ...client.Object) *demo {
	t.Helper()
	scheme, err := rig.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	return &demo{c: c, p: &printer{out: b, start: time.Now()}}
}

func TestBusyH100ReusesTheTrainingScenesPod(t *testing.T) {
	running := demoTrainingPod(busyPod, "h100", 8)
	running.Spec.NodeName = "h100-node"
	running.Status.Phase = corev1.PodRunning
	var b strings.Builder
	d := fakeDemo(t, &b, running)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pod, err := busyH100(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != "h100-node" {
		t.Errorf("busy pod on node %q, want h100-node", pod.Spec.NodeName)
	}
	if strings.Contains(b.String(), "created pod") {
		t.Errorf("busyH100 created a pod though scene 1's runs:\n%s", b.String())
	}
}

func TestBusyH100CreatesThePodWhenAlone(t *testing.T) {
	var b strings.Builder
	d := fakeDemo(t, &b)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// The fake cluster runs nothing: the pod is created and never starts.
	if _, err := busyH100(ctx, d); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("busyH100() = %v, want a time-out", err)
	}
	if !strings.Contains(b.String(), "created pod "+DemoNamespace+"/"+busyPod) {
		t.Errorf("busyH100 did not create the pod:\n%s", b.String())
	}
}

// printed is what a printer wrote, without the time stamps.
func printed(b *strings.Builder) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if _, text, ok := strings.Cut(line, "] "); ok {
			out = append(out, text)
		}
	}
	return out
}

func TestShowMembers(t *testing.T) {
	member := func(name string, gated bool, node string, phase corev1.PodPhase) *corev1.Pod {
		m := demoTrainingPod(name, "h100", 2)
		m.Labels[berthv1alpha1.PodGroupLabel] = gangName
		if gated {
			m.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: berthv1alpha1.SchedulingGate}}
		}
		m.Spec.NodeName, m.Status.Phase = node, phase
		return m
	}
	var b strings.Builder
	d := fakeDemo(t, &b, member("ddp-0", true, "", corev1.PodPending), member("ddp-1", false, "", corev1.PodPending),
		member("ddp-2", false, "n1", corev1.PodPending), member("ddp-3", false, "n1", corev1.PodRunning))
	for range 2 { // the second look prints nothing: nothing changed
		states, err := d.p.showMembers(context.Background(), d.c, gangName)
		if err != nil {
			t.Fatal(err)
		}
		if got := runningMembers(states); got != 1 {
			t.Errorf("runningMembers() = %d, want 1", got)
		}
	}
	want := []string{"  member ddp-0: gated", "  member ddp-1: released", "  member ddp-2: bound to n1", "  member ddp-3: running on n1"}
	if got := printed(&b); !slices.Equal(got, want) {
		t.Errorf("printed %q, want %q", got, want)
	}
}

func TestShowClaims(t *testing.T) {
	pool := rig.GPUNodePoolName("h100")
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-h100-abcde", Labels: map[string]string{
			karpv1.NodePoolLabelKey: pool, corev1.LabelInstanceTypeStable: "p5.48xlarge", karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeOnDemand,
			corev1.LabelTopologyZone: "us-east-1a", awsv1.LabelInstanceGPUCount: "8", awsv1.LabelInstanceGPUName: "h100",
		}},
		Status: karpv1.NodeClaimStatus{ProviderID: "kwok://n1"},
	}
	nc.StatusConditions().SetTrue(karpv1.ConditionTypeLaunched)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:       corev1.NodeSpec{ProviderID: "kwok://n1"},
		Status: corev1.NodeStatus{
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{berthv1alpha1.GPUResource: resource.MustParse("8")},
		},
	}
	var b strings.Builder
	d := fakeDemo(t, &b, nc, node)
	v, err := d.p.showClaims(context.Background(), d.c, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.claims) != 1 || v.nodeOf[nc.Name] != "n1" || v.ready != 1 || !v.zones["us-east-1a"] {
		t.Errorf("claimView = %+v", v)
	}
	want := []string{
		"Karpenter created NodeClaim gpu-h100-abcde (NodePool gpu-h100)",
		"  NodeClaim gpu-h100-abcde launched: p5.48xlarge on-demand in us-east-1a, 8 GPUs (h100)",
		"  node n1 is Ready with 8 nvidia.com/gpu allocatable",
	}
	if got := printed(&b); !slices.Equal(got, want) {
		t.Errorf("printed %q, want %q", got, want)
	}
}
