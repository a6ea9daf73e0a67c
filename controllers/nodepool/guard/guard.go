package guard

import (
	"fmt"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/gpu"
)

// Mode is what the consolidation guard does with an unsafe GPU NodePool.
type Mode string

// The guard's modes, as spelled in the ConsolidationGuardAnnotation and the
// --consolidation-guard flag.
const (
	// ModeEnforce adds a budget blocking Underutilized consolidation.
	ModeEnforce Mode = berthv1alpha1.ConsolidationGuardEnforce
	// ModeWhenEmpty switches the NodePool to consolidationPolicy WhenEmpty.
	ModeWhenEmpty Mode = berthv1alpha1.ConsolidationGuardWhenEmpty
	// ModeAudit changes nothing and reports the unsafe NodePool.
	ModeAudit Mode = berthv1alpha1.ConsolidationGuardAudit
	// ModeOff ignores the NodePool.
	ModeOff Mode = berthv1alpha1.ConsolidationGuardOff
)

// Modes are the accepted modes, in the order messages list them.
var Modes = []Mode{ModeEnforce, ModeWhenEmpty, ModeAudit, ModeOff}

// DefaultConsolidateAfter is the consolidateAfter the when-empty guard sets when the NodePool
// has no ConsolidateAfterAnnotation.
const DefaultConsolidateAfter = "1h"

// Prefixes of the status the guard records in ConsolidationGuardStatusAnnotation.
const (
	// StatusSafe: Karpenter does not consolidate the pool's underutilized nodes.
	StatusSafe = "safe"
	// StatusUnsafe: Karpenter may consolidate the pool's underutilized nodes (audit).
	StatusUnsafe = "unsafe"
	// StatusEnforced: the guard changed the pool so that it does not.
	StatusEnforced = "enforced"
)

// ParseMode validates a mode name (the --consolidation-guard flag).
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown consolidation guard mode %q (accepted: %s)", s, acceptedModes())
}

func acceptedModes() string {
	names := make([]string, len(Modes))
	for i, m := range Modes {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}

// resolveMode is the mode for np: its ConsolidationGuardAnnotation, else (also when empty) def.
// An annotation that names no mode is returned as invalid, and the NodePool is audited.
func resolveMode(np *karpv1.NodePool, def Mode) (mode Mode, invalid string) {
	v := strings.TrimSpace(np.Annotations[berthv1alpha1.ConsolidationGuardAnnotation])
	if v == "" {
		return def, ""
	}
	m, err := ParseMode(v)
	if err != nil {
		return ModeAudit, v
	}
	return m, ""
}

// gpuFamilyPattern matches EC2 GPU family names not in berth's catalogue: p or g followed by a
// digit (p3, p4de, g4dn, g5g).
var gpuFamilyPattern = regexp.MustCompile(`^[pg][0-9]`)

// isGPUFamily reports whether an EC2 instance family carries GPUs.
func isGPUFamily(family string) bool {
	for _, f := range gpu.GPUFamilies() {
		if f.Name == family {
			return true
		}
	}
	return gpuFamilyPattern.MatchString(family)
}

// IsGPUPool reports whether the guard treats np as a GPU pool, and why. A NodePool is one when
// it is labelled GPUPoolLabel=true, when its template taints nvidia.com/gpu, or when a
// requirement positively selects GPU instances (GPU count, name or manufacturer; a GPU
// instance family, category or type).
//
// A pool with no instance restriction at all is not a GPU pool: Karpenter launches GPU nodes
// from it only for pods that request GPUs, and treating every unrestricted pool as a GPU pool
// would pin the consolidation of all CPU capacity. `berth doctor` is to report such pools; label
// them GPUPoolLabel=true to guard them.
func IsGPUPool(np *karpv1.NodePool) (bool, string) {
	if np.Labels[berthv1alpha1.GPUPoolLabel] == "true" {
		return true, "labelled " + berthv1alpha1.GPUPoolLabel + "=true"
	}
	for _, t := range np.Spec.Template.Spec.Taints {
		if t.Key == berthv1alpha1.GPUResource {
			return true, "its nodes are tainted " + berthv1alpha1.GPUResource
		}
	}
	for _, r := range np.Spec.Template.Spec.Requirements {
		if selectsGPUs(r) {
			return true, fmt.Sprintf("requirement %s %s %v selects GPU instances", r.Key, r.Operator, r.Values)
		}
	}
	return false, "no GPU label, taint or requirement selecting GPU instances"
}

// selectsGPUs reports whether a requirement positively selects GPU instances.
func selectsGPUs(r karpv1.NodeSelectorRequirementWithMinValues) bool {
	switch r.Key {
	case awsv1.LabelInstanceGPUCount:
		return selectsNonZeroCount(r)
	case awsv1.LabelInstanceGPUName, awsv1.LabelInstanceGPUManufacturer:
		return r.Operator == corev1.NodeSelectorOpExists || (r.Operator == corev1.NodeSelectorOpIn && len(r.Values) > 0)
	case awsv1.LabelInstanceFamily:
		return r.Operator == corev1.NodeSelectorOpIn && slices.ContainsFunc(r.Values, isGPUFamily)
	case awsv1.LabelInstanceCategory:
		return r.Operator == corev1.NodeSelectorOpIn && (slices.Contains(r.Values, "p") || slices.Contains(r.Values, "g"))
	case corev1.LabelInstanceTypeStable:
		return r.Operator == corev1.NodeSelectorOpIn && slices.ContainsFunc(r.Values, func(t string) bool {
			family, _, _ := strings.Cut(t, ".")
			return isGPUFamily(family)
		})
	}
	return false
}

// ExcludesGPUs reports whether np's requirements rule out every GPU instance (a zero GPU count,
// no GPU manufacturer, or instance categories, families or types that are all non-GPU). A pool
// that neither selects nor excludes GPUs can launch a GPU instance for a pod that asks for one.
func ExcludesGPUs(np *karpv1.NodePool) bool {
	return slices.ContainsFunc(np.Spec.Template.Spec.Requirements, excludesGPUs)
}

func excludesGPUs(r karpv1.NodeSelectorRequirementWithMinValues) bool {
	notGPU := func(v string) bool { return !isGPUFamily(v) }
	switch r.Key {
	case awsv1.LabelInstanceGPUCount:
		return r.Operator == corev1.NodeSelectorOpDoesNotExist ||
			(r.Operator == corev1.NodeSelectorOpIn && !selectsNonZeroCount(r)) ||
			(r.Operator == corev1.NodeSelectorOpLt && len(r.Values) == 1 && !atLeast(r.Values[0], 2))
	case awsv1.LabelInstanceGPUName, awsv1.LabelInstanceGPUManufacturer:
		return r.Operator == corev1.NodeSelectorOpDoesNotExist
	case awsv1.LabelInstanceCategory:
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			return !slices.Contains(r.Values, "p") && !slices.Contains(r.Values, "g")
		case corev1.NodeSelectorOpNotIn:
			return slices.Contains(r.Values, "p") && slices.Contains(r.Values, "g")
		}
	case awsv1.LabelInstanceFamily:
		return r.Operator == corev1.NodeSelectorOpIn && len(r.Values) > 0 && !slices.ContainsFunc(r.Values, isGPUFamily) && slices.ContainsFunc(r.Values, notGPU)
	case corev1.LabelInstanceTypeStable:
		return r.Operator == corev1.NodeSelectorOpIn && len(r.Values) > 0 && !slices.ContainsFunc(r.Values, func(t string) bool {
			family, _, _ := strings.Cut(t, ".")
			return isGPUFamily(family)
		})
	}
	return false
}

