package guard

import (
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// poolBuilder builds a NodePool: by default WhenEmptyOrUnderutilized, consolidateAfter 0s,
// Karpenter's default budget, and no instance restriction.
type poolBuilder struct{ np karpv1.NodePool }

func pool() *poolBuilder {
	return &poolBuilder{np: karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "np"},
		Spec: karpv1.NodePoolSpec{Disruption: karpv1.Disruption{
			ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized,
			ConsolidateAfter:    karpv1.MustParseNillableDuration("0s"),
			Budgets:             []karpv1.Budget{{Nodes: "10%"}},
		}},
	}}
}

func (b *poolBuilder) label(k, v string) *poolBuilder {
	if b.np.Labels == nil {
		b.np.Labels = map[string]string{}
	}
	b.np.Labels[k] = v
	return b
}

func (b *poolBuilder) annotate(k, v string) *poolBuilder {
	if b.np.Annotations == nil {
		b.np.Annotations = map[string]string{}
	}
	b.np.Annotations[k] = v
	return b
}

func (b *poolBuilder) gpu() *poolBuilder { return b.label(berthv1alpha1.GPUPoolLabel, "true") }

func (b *poolBuilder) taint(key string) *poolBuilder {
	b.np.Spec.Template.Spec.Taints = append(b.np.Spec.Template.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
	return b
}

func (b *poolBuilder) req(key string, op corev1.NodeSelectorOperator, values ...string) *poolBuilder {
	b.np.Spec.Template.Spec.Requirements = append(b.np.Spec.Template.Spec.Requirements,
		karpv1.NodeSelectorRequirementWithMinValues{Key: key, Operator: op, Values: values})
	return b
}

func (b *poolBuilder) policy(p karpv1.ConsolidationPolicy) *poolBuilder {
	b.np.Spec.Disruption.ConsolidationPolicy = p
	return b
}

func (b *poolBuilder) after(d string) *poolBuilder {
	b.np.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration(d)
	return b
}

func (b *poolBuilder) budgets(bs ...karpv1.Budget) *poolBuilder {
	b.np.Spec.Disruption.Budgets = bs
	return b
}

func (b *poolBuilder) obj() *karpv1.NodePool { return b.np.DeepCopy() }

func TestIsGPUPool(t *testing.T) {
	in, notIn, exists := corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists
	tests := []struct {
		name string
		np   *karpv1.NodePool
		want bool
	}{
		{"no restriction is not a GPU pool", pool().obj(), false},
		{"labelled", pool().gpu().obj(), true},
		{"label false", pool().label(berthv1alpha1.GPUPoolLabel, "false").obj(), false},
		{"taints nvidia.com/gpu", pool().taint(berthv1alpha1.GPUResource).obj(), true},
		{"other taint", pool().taint("dedicated").obj(), false},
		{"gpu-count Gt 0", pool().req(awsv1.LabelInstanceGPUCount, corev1.NodeSelectorOpGt, "0").obj(), true},
		{"gpu-count Gt 3", pool().req(awsv1.LabelInstanceGPUCount, corev1.NodeSelectorOpGt, "3").obj(), true},
		{"gpu-count Gte 1", pool().req(awsv1.LabelInstanceGPUCount, "Gte", "1").obj(), true},
		{"gpu-count Gte 0 admits CPU instances only as well", pool().req(awsv1.LabelInstanceGPUCount, "Gte", "0").obj(), false},
		{"gpu-count Lt 1 is CPU", pool().req(awsv1.LabelInstanceGPUCount, corev1.NodeSelectorOpLt, "1").obj(), false},
		{"gpu-count In 0 is CPU", pool().req(awsv1.LabelInstanceGPUCount, in, "0").obj(), false},
		{"gpu-count In 0,8", pool().req(awsv1.LabelInstanceGPUCount, in, "0", "8").obj(), true},
		{"gpu-count Exists", pool().req(awsv1.LabelInstanceGPUCount, exists).obj(), true},
		{"gpu-count NotIn 0 is not positive selection", pool().req(awsv1.LabelInstanceGPUCount, notIn, "0").obj(), false},
		{"gpu-name In", pool().req(awsv1.LabelInstanceGPUName, in, "h100").obj(), true},
		{"gpu-name Exists", pool().req(awsv1.LabelInstanceGPUName, exists).obj(), true},
		{"gpu-manufacturer In", pool().req(awsv1.LabelInstanceGPUManufacturer, in, "nvidia").obj(), true},
		{"gpu-name NotIn", pool().req(awsv1.LabelInstanceGPUName, notIn, "t4").obj(), false},
		{"catalogue family", pool().req(awsv1.LabelInstanceFamily, in, "m5", "p5e").obj(), true},
		{"family p3 by pattern", pool().req(awsv1.LabelInstanceFamily, in, "p3").obj(), true},
		{"family g4dn by pattern", pool().req(awsv1.LabelInstanceFamily, in, "g4dn").obj(), true},
		{"CPU families", pool().req(awsv1.LabelInstanceFamily, in, "m5", "c5", "inf2", "gr").obj(), false},
		{"family NotIn GPU", pool().req(awsv1.LabelInstanceFamily, notIn, "p5").obj(), false},
		{"category g", pool().req(awsv1.LabelInstanceCategory, in, "c", "g").obj(), true},
		{"category m", pool().req(awsv1.LabelInstanceCategory, in, "m", "c").obj(), false},
		{"instance type p4d", pool().req(corev1.LabelInstanceTypeStable, in, "m5.large", "p4d.24xlarge").obj(), true},
		{"instance type g6e", pool().req(corev1.LabelInstanceTypeStable, in, "g6e.xlarge").obj(), true},
		{"CPU instance types", pool().req(corev1.LabelInstanceTypeStable, in, "m5.large", "c5.xlarge").obj(), false},
		{"capacity type only", pool().req(karpv1.CapacityTypeLabelKey, in, "spot").obj(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := IsGPUPool(tt.np)
			if got != tt.want {
				t.Errorf("IsGPUPool = %v (%s), want %v", got, why, tt.want)
			}
			if why == "" {
				t.Error("IsGPUPool gave no reason")
			}
		})
	}
}

func TestConsolidatesUnderutilized(t *testing.T) {
	underutilized := []karpv1.DisruptionReason{karpv1.DisruptionReasonUnderutilized}
	tests := []struct {
		name string
		np   *karpv1.NodePool
		want bool
	}{
		{"WhenEmptyOrUnderutilized, default budget", pool().obj(), true},
		{"empty policy defaults to WhenEmptyOrUnderutilized", pool().policy("").obj(), true},
		{"Balanced consolidates underutilized nodes too", pool().policy(karpv1.ConsolidationPolicyBalanced).obj(), true},
		{"WhenEmpty", pool().policy(karpv1.ConsolidationPolicyWhenEmpty).obj(), false},
		{"consolidateAfter Never", pool().after("Never").obj(), false},
		{"static pool", func() *karpv1.NodePool { np := pool().obj(); np.Spec.Replicas = ptr.To[int64](2); return np }(), false},
		{"Underutilized budget 0", pool().budgets(karpv1.Budget{Nodes: "10%"}, karpv1.Budget{Nodes: "0", Reasons: underutilized}).obj(), false},
		{"budget 0% for all reasons", pool().budgets(karpv1.Budget{Nodes: "0%"}).obj(), false},
		{"budget 0 for Empty only", pool().budgets(karpv1.Budget{Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonEmpty}}).obj(), true},
		{"budget 1 for Underutilized", pool().budgets(karpv1.Budget{Nodes: "1", Reasons: underutilized}).obj(), true},
		{"scheduled budget 0 blocks only part of the time", pool().budgets(karpv1.Budget{Nodes: "0", Reasons: underutilized,
			Schedule: ptr.To("0 9 * * 1-5"), Duration: &metav1.Duration{Duration: 8 * 3600e9}}).obj(), true},
		{"no budgets", pool().budgets().obj(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := consolidatesUnderutilized(tt.np)
			if got != tt.want {
				t.Errorf("consolidatesUnderutilized = %v (%s), want %v", got, why, tt.want)
			}
			if !got && why == "" {
				t.Error("safe without a reason")
			}
			// A GPU pool is unsafe exactly when it consolidates underutilized nodes; a CPU
			// pool never is.
			if gpuPool := tt.np.DeepCopy(); IsUnsafe(withLabel(gpuPool)) != tt.want {
				t.Errorf("IsUnsafe(GPU pool) = %v, want %v", !tt.want, tt.want)
			}
			if IsUnsafe(tt.np) {
				t.Error("IsUnsafe(CPU pool) = true")
			}
		})
	}
}

