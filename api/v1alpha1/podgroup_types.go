package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// API defaults.
const (
	// DefaultScheduleTimeoutSeconds is how long a gang may wait for admission when
	// spec.scheduleTimeoutSeconds is not set.
	DefaultScheduleTimeoutSeconds int32 = 600
	// DefaultProvisioningTimeoutSeconds bounds one capacity request when
	// spec.provisioningTimeoutSeconds is not set.
	DefaultProvisioningTimeoutSeconds int32 = 600
)

// PodGroupPhase is the coarse lifecycle stage of a PodGroup.
// +kubebuilder:validation:Enum=Pending;Provisioning;Admitted;Running;Succeeded;Failed
type PodGroupPhase string

// The phases a PodGroup moves through. Succeeded and Failed hold while nothing of the gang runs
// or waits and its workload (if any) has finished; a new generation of members starts it again,
// except after a schedule timeout with onScheduleTimeout Fail, which is final.
const (
	// PodGroupPending: fewer than minMember members exist, or the gang does not fit yet.
	PodGroupPending PodGroupPhase = "Pending"
	// PodGroupProvisioning: capacity for the whole gang has been requested from Karpenter.
	PodGroupProvisioning PodGroupPhase = "Provisioning"
	// PodGroupAdmitted: every member has been assigned a node and released from its gate.
	PodGroupAdmitted PodGroupPhase = "Admitted"
	// PodGroupRunning: at least minMember members are running.
	PodGroupRunning PodGroupPhase = "Running"
	// PodGroupSucceeded: the gang's workload completed, or (without one) at least minMember
	// members completed successfully and none is left.
	PodGroupSucceeded PodGroupPhase = "Succeeded"
	// PodGroupFailed: the gang's workload failed, or (without one) too many members failed for
	// minMember to be reached and none waits; or it timed out with onScheduleTimeout Fail.
	PodGroupFailed PodGroupPhase = "Failed"
)

// MemberLossPolicy says what berth does when an admitted gang loses a member (it fails, is
// evicted or deleted) while the others run.
// +kubebuilder:validation:Enum=Replace;RestartGang
type MemberLossPolicy string

// The member-loss policies.
const (
	// MemberLossReplace admits the lost member's replacement into the gang's placement: the same
	// topology domain, its predecessor's node when it fits, new capacity from Karpenter when
	// nothing does. The other members keep running.
	MemberLossReplace MemberLossPolicy = "Replace"
	// MemberLossRestartGang deletes every member of a gang whose pods have a controller (a Job,
	// JobSet, …) when one is lost, so the workload recreates them and the new generation is
	// admitted whole. Members without a controller are replaced as with Replace.
	MemberLossRestartGang MemberLossPolicy = "RestartGang"
)

// ScheduleTimeoutPolicy says what happens when a gang is not admitted within
// scheduleTimeoutSeconds.
// +kubebuilder:validation:Enum=Retry;Fail
type ScheduleTimeoutPolicy string

// The schedule-timeout policies.
const (
	// ScheduleTimeoutRetry gives back what the gang held (reserved room, capacity requests),
	// backs off, and waits again; a gang that fits meanwhile is still admitted.
	ScheduleTimeoutRetry ScheduleTimeoutPolicy = "Retry"
	// ScheduleTimeoutFail moves the PodGroup to Failed for good; its members stay gated.
	ScheduleTimeoutFail ScheduleTimeoutPolicy = "Fail"
)

// PodGroupSpec is the desired gang: how many members must be placed together, and where.
// +kubebuilder:validation:XValidation:rule="has(oldSelf.topology) == has(self.topology)",message="topology is immutable"
type PodGroupSpec struct {
	// MinMember is the number of members that must all fit before any of them is released to the
	// scheduler. Members are the pods in the PodGroup's namespace labelled
	// scheduling.berth.dev/pod-group=<PodGroup name>. Immutable.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="minMember is immutable; create a new PodGroup to change the gang size"
	MinMember int32 `json:"minMember"`

	// Topology constrains where members may be placed together. Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="topology is immutable"
	Topology *TopologySpec `json:"topology,omitempty"`

	// NodePool is the name of the Karpenter NodePool to provision capacity from when the gang
	// does not fit existing nodes. Empty means any NodePool whose requirements fit the members.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	NodePool string `json:"nodePool,omitempty"`

	// ScheduleTimeoutSeconds is how long the gang may wait to be admitted whole, counted from
	// when minMember members exist and no other scheduler's gate (Kueue's, say) holds any of
	// them — time a queue holds the workload does not count. What happens then is
	// onScheduleTimeout. 0 waits forever. Defaults to 600.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=0
	ScheduleTimeoutSeconds *int32 `json:"scheduleTimeoutSeconds,omitempty"`

	// OnScheduleTimeout is what a schedule timeout does: Retry (the default) gives back what the
	// gang held and waits again after a backoff; Fail moves the PodGroup to Failed for good.
	// +optional
	// +kubebuilder:default=Retry
	OnScheduleTimeout ScheduleTimeoutPolicy `json:"onScheduleTimeout,omitempty"`

	// OnMemberLoss is what losing a member of an admitted gang does: Replace (the default)
	// admits its replacement into the gang's placement; RestartGang deletes every member of a
	// controller-owned gang so the workload recreates them, admitted whole.
	// +optional
	// +kubebuilder:default=Replace
	OnMemberLoss MemberLossPolicy `json:"onMemberLoss,omitempty"`

	// ProvisioningTimeoutSeconds is how long one request for new capacity may take: when the
	// gang does not fit existing nodes, berth asks Karpenter for capacity for every member that
	// has no place (seat pods); if not all of it is Ready within this time, the request is
	// withdrawn (seats deleted, empty nodes left for Karpenter to reclaim) and retried with
	// backoff. Defaults to 600.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=10
	ProvisioningTimeoutSeconds *int32 `json:"provisioningTimeoutSeconds,omitempty"`

	// Disruption controls how members are shielded from voluntary disruption while they run.
	// +optional
	// +kubebuilder:default={protect: true}
	Disruption *DisruptionSpec `json:"disruption,omitempty"`
}