// selectsNonZeroCount reports whether an instance-gpu-count requirement admits GPU instances.
func selectsNonZeroCount(r karpv1.NodeSelectorRequirementWithMinValues) bool {
	switch r.Operator {
	case corev1.NodeSelectorOpExists:
		return true
	case corev1.NodeSelectorOpIn:
		return slices.ContainsFunc(r.Values, func(v string) bool { n, err := strconv.Atoi(v); return err == nil && n > 0 })
	case corev1.NodeSelectorOpGt:
		return len(r.Values) == 1 && atLeast(r.Values[0], 0)
	case "Gte":
		return len(r.Values) == 1 && atLeast(r.Values[0], 1)
	}
	return false
}

func atLeast(v string, min int) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n >= min
}

// consolidatesUnderutilized reports whether Karpenter may consolidate np's underutilized
// nodes; when it may not, why says what prevents it.
func consolidatesUnderutilized(np *karpv1.NodePool) (bool, string) {
	d := np.Spec.Disruption
	switch {
	case np.Spec.Replicas != nil:
		return false, "static NodePool (replicas set): Karpenter does not consolidate it"
	case d.ConsolidationPolicy == karpv1.ConsolidationPolicyWhenEmpty:
		return false, "consolidationPolicy WhenEmpty"
	case neverConsolidates(d.ConsolidateAfter):
		return false, "consolidateAfter Never"
	}
	for _, b := range d.Budgets {
		if blocksUnderutilized(b) {
			return false, fmt.Sprintf("a budget with nodes %q blocks Underutilized disruption", b.Nodes)
		}
	}
	return true, ""
}

// neverConsolidates reports whether consolidateAfter is Never: no duration, which is how
// Karpenter reads it (the API defaults an unset consolidateAfter to 0s).
func neverConsolidates(d karpv1.NillableDuration) bool { return d.Duration == nil }

// blocksUnderutilized reports whether a budget allows no Underutilized disruption, at all
// times: nodes "0" (or "0%"), no schedule, and reasons empty (all) or naming Underutilized.
func blocksUnderutilized(b karpv1.Budget) bool {
	if (b.Nodes != "0" && b.Nodes != "0%") || b.Schedule != nil || b.Duration != nil {
		return false
	}
	return len(b.Reasons) == 0 || slices.Contains(b.Reasons, karpv1.DisruptionReasonUnderutilized)
}