func withLabel(np *karpv1.NodePool) *karpv1.NodePool {
	np.Labels = map[string]string{berthv1alpha1.GPUPoolLabel: "true"}
	return np
}

func TestResolveMode(t *testing.T) {
	tests := []struct {
		name        string
		np          *karpv1.NodePool
		def         Mode
		want        Mode
		wantInvalid string
	}{
		{"default", pool().obj(), ModeEnforce, ModeEnforce, ""},
		{"default audit", pool().obj(), ModeAudit, ModeAudit, ""},
		{"annotation wins", pool().annotate(berthv1alpha1.ConsolidationGuardAnnotation, "when-empty").obj(), ModeEnforce, ModeWhenEmpty, ""},
		{"off", pool().annotate(berthv1alpha1.ConsolidationGuardAnnotation, "off").obj(), ModeEnforce, ModeOff, ""},
		{"unknown is audited", pool().annotate(berthv1alpha1.ConsolidationGuardAnnotation, "strict").obj(), ModeEnforce, ModeAudit, "strict"},
		{"empty is the default", pool().annotate(berthv1alpha1.ConsolidationGuardAnnotation, " ").obj(), ModeOff, ModeOff, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, invalid := resolveMode(tt.np, tt.def)
			if got != tt.want || invalid != tt.wantInvalid {
				t.Errorf("resolveMode = %q, %q; want %q, %q", got, invalid, tt.want, tt.wantInvalid)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range Modes {
		if got, err := ParseMode(string(m)); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %q, %v", m, got, err)
		}
	}
	if _, err := ParseMode("Enforce"); err == nil {
		t.Error("ParseMode(Enforce) accepted a wrongly cased mode")
	}
}

func TestPlan(t *testing.T) {
	underutilized := karpv1.Budget{Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonUnderutilized}}
	drifted := karpv1.Budget{Nodes: "1", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonDrifted}}
	tests := []struct {
		name        string
		np          *karpv1.NodePool
		mode        Mode
		wantPatched *karpv1.NodePool
		wantStatus  string
	}{
		{"CPU pool: nothing to say", pool().obj(), ModeEnforce, nil, ""},
		{"off: nothing to say", pool().gpu().obj(), ModeOff, nil, ""},
		{"enforce appends the budget and keeps the others", pool().gpu().budgets(karpv1.Budget{Nodes: "10%"}, drifted).obj(), ModeEnforce,
			pool().gpu().budgets(karpv1.Budget{Nodes: "10%"}, drifted, underutilized).obj(),
			"enforced: added Underutilized budget (nodes 0) to WhenEmptyOrUnderutilized"},
		{"enforce without budgets keeps Karpenter's default for other reasons", pool().gpu().budgets().obj(), ModeEnforce,
			pool().gpu().budgets(karpv1.Budget{Nodes: "10%"}, underutilized).obj(),
			"enforced: added Underutilized budget (nodes 0) to WhenEmptyOrUnderutilized"},
		{"enforce on Balanced", pool().gpu().policy(karpv1.ConsolidationPolicyBalanced).obj(), ModeEnforce,
			pool().gpu().policy(karpv1.ConsolidationPolicyBalanced).budgets(karpv1.Budget{Nodes: "10%"}, underutilized).obj(),
			"enforced: added Underutilized budget (nodes 0) to Balanced"},
		{"when-empty defaults consolidateAfter to 1h", pool().gpu().obj(), ModeWhenEmpty,
			pool().gpu().policy(karpv1.ConsolidationPolicyWhenEmpty).after("1h").obj(),
			"enforced: consolidationPolicy WhenEmptyOrUnderutilized changed to WhenEmpty, consolidateAfter 1h"},
		{"when-empty takes consolidateAfter from the annotation",
			pool().gpu().annotate(berthv1alpha1.ConsolidateAfterAnnotation, "30m").obj(), ModeWhenEmpty,
			pool().gpu().annotate(berthv1alpha1.ConsolidateAfterAnnotation, "30m").policy(karpv1.ConsolidationPolicyWhenEmpty).after("30m").obj(),
			"enforced: consolidationPolicy WhenEmptyOrUnderutilized changed to WhenEmpty, consolidateAfter 30m"},
		{"when-empty with a bad annotation uses 1h",
			pool().gpu().annotate(berthv1alpha1.ConsolidateAfterAnnotation, "soon").obj(), ModeWhenEmpty,
			pool().gpu().annotate(berthv1alpha1.ConsolidateAfterAnnotation, "soon").policy(karpv1.ConsolidationPolicyWhenEmpty).after("1h").obj(),
			`enforced: consolidationPolicy WhenEmptyOrUnderutilized changed to WhenEmpty, consolidateAfter 1h (invalid scheduling.berth.dev/consolidate-after "soon")`},
		{"audit reports", pool().gpu().obj(), ModeAudit, nil, "unsafe: WhenEmptyOrUnderutilized without Underutilized budget"},
		{"audit reports the defaulted policy", pool().gpu().policy("").obj(), ModeAudit, nil, "unsafe: WhenEmptyOrUnderutilized without Underutilized budget"},
		{"safe WhenEmpty pool", pool().gpu().policy(karpv1.ConsolidationPolicyWhenEmpty).obj(), ModeEnforce, nil, "safe: consolidationPolicy WhenEmpty"},
		{"safe by a user's budget", pool().gpu().budgets(underutilized).obj(), ModeAudit, nil, `safe: a budget with nodes "0" blocks Underutilized disruption`},
		{"a pool the guard made safe stays enforced",
			pool().gpu().budgets(karpv1.Budget{Nodes: "10%"}, underutilized).
				annotate(berthv1alpha1.ConsolidationGuardStatusAnnotation, "enforced: added Underutilized budget (nodes 0) to WhenEmptyOrUnderutilized").obj(),
			ModeEnforce, nil, "enforced: added Underutilized budget (nodes 0) to WhenEmptyOrUnderutilized"},
		{"an unsafe pool once enforced is enforced again",
			pool().gpu().annotate(berthv1alpha1.ConsolidationGuardStatusAnnotation, "enforced: added Underutilized budget (nodes 0) to WhenEmptyOrUnderutilized").obj(),
			ModeEnforce,
			pool().gpu().budgets(karpv1.Budget{Nodes: "10%"}, underutilized).
				annotate(berthv1alpha1.ConsolidationGuardStatusAnnotation, "enforced: added Underutilized budget (nodes 0) to WhenEmptyOrUnderutilized").obj(),
			"enforced: added Underutilized budget (nodes 0) to WhenEmptyOrUnderutilized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.np.DeepCopy()
			patched, status := plan(tt.np, tt.mode)
			if diff := cmp.Diff(in, tt.np); diff != "" {
				t.Errorf("plan changed its input (-before +after):\n%s", diff)
			}
			if status != tt.wantStatus {
				t.Errorf("status = %q, want %q", status, tt.wantStatus)
			}
			if diff := cmp.Diff(specOf(tt.wantPatched), specOf(patched)); diff != "" {
				t.Errorf("patched spec (-want +got):\n%s", diff)
			}
			if patched != nil && IsUnsafe(patched) {
				t.Error("the patched NodePool is still unsafe")
			}
		})
	}
}

