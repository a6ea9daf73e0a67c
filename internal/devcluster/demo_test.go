package devcluster

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
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
