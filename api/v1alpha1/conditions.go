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
	// ReasonWaitingForVolumes: a member's PersistentVolumeClaim does not exist yet or waits to be
	// bound (Immediate binding); new capacity would not help.
	ReasonWaitingForVolumes = "WaitingForVolumes"
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
	// ReasonProvisioningWithdrawn: the last request was withdrawn at its timeout because the
	// gang fell short of members while it ran (a Job suspended, members deleted); the next
	// starts, without a backoff, once the members are back and do not fit.
	ReasonProvisioningWithdrawn = "ProvisioningWithdrawn"
)

// Reasons of the DisruptionTarget condition berth sets on a member pod before it deletes it, so a
// Job's podFailurePolicy can ignore the deletion (rule: action Ignore, onPodConditions
// [{type: DisruptionTarget}]), as it ignores a preemption or an eviction.
const (
	// DisruptionReasonGangRestart: the gang restarts whole (onMemberLoss RestartGang) after
	// another member was lost.
	DisruptionReasonGangRestart = "BerthGangRestart"
	// DisruptionReasonMemberStranded: the member could never bind where it was released (its
	// room taken, or its node gone) and is replaced.
	DisruptionReasonMemberStranded = "BerthMemberStranded"
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

// The node conditions berth's agent writes, and their reasons.
const (
	// NodeConditionAcceleratedHardwareReady is the node condition Karpenter's AWS node-repair
	// policies act on (False: the node is replaced or rebooted) and berth's gang admission reads.
	// berth's agent writes it only for faults that need a new node, and never where another
	// component (the EKS node monitoring agent) writes it.
	NodeConditionAcceleratedHardwareReady = "AcceleratedHardwareReady"
	// NodeConditionGPUDegraded is berth's own node condition (True: degraded) for GPU trouble
	// that recovers in place: throttling, pending page retirement or row remapping, non-fatal
	// Xids, NVML unavailable. No repair policy reads it.
	NodeConditionGPUDegraded = "GPUDegraded"

	// ReasonGPUsHealthy: NVML reports every GPU healthy (AcceleratedHardwareReady=True,
	// GPUDegraded=False).
	ReasonGPUsHealthy = "GPUsHealthy"

	// ReasonNvidiaXIDErrorFormat (fmt, with the Xid number) is the AcceleratedHardwareReady=False
	// reason for a fatal Xid, in the form the EKS node monitoring agent uses and Karpenter's AWS
	// repair policies match (NvidiaXID79Error). A double-bit ECC error is reported as Xid 48, a
	// failed row remap as Xid 64, a lost GPU as Xid 79.
	ReasonNvidiaXIDErrorFormat = "NvidiaXID%dError"
	// ReasonNvidiaDeviceCountMismatch (AcceleratedHardwareReady=False): NVML sees fewer GPUs than
	// the instance type has.
	ReasonNvidiaDeviceCountMismatch = "NvidiaDeviceCountMismatch"

	// GPUDegraded reasons.
	ReasonRecovering          = "Recovering"
	ReasonNVMLUnavailable     = "NVMLUnavailable"
	ReasonNoGPUs              = "NoGPUs"
	ReasonXidError            = "XidError"
	ReasonRetiredPagesPending = "RetiredPagesPending"
	ReasonRowRemapPending     = "RowRemapPending"
	ReasonThermalThrottle     = "ThermalThrottle"
	ReasonPowerBrake          = "PowerBrake"
)
