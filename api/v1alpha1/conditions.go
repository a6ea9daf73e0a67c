package v1alpha1

// Condition types and reasons berth writes: on PodGroups (status.conditions) and, through its
// agent, on Nodes. Each reason is CamelCase and names the state, as `kubectl describe` shows it.

// Condition types on a PodGroup.
const (
	// ConditionScheduled is True once the whole gang has been placed and released.
	ConditionScheduled = "Scheduled"
	// ConditionReady is True while at least minMember members are running.
	ConditionReady = "Ready"
	// ConditionCapacityProvisioned is True once Karpenter capacity for every member is in place.
	ConditionCapacityProvisioned = "CapacityProvisioned"
	// ConditionDisrupted is True when a node backing a running gang was disrupted.
	ConditionDisrupted = "Disrupted"
	// ConditionGPUHealthy is False while a node backing the gang reports unhealthy GPUs
	// (node condition AcceleratedHardwareReady=False, from berth's agent).
	ConditionGPUHealthy = "GPUHealthy"
)

// Reasons shared by several PodGroup conditions.
const (
	// ReasonWaitingForMembers (Scheduled, Ready): fewer than minMember members exist.
	ReasonWaitingForMembers = "WaitingForMembers"
)

// Reasons of the Scheduled condition.
const (
	// ReasonUnschedulable: the gang does not fit, and no capacity is requested for it.
	ReasonUnschedulable = "Unschedulable"
	// ReasonUnsupported: a member asks for something gang placement cannot model.
	ReasonUnsupported = "Unsupported"
	// ReasonAdmitted: every member was placed and released together.
	ReasonAdmitted = "Admitted"
	// ReasonScheduleTimeout: the gang was not admitted within scheduleTimeoutSeconds.
	ReasonScheduleTimeout = "ScheduleTimeout"
	// ReasonMembersNotGated: members exist but none carries berth's scheduling gate.
	ReasonMembersNotGated = "MembersNotGated"
	// ReasonWaitingForCapacity: the gang does not fit, and capacity was requested from Karpenter.
	ReasonWaitingForCapacity = "WaitingForCapacity"
	// ReasonHeldByOtherScheduler: enough members exist, but another scheduler's gate (a queue's
	// admission gate) still holds some; the schedule timeout has not started.
	ReasonHeldByOtherScheduler = "HeldByOtherScheduler"
)

// Reasons of the Ready condition.
const (
	// ReasonMembersRunning: at least minMember members are running.
	ReasonMembersRunning = "MembersRunning"
	// ReasonTooFewMembersRunning: fewer than minMember members are running.
	ReasonTooFewMembersRunning = "TooFewMembersRunning"
	// ReasonGangSucceeded: at least minMember members completed successfully.
	ReasonGangSucceeded = "GangSucceeded"
	// ReasonGangFailed: too many members failed for minMember to still be reached.
	ReasonGangFailed = "GangFailed"
)

// Reasons of the CapacityProvisioned condition.
const (
	// ReasonProvisioning: a capacity request (seat pods) is in flight.
	ReasonProvisioning = "Provisioning"
	// ReasonProvisioned: capacity for every member without a place was Ready.
	ReasonProvisioned = "Provisioned"
	// ReasonProvisioningFailed: the last request was not Ready within its timeout.
	ReasonProvisioningFailed = "ProvisioningFailed"
)

// Reasons of the Disrupted condition.
const (
	// ReasonNodeDisrupted: a node backing the running gang was disrupted.
	ReasonNodeDisrupted = "NodeDisrupted"
)

// Reasons of the GPUHealthy condition.
const (
	// ReasonNodesHealthy: every node backing the gang reports healthy GPUs.
	ReasonNodesHealthy = "NodesHealthy"
	// ReasonGPUUnhealthy: a node backing the gang reports unhealthy GPUs.
	ReasonGPUUnhealthy = "GPUUnhealthy"
)

// The node condition berth's agent owns, and its reasons.
const (
	// NodeConditionAcceleratedHardwareReady is the node condition berth's agent writes. Karpenter's
	// AWS node-repair policies and berth's gang admission read it.
	NodeConditionAcceleratedHardwareReady = "AcceleratedHardwareReady"

	// ReasonGPUsHealthy: NVML reports every GPU healthy.
	ReasonGPUsHealthy = "GPUsHealthy"
	// ReasonRecovering: faults cleared, but not for long enough to call the node healthy.
	ReasonRecovering = "Recovering"
	// ReasonNVMLUnavailable: NVML could not be loaded or initialised.
	ReasonNVMLUnavailable = "NVMLUnavailable"
	// ReasonNoGPUs: NVML reports no GPUs.
	ReasonNoGPUs = "NoGPUs"

	// Fault reasons, one per kind of GPU fault the agent detects.
	ReasonXidCriticalError    = "XidCriticalError"
	ReasonEccDoubleBitErrors  = "EccDoubleBitErrors"
	ReasonRetiredPagesPending = "RetiredPagesPending"
	ReasonRowRemapPending     = "RowRemapPending"
	ReasonRowRemapFailed      = "RowRemapFailed"
	ReasonThermalThrottle     = "ThermalThrottle"
	ReasonPowerBrake          = "PowerBrake"
	ReasonGPULost             = "GPULost"
)