// TopologySpec co-locates members by a node label.
type TopologySpec struct {
	// RequiredKey is a node label key; every member is placed on nodes that share one value of
	// it, for example topology.kubernetes.io/zone, or a placement-group or NVLink-domain label.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	// +kubebuilder:validation:XValidation:rule="self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')",message="requiredKey must be a valid label key, for example topology.kubernetes.io/zone"
	RequiredKey string `json:"requiredKey"`
}

// DisruptionSpec controls voluntary disruption of a running gang.
type DisruptionSpec struct {
	// Protect shields running members from voluntary disruption (berth marks them
	// karpenter.sh/do-not-disrupt while they run, and removes the mark when the gang ends).
	// +optional
	// +kubebuilder:default=true
	Protect *bool `json:"protect,omitempty"`
}

// PodGroupStatus is what berth last observed and decided about the gang.
type PodGroupStatus struct {
	// ObservedGeneration is the spec generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is the coarse lifecycle stage of the gang.
	// +optional
	Phase PodGroupPhase `json:"phase,omitempty"`

	// Conditions are the detailed state, each with a reason and observedGeneration.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Members counts the gang's pods by state.
	// +optional
	Members MemberCounts `json:"members,omitempty"`

	// AdmittedAt is when the whole gang was released from its gates.
	// +optional
	AdmittedAt *metav1.Time `json:"admittedAt,omitempty"`

	// Nodes are the names of the nodes that back the gang, sorted.
	// +optional
	// +listType=set
	Nodes []string `json:"nodes,omitempty"`

	// Assignments record where admission placed each member of the current generation. They
	// are the durable promise of capacity to the gang: written before any member is released,
	// they let a restarted controller finish a release it started, and keep the capacity of
	// members that are not bound yet from being promised to another gang. A replacement's
	// assignment takes the place of the member it replaces.
	// +optional
	// +listType=map
	// +listMapKey=pod
	Assignments []MemberAssignment `json:"assignments,omitempty"`

	// Recreating are members berth deleted to create again under their names (a stranded
	// member without a controller to recreate it), each with the pod to create, kept until it
	// exists: a controller stopped between the deletion and the creation finishes it when it
	// starts again, so no member is lost.
	// +optional
	// +listType=map
	// +listMapKey=pod
	Recreating []RecreatingMember `json:"recreating,omitempty"`

	// Restarts counts the generations admitted after the first: the gang lost every member it
	// was admitted with (its workload restarted, or the next wave of a Job came) and the new
	// members were admitted whole again.
	// +optional
	Restarts int32 `json:"restarts,omitempty"`

	// WaitingSince is when the current wait for admission began: minMember members existed and
	// no other scheduler's gate held any of them. scheduleTimeoutSeconds counts from it.
	// +optional
	WaitingSince *metav1.Time `json:"waitingSince,omitempty"`

	// ScheduleTimeouts counts the schedule timeouts of the current wait (the backoff grows with it).
	// +optional
	ScheduleTimeouts int32 `json:"scheduleTimeouts,omitempty"`

	// ScheduleRetryAt is when a gang that timed out (onScheduleTimeout Retry) holds room and
	// asks for capacity again; until then it is admitted only if it fits as it is.
	// +optional
	ScheduleRetryAt *metav1.Time `json:"scheduleRetryAt,omitempty"`

	// Workload is the workload whose pods are the members (their topmost controller: a Job,
	// JobSet, LeaderWorkerSet, …), when they have one. The gang is not finished while it is.
	// +optional
	Workload *WorkloadReference `json:"workload,omitempty"`

	// Provisioning is the state of berth's requests to Karpenter for the gang's capacity.
	// +optional
	Provisioning *ProvisioningStatus `json:"provisioning,omitempty"`

	// NodeClaims are the names of the Karpenter NodeClaims that back the gang, sorted.
	// +optional
	// +listType=set
	NodeClaims []string `json:"nodeClaims,omitempty"`
}

