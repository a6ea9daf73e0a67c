// Package events holds every Event reason berth emits, and typed constructors for them, so
// reasons stay consistent across controllers and are documented in one place.
package events

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Event reasons. Each is CamelCase and names what happened, as `kubectl describe` shows it.
const (
	// ReasonGangRunning: at least minMember members of a PodGroup are running.
	ReasonGangRunning = "GangRunning"
	// ReasonGangSucceeded: at least minMember members of a PodGroup completed successfully
	// (the same word as the Ready condition's reason).
	ReasonGangSucceeded = berthv1alpha1.ReasonGangSucceeded
	// ReasonGangFailed: a PodGroup can no longer reach minMember (the same word as the Ready
	// condition's reason).
	ReasonGangFailed = berthv1alpha1.ReasonGangFailed
	// ReasonGangAdmitted: every member was placed and released together.
	ReasonGangAdmitted = "GangAdmitted"
	// ReasonGangUnschedulable: the gang does not fit yet; the note says why.
	ReasonGangUnschedulable = "GangUnschedulable"
	// ReasonGangTimedOut: the gang was not admitted within scheduleTimeoutSeconds.
	ReasonGangTimedOut = "GangTimedOut"
	// ReasonMemberReplaced: a pinned member's node vanished before it bound; it was deleted so
	// its controller recreates it.
	ReasonMemberReplaced = "MemberReplaced"
	// ReasonMemberStranded: a pinned member's node vanished and nothing will recreate it.
	ReasonMemberStranded = "MemberStranded"
	// ReasonLateMemberAdmitted: a member created after admission was placed and released.
	ReasonLateMemberAdmitted = "LateMemberAdmitted"
	// ReasonGangNodeUnhealthy: a node backing an admitted gang reports unhealthy GPUs.
	ReasonGangNodeUnhealthy = "GangNodeUnhealthy"
	// ReasonPodGroupMissing: a gated member names a PodGroup that does not exist.
	ReasonPodGroupMissing = "PodGroupMissing"
	// ReasonGangAdapted: a PodGroup was created for a gang declared for another scheduler.
	ReasonGangAdapted = "GangAdapted"
	// ReasonGangSizeUnknown: a pod of a foreign gang cannot be admitted: its size is unknown.
	ReasonGangSizeUnknown = "GangSizeUnknown"
	// ReasonGangCannotFormWhole: an adapted gang's owner creates its members one after another
	// (a LeaderWorkerSet with startupPolicy LeaderReady), so berth admits them as they come.
	ReasonGangCannotFormWhole = "GangCannotFormWhole"
	// ReasonStaleGangReplaced: an adapted PodGroup left from an earlier submission of the same
	// gang name (another owner) was deleted, so the new submission gets a PodGroup of its own.
	ReasonStaleGangReplaced = "StaleGangReplaced"
	// ReasonGangNameTaken: a pod's foreign gang name is held by the adapted PodGroup of another
	// workload that still exists.
	ReasonGangNameTaken = "GangNameTaken"
	// ReasonLateMemberWaiting: a member created after admission does not fit yet.
	ReasonLateMemberWaiting = "LateMemberWaiting"
	// ReasonGangRestarted: an admitted generation ended (nothing of it left running) and the new
	// members are admitted whole as the next generation (a workload restart, a Job's next wave).
	ReasonGangRestarted = "GangRestarted"
	// ReasonGangRestarting: a member was lost and onMemberLoss is RestartGang: berth deletes the
	// live members so their workload recreates the gang.
	ReasonGangRestarting = "GangRestarting"
	// ReasonCapacityRequested: seat pods were created so Karpenter provisions a gang's capacity.
	ReasonCapacityRequested = "CapacityRequested"
	// ReasonGangStepFailed: berth could not move a gang forward (a write refused or failing);
	// the gang backs off alone and every other gang goes on.
	ReasonGangStepFailed = "GangStepFailed"
	// ReasonCapacityNotProvisioned: a capacity request timed out; its seats were withdrawn.
	ReasonCapacityNotProvisioned = "CapacityNotProvisioned"
	// ReasonCapacityWithdrawn: a gang short of members had its capacity request withdrawn at
	// the request's timeout; its seats went.
	ReasonCapacityWithdrawn = "CapacityWithdrawn"
	// ReasonCapacityNotRequested: berth cannot order capacity as seats — a device claim of a
	// native gang's members cannot be carried by a seat, or the API server refused a
	// ProvisioningRequest's seats (a quota, a webhook); the note says which and why.
	ReasonCapacityNotRequested = "CapacityNotRequested"
	// ReasonCapacityHandedOver: a native gang's capacity is on Ready nodes; its seats gave way so
	// kube-scheduler's gang cycle places the gang there.
	ReasonCapacityHandedOver = "CapacityHandedOver"
	// ReasonUnsafeConsolidation: a GPU NodePool lets Karpenter consolidate underutilized nodes
	// (running GPU pods) and the consolidation guard only audits it.
	ReasonUnsafeConsolidation = "UnsafeConsolidation"
	// ReasonConsolidationGuarded: the consolidation guard changed a GPU NodePool so Karpenter no
	// longer consolidates its underutilized nodes; the note says what changed.
	ReasonConsolidationGuarded = "ConsolidationGuarded"
	// ReasonInvalidConsolidationGuard: a NodePool's consolidation-guard or consolidate-after
	// annotation has a value the guard does not accept; the note names the accepted values.
	ReasonInvalidConsolidationGuard = "InvalidConsolidationGuard"
	// ReasonGangMemberDisrupted: a node backing a running gang is being disrupted (Karpenter
	// taint, node or NodeClaim deletion, node gone, or a member marked as disruption target).
	ReasonGangMemberDisrupted = "GangMemberDisrupted"
	// ReasonCapacityBooked: a ProvisioningRequest's capacity is on Ready nodes, held by seats
	// for the pods that consume it.
	ReasonCapacityBooked = "CapacityBooked"
	// ReasonBookingReleased: a ProvisioningRequest's booking ended (its pods run, or the booking
	// time passed) and its seats were removed.
	ReasonBookingReleased = "BookingReleased"
	// ReasonBookedCapacityLost: a seat holding a ProvisioningRequest's booked capacity went away
	// (preempted, its node gone) before the pods that consume it arrived.
	ReasonBookedCapacityLost = "BookedCapacityLost"
)

// Actions, the machine-readable verb of an events.k8s.io Event.
const (
	// ActionReconcile marks events raised while reconciling an object's state.
	ActionReconcile = "Reconcile"
)

// maxNoteLength keeps notes well under the API's 1 kB limit.
const maxNoteLength = 512

// Recorder emits berth's Events.
type Recorder struct {
	rec events.EventRecorder
}

// NewRecorder wraps an events.k8s.io recorder.
func NewRecorder(rec events.EventRecorder) *Recorder { return &Recorder{rec: rec} }

// Normal emits a Normal event with one of the reasons above.
func (r *Recorder) Normal(obj runtime.Object, reason, note string) {
	r.rec.Eventf(obj, nil, corev1.EventTypeNormal, reason, ActionReconcile, "%s", truncate(note))
}

// Warning emits a Warning event with one of the reasons above.
func (r *Recorder) Warning(obj runtime.Object, reason, note string) {
	r.rec.Eventf(obj, nil, corev1.EventTypeWarning, reason, ActionReconcile, "%s", truncate(note))
}

func truncate(s string) string {
	if len(s) <= maxNoteLength {
		return s
	}
	return s[:maxNoteLength-3] + "..."
}