// IsUnsafe reports whether np is a GPU pool whose underutilized nodes Karpenter may consolidate,
// evicting running GPU pods to repack them.
func IsUnsafe(np *karpv1.NodePool) bool {
	if ok, _ := IsGPUPool(np); !ok {
		return false
	}
	unsafe, _ := consolidatesUnderutilized(np)
	return unsafe
}

// guardBudget is the budget the enforce mode adds.
func guardBudget() karpv1.Budget {
	return karpv1.Budget{Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonUnderutilized}}
}

// defaultBudget is the budget Karpenter's API gives a NodePool without budgets; enforce keeps it
// when it adds its own, so Empty and Drifted disruption stay as they were.
func defaultBudget() karpv1.Budget { return karpv1.Budget{Nodes: "10%"} }

// consolidateAfter is the when-empty guard's consolidateAfter for np, as written, and the
// annotation's value when it is not a valid duration (the default is used then).
func consolidateAfter(np *karpv1.NodePool) (value, invalid string) {
	v, ok := np.Annotations[berthv1alpha1.ConsolidateAfterAnnotation]
	if !ok {
		return DefaultConsolidateAfter, ""
	}
	v = strings.TrimSpace(v)
	if v == karpv1.Never || durationPattern.MatchString(v) {
		return v, ""
	}
	return DefaultConsolidateAfter, v
}

// durationPattern is the schema of NodePool spec.disruption.consolidateAfter.
var durationPattern = regexp.MustCompile(`^([0-9]+(s|m|h))+$`)

// plan decides what the guard does with np in mode: the NodePool with the guard's spec change
// (nil when the spec stays as it is), and the status to record in
// ConsolidationGuardStatusAnnotation ("" when the guard has nothing to say: not a GPU pool, or
// mode off). It changes nothing in np.
func plan(np *karpv1.NodePool, mode Mode) (*karpv1.NodePool, string) {
	if mode == ModeOff {
		return nil, ""
	}
	if ok, _ := IsGPUPool(np); !ok {
		return nil, ""
	}
	unsafe, why := consolidatesUnderutilized(np)
	if !unsafe {
		// A pool the guard made safe stays "enforced": its own change is what keeps it safe.
		if current := np.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation]; strings.HasPrefix(current, StatusEnforced+":") {
			return nil, current
		}
		return nil, StatusSafe + ": " + why
	}
	policy := string(np.Spec.Disruption.ConsolidationPolicy)
	if policy == "" {
		policy = string(karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized)
	}
	switch mode {
	case ModeEnforce:
		out := np.DeepCopy()
		if len(out.Spec.Disruption.Budgets) == 0 {
			out.Spec.Disruption.Budgets = []karpv1.Budget{defaultBudget()}
		}
		out.Spec.Disruption.Budgets = append(out.Spec.Disruption.Budgets, guardBudget())
		return out, StatusEnforced + ": added Underutilized budget (nodes 0) to " + policy
	case ModeWhenEmpty:
		out := np.DeepCopy()
		after, invalid := consolidateAfter(np)
		out.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
		out.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration(after)
		status := fmt.Sprintf("%s: consolidationPolicy %s changed to WhenEmpty, consolidateAfter %s", StatusEnforced, policy, after)
		if invalid != "" {
			status += fmt.Sprintf(" (invalid %s %q)", berthv1alpha1.ConsolidateAfterAnnotation, invalid)
		}
		return out, status
	}
	return nil, StatusUnsafe + ": " + policy + " without Underutilized budget"
}

// annotationProblems are the NodePool's guard annotations with values the guard does not
// accept, as sentences for a Warning Event.
func annotationProblems(np *karpv1.NodePool, mode Mode, invalidMode string) []string {
	var out []string
	if invalidMode != "" {
		out = append(out, fmt.Sprintf("%s %q is not a mode (accepted: %s); the NodePool is audited",
			berthv1alpha1.ConsolidationGuardAnnotation, invalidMode, acceptedModes()))
	}
	if mode == ModeWhenEmpty {
		if _, invalid := consolidateAfter(np); invalid != "" {
			out = append(out, fmt.Sprintf("%s %q is not a duration like 30m, 1h or Never; %s is used",
				berthv1alpha1.ConsolidateAfterAnnotation, invalid, DefaultConsolidateAfter))
		}
	}
	return out
}

// withModeNote adds to a status that the NodePool's mode annotation was not understood.
func withModeNote(status, invalidMode string) string {
	if status == "" || invalidMode == "" {
		return status
	}
	return fmt.Sprintf("%s (unknown %s %q, audited)", status, berthv1alpha1.ConsolidationGuardAnnotation, invalidMode)
}