// specOf is what a test compares of a planned NodePool: the disruption settings, with the
// consolidateAfter as written.
func specOf(np *karpv1.NodePool) any {
	if np == nil {
		return nil
	}
	d := np.Spec.Disruption
	after := "Never"
	if d.ConsolidateAfter.Duration != nil {
		after = d.ConsolidateAfter.String()
	}
	return struct {
		Policy  karpv1.ConsolidationPolicy
		After   string
		Budgets []karpv1.Budget
	}{d.ConsolidationPolicy, after, d.Budgets}
}

func TestAnnotationProblems(t *testing.T) {
	np := pool().gpu().annotate(berthv1alpha1.ConsolidateAfterAnnotation, "soon").obj()
	if got := annotationProblems(np, ModeEnforce, ""); len(got) != 0 {
		t.Errorf("enforce ignores consolidate-after, got problems %q", got)
	}
	if got := annotationProblems(np, ModeWhenEmpty, ""); len(got) != 1 {
		t.Errorf("when-empty with a bad consolidate-after: got problems %q", got)
	}
	got := annotationProblems(pool().obj(), ModeAudit, "strict")
	want := []string{`scheduling.berth.dev/consolidation-guard "strict" is not a mode (accepted: enforce, when-empty, audit, off); the NodePool is audited`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if got := withModeNote("unsafe: x", "strict"); got != `unsafe: x (unknown scheduling.berth.dev/consolidation-guard "strict", audited)` {
		t.Errorf("withModeNote = %q", got)
	}
}
