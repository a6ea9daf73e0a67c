// Package metrics holds the names shared by every berth metric: the namespace and the label
// names, so metrics read berth_<subsystem>_<name> with snake_case labels everywhere.
package metrics

// Namespace prefixes every berth metric.
const Namespace = "berth"

// Label names.
const (
	// LabelResult is an outcome, e.g. admitted, no_fit.
	LabelResult = "result"
	// LabelStage is a step of a multi-step latency, e.g. released, bound.
	LabelStage = "stage"
	// LabelPhase is a PodGroup phase.
	LabelPhase = "phase"
	// LabelNamespace is the namespace of the object a series is about: the team to route to.
	LabelNamespace = "namespace"
	// LabelPodGroup names a PodGroup (with LabelNamespace).
	LabelPodGroup = "podgroup"
	// LabelNodePool names a Karpenter NodePool.
	LabelNodePool = "nodepool"
	// LabelClass is a ProvisioningRequest's provisioning class.
	LabelClass = "class"
	// LabelCondition and LabelReason are a condition type and the reason it was set with.
	LabelCondition = "condition"
	LabelReason    = "reason"
)