// ProvisioningStatus is the state of berth's requests for new capacity for a gang. Each
// attempt creates one seat pod per member that has no place on existing nodes; Karpenter
// provisions nodes for the seats in one batch, and the gang is admitted onto them once every
// seat is on a Ready node.
type ProvisioningStatus struct {
	// Attempt counts the requests made so far.
	Attempt int32 `json:"attempt"`
	// Seats is how many seat pods the current (or last) attempt asked for.
	Seats int32 `json:"seats"`
	// StartedAt is when the current (or last) attempt started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the last attempt ended; unset while an attempt runs.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// RetryAt is when a failed attempt will be retried.
	// +optional
	RetryAt *metav1.Time `json:"retryAt,omitempty"`
	// Failures counts the attempts in a row whose capacity was not Ready within the provisioning
	// timeout: it sizes the backoff before the next attempt. An attempt that gets its capacity
	// sets it to zero; one withdrawn for another reason (the gang fell short of members, its
	// schedule timeout passed) leaves it as it was.
	// +optional
	Failures int32 `json:"failures,omitempty"`
	// LastFailure says why the last failed attempt failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastFailure string `json:"lastFailure,omitempty"`
}

// Active reports whether an attempt is running.
func (p *ProvisioningStatus) Active() bool {
	return p != nil && p.StartedAt != nil && p.FinishedAt == nil
}

// MemberAssignment places one member pod on one node.
type MemberAssignment struct {
	// Pod is the member pod's name.
	Pod string `json:"pod"`
	// UID is the member pod's UID: a pod recreated under the same name (a StatefulSet's, a
	// PyTorchJob's) is a new member, not this one.
	// +optional
	UID types.UID `json:"uid,omitempty"`
	// Node is the node it was placed on.
	Node string `json:"node"`
}

// RecreatingMember is a member pod berth deletes and creates again under its name.
type RecreatingMember struct {
	// Pod is the member pod's name.
	Pod string `json:"pod"`
	// UID is the UID of the pod being replaced: a pod of that name with another UID is the
	// recreated one.
	UID types.UID `json:"uid"`
	// Manifest is the pod to create (metadata and spec).
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Manifest runtime.RawExtension `json:"manifest"`
}

// WorkloadReference names the workload that owns a gang's member pods.
type WorkloadReference struct {
	// APIVersion of the workload, e.g. batch/v1 or jobset.x-k8s.io/v1alpha2.
	APIVersion string `json:"apiVersion"`
	// Kind of the workload, e.g. Job or JobSet.
	Kind string `json:"kind"`
	// Name of the workload, in the PodGroup's namespace.
	Name string `json:"name"`
	// UID of the workload.
	UID types.UID `json:"uid"`
}

// MemberCounts counts a gang's member pods by state. A pod is counted once under total and
// once under the first of gated, succeeded, failed, running, scheduled that applies.
type MemberCounts struct {
	// Total is the number of member pods that exist and are not being deleted.
	Total int32 `json:"total"`
	// Gated members still carry berth's scheduling gate.
	Gated int32 `json:"gated"`
	// Scheduled members are bound to a node but not yet running.
	Scheduled int32 `json:"scheduled"`
	// Running members are in phase Running.
	Running int32 `json:"running"`
	// Succeeded members completed successfully.
	Succeeded int32 `json:"succeeded"`
	// Failed members completed unsuccessfully.
	Failed int32 `json:"failed"`
}

// PodGroup makes the pods labelled scheduling.berth.dev/pod-group=<name> one gang: they are held
// by a scheduling gate until every member fits, then released together.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// Short names are berth's own: "pg" and "pgs" are Volcano's and scheduler-plugins' PodGroups
// too, and "podgroup" names the native scheduling.k8s.io one — use bpg, or the full name
// podgroups.scheduling.berth.dev.
// +kubebuilder:resource:shortName=bpg;bpgs,categories=berth
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Scheduled")].reason`
// +kubebuilder:printcolumn:name="Min",type=integer,JSONPath=`.spec.minMember`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.members.total`
// +kubebuilder:printcolumn:name="Gated",type=integer,JSONPath=`.status.members.gated`
// +kubebuilder:printcolumn:name="Running",type=integer,JSONPath=`.status.members.running`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,priority=1
// +kubebuilder:printcolumn:name="NodePool",type=string,JSONPath=`.spec.nodePool`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PodGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired gang.
	Spec PodGroupSpec `json:"spec"`
	// Status is what berth observed and decided.
	// +optional
	Status PodGroupStatus `json:"status,omitempty"`
}

// PodGroupList is a list of PodGroups.
//
// +kubebuilder:object:root=true
type PodGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the PodGroups.
	Items []PodGroup `json:"items"`
}
