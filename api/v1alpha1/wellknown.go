package v1alpha1

// berth's vocabulary: every label, annotation, scheduling gate, taint and tag key berth reads or
// writes on other objects, in one place. Keys that Kubernetes and Karpenter define in their Go
// packages are used from there and listed at the end of this file; everything else is here.
// `make verify` (hack/check-vocabulary) fails on a key-shaped string literal anywhere else in
// berth's production code.

// Gang membership and admission (pods, nodes).
const (
	// PodGroupLabel is the pod label that makes a pod a member of the PodGroup named by its value,
	// in the pod's own namespace.
	PodGroupLabel = "scheduling.berth.dev/pod-group"

	// SchedulingGate is the scheduling gate berth's webhook adds to member pods; admission
	// removes it from every member in one pass once the whole gang fits.
	SchedulingGate = "scheduling.berth.dev/gang"

	// SourceAnnotation on a member names where its gang membership came from: "berth" or the
	// name of an adapter (coscheduling, volcano, kai, kueue). Set by the pod-gate webhook.
	SourceAnnotation = "scheduling.berth.dev/source"
	// MinMemberAnnotation on an adapted member carries the gang size its source declared on the
	// pod, when it declared one. Set by the pod-gate webhook, read by the adapter.
	MinMemberAnnotation = "scheduling.berth.dev/min-member"
	// AdaptedFromLabel marks PodGroups the adapter created for a foreign gang, with the source's
	// name.
	AdaptedFromLabel = "scheduling.berth.dev/adapted-from"

	// PinnedNodeAnnotation records on a member the node admission pinned it to.
	PinnedNodeAnnotation = "scheduling.berth.dev/node"
	// BarrierLabelPrefix starts the node label that holds a released gang back until all its
	// gates are gone: members require "<BarrierLabelPrefix><gang UID>" on their node, and berth
	// sets that label on the gang's nodes only after removing the last gate, so kube-scheduler
	// binds no member before every member is released. Removed once the members are bound.
	BarrierLabelPrefix = "admit.scheduling.berth.dev/"
	// ReleaseLabel, with the PodGroup's name as value, is set on the one member whose release
	// opens its gang (the key member). The pod gate gives every member it gates a required
	// pod-affinity term for a pod with this label in its ReleaseTopologyKey domain, so no member
	// can bind until the key member, released last, is bound: one write opens the whole gang.
	// Removed from the key member once every member is bound.
	ReleaseLabel = "scheduling.berth.dev/release"
	// ReservationLabelPrefix starts the node label ("<prefix><gang UID>") that keeps a
	// provisioning gang's seats off the nodes where its other members have room. Removed when the
	// provisioning attempt ends.
	ReservationLabelPrefix = "reserve.scheduling.berth.dev/"
)

// Seats: the placeholder pods that hold Karpenter capacity for a gang's missing members.
const (
	// SeatOfLabel on a seat pod holds the UID of the PodGroup it reserves capacity for.
	SeatOfLabel = "scheduling.berth.dev/seat-of"
	// SeatForMemberAnnotation on a seat names the member whose shape it copies.
	SeatForMemberAnnotation = "scheduling.berth.dev/seat-for-member"
	// SeatForGroupAnnotation on a seat names the PodGroup it holds capacity for, as
	// namespace/name: seats live in berth's own namespace, not the gang's.
	SeatForGroupAnnotation = "scheduling.berth.dev/seat-for-group"
	// SeatPriorityClassName is the PriorityClass of seat pods: below every workload, so any
	// member (or other pod) preempts a seat.
	SeatPriorityClassName = "berth-seat"
	// SeatForNativeGroupLabel on a seat pod holds the UID of the native PodGroup
	// (scheduling.k8s.io) it holds capacity for.
	SeatForNativeGroupLabel = "scheduling.berth.dev/seat-for-native-group"
	// NativeSeatIndexLabel on a native gang's seat is its place in the attempt's batch: the
	// seats of members that share one of the gang's device claims keep to the node of the seat
	// that carries it (pod affinity on this label).
	NativeSeatIndexLabel = "scheduling.berth.dev/seat-index"
	// SeatForNativeGroupAnnotation on a native gang's seat names the PodGroup as namespace/name.
	SeatForNativeGroupAnnotation = "scheduling.berth.dev/native-group"
	// NativeCapacityRequestedAtAnnotation on a native PodGroup is when berth last asked
	// Karpenter for the gang's nodes (RFC 3339): the attempt's timeout counts from it.
	NativeCapacityRequestedAtAnnotation = "scheduling.berth.dev/capacity-requested-at"
	// NativeCapacityHandedOverAnnotation on a native PodGroup is when berth's seats last gave
	// way to the gang, every node launched (RFC 3339): berth does not ask again while those
	// nodes come up.
	NativeCapacityHandedOverAnnotation = "scheduling.berth.dev/capacity-handed-over"
	// NativeCapacityRetryAtAnnotation on a native PodGroup is when berth may ask for its
	// capacity again after an attempt timed out (RFC 3339).
	NativeCapacityRetryAtAnnotation = "scheduling.berth.dev/capacity-retry-at"
	// SeatForProvisioningRequestLabel on a seat pod holds the UID of the ProvisioningRequest
	// (autoscaling.x-k8s.io) it books capacity for.
	SeatForProvisioningRequestLabel = "autoscaling.berth.dev/seat-for-provisioning-request"
	// SeatForProvisioningRequestAnnotation on a ProvisioningRequest's seat names the request as
	// namespace/name.
	SeatForProvisioningRequestAnnotation = "autoscaling.berth.dev/provisioning-request"
	// WarmSeatForLabel on a warm seat pod names the ScaledObject (in the seat's namespace)
	// whose burst headroom it holds: a node up with the fleet's serving image pulled, which a
	// scale-up's replica takes by preempting the seat (docs/scaler.md#warm-seats).
	WarmSeatForLabel = "autoscaling.berth.dev/warm-seat-for"
	// WarmSeatComponent is the ComponentLabel value of warm seats.
	WarmSeatComponent = "warm-seat"
	// FleetModelComponent is the ComponentLabel value of the ConfigMaps in the scaler's
	// namespace that keep its fleet models across restarts (scaler/modelstore).
	FleetModelComponent = "fleet-model"
	// WarmSeatTemplateLabel on a warm seat is the hash of the seat's spec, made from the
	// fleet's pod template: a seat of an older template (another image) is replaced.
	WarmSeatTemplateLabel = "autoscaling.berth.dev/warm-seat-template"
	// KueueProvisioningController is the controllerName of Kueue's provisioning admission check,
	// whose ProvisioningRequests berth serves (berth doctor reads it).
	KueueProvisioningController = "kueue.x-k8s.io/provisioning-request"
	// ProvisioningAttemptsDetail is the key in a ProvisioningRequest's
	// status.provisioningClassDetails where berth counts its failed attempts (the retry
	// backoff grows with it).
	ProvisioningAttemptsDetail = "autoscaling.berth.dev/failed-attempts"
)

// Keeping GPU capacity put: the consolidation guard (NodePools) and pod protection.
const (
	// GPUPoolLabel marks a Karpenter NodePool as a GPU pool for the consolidation guard, even
	// when its requirements do not name GPU instance types.
	GPUPoolLabel = "scheduling.berth.dev/gpu-pool"

	// ConsolidationGuardAnnotation on a Karpenter NodePool selects what berth's consolidation
	// guard does with it, overriding the controller's default (--consolidation-guard). Values
	// are the ConsolidationGuard* constants.
	ConsolidationGuardAnnotation = "scheduling.berth.dev/consolidation-guard"
	// ConsolidationGuardEnforce adds a disruption budget {nodes: "0", reasons: [Underutilized]}
	// to a GPU NodePool on WhenEmptyOrUnderutilized, leaving Empty and Drifted alone.
	ConsolidationGuardEnforce = "enforce"
	// ConsolidationGuardWhenEmpty switches a GPU NodePool on WhenEmptyOrUnderutilized to
	// WhenEmpty, with consolidateAfter from ConsolidateAfterAnnotation (default 1h).
	ConsolidationGuardWhenEmpty = "when-empty"
	// ConsolidationGuardAudit changes nothing and reports the unsafe NodePool (Warning Event,
	// metric, ConsolidationGuardStatusAnnotation).
	ConsolidationGuardAudit = "audit"
	// ConsolidationGuardOff leaves the NodePool alone and reports nothing.
	ConsolidationGuardOff = "off"
	// ConsolidateAfterAnnotation is the consolidateAfter the when-empty guard sets.
	ConsolidateAfterAnnotation = "scheduling.berth.dev/consolidate-after"
	// ConsolidationGuardStatusAnnotation is where the guard records what it found and did.
	ConsolidationGuardStatusAnnotation = "scheduling.berth.dev/consolidation-guard-status"

	// ProtectAnnotation on a Deployment (value "true") makes berth mark its running pods
	// karpenter.sh/do-not-disrupt, as it does for members of gangs with disruption.protect.
	ProtectAnnotation = "scheduling.berth.dev/protect"
	// ProtectedByAnnotation marks a pod's or a node's karpenter.sh/do-not-disrupt as set by berth
	// (value ProtectedByBerth), so berth only ever removes the marks it added: pods it protects,
	// and the nodes a gang waiting for Karpenter counts on (with its reservation label).
	ProtectedByAnnotation = "scheduling.berth.dev/do-not-disrupt-by"
	// ProtectedByBerth is the ProtectedByAnnotation value berth writes.
	ProtectedByBerth = "berth"
)

// Nodes, NodePools and EC2 resources berth renders or labels.
const (
	// NodePoolRoleLabel is the node label (from berth's NodePool templates) naming the role a GPU
	// node was provisioned for (inference, training); workloads select their pool with it.
	NodePoolRoleLabel = "scheduling.berth.dev/role"
	// GPUFamilyTag is the EC2 tag naming the GPU product on instances and volumes of a pool
	// rendered from berth's templates.
	GPUFamilyTag = "berth.dev/gpu-family"
	// GPUAllocationLabel is the node label berth's DRA NodePool templates set to
	// GPUAllocationDRA: the node's GPUs are handed out by NVIDIA's DRA driver (gpu.nvidia.com
	// ResourceSlices), not as nvidia.com/gpu. Device-plugin pools carry no such label (adding
	// one would drift, and so replace, every node of an existing pool).
	GPUAllocationLabel = "scheduling.berth.dev/gpu-allocation"
	// GPUAllocationDRA is GPUAllocationLabel's value on DRA pools.
	GPUAllocationDRA = "dra"
	// DRAGPUTaintKey is the taint berth's DRA NodePool templates put on their nodes instead of
	// GPUTaintKey: pods that claim GPUs through DRA tolerate it, and pods that request
	// nvidia.com/gpu (tolerating GPUTaintKey through ExtendedResourceToleration) are kept off
	// nodes whose device plugin is switched off.
	DRAGPUTaintKey = "scheduling.berth.dev/dra-gpu"

	// GPUProductLabel, GPUCountLabel and GPUMemoryLabel are the node labels berth's agent sets
	// when NVIDIA's GPU feature discovery has not labelled the node (GFDProductLabel).
	GPUProductLabel = "scheduling.berth.dev/gpu-product"
	GPUCountLabel   = "scheduling.berth.dev/gpu-count"
	GPUMemoryLabel  = "scheduling.berth.dev/gpu-memory-mib"
	// FatalBootAnnotation on a node holds the boot ID (status.nodeInfo.bootID) during which the
	// agent saw a fatal GPU fault: a restarted agent on the same boot keeps
	// AcceleratedHardwareReady False; after a reboot it looks afresh.
	FatalBootAnnotation = "agent.berth.dev/fatal-boot-id"
)

// The local dev cluster (berth dev) and its vLLM emulator.
const (
	// DevBootingTaint keeps a new dev-cluster node unschedulable until kwok reports it Ready, so
	// the node-ready delay is real.
	DevBootingTaint = "rig.berth.dev/booting"
	// VLLMSimLabel (value "true") on a dev-cluster pod makes berth's vLLM emulator serve vLLM's
	// metrics on the pod's IP.
	VLLMSimLabel = "sim.berth.dev/vllm"
	// DevRunTimeAnnotation on a dev-cluster pod is how long it runs (a Go duration such as
	// "90s" or "2h") before its containers exit; without it a Job's pod exits as soon as it runs
	// and other pods run until deleted.
	DevRunTimeAnnotation = "sim.berth.dev/run-time"
	// DevExitCodeAnnotation on a dev-cluster pod is the exit code its containers end with (at
	// once, or after DevRunTimeAnnotation); anything but "0" makes the pod Failed.
	DevExitCodeAnnotation = "sim.berth.dev/exit-code"
	// DevStartDelayAnnotation on a dev-cluster pod is how long it stays ContainerCreating on its
	// node before it runs and reports Ready (a Go duration): an image pull and a model load.
	DevStartDelayAnnotation = "sim.berth.dev/start-delay"
	// DevDRASliceLabel marks the ResourceSlices the dev cluster's DRA mode publishes for its
	// GPU nodes, as a DRA driver would.
	DevDRASliceLabel = "sim.berth.dev/dra-driver"
)

// Keys of other projects that berth reads or writes and whose Go packages berth does not link.
const (
	// EFAResource is the AWS EFA device plugin's extended resource (training instance types).
	EFAResource = "vpc.amazonaws.com/efa"
	// NoProvisioner is the provisioner of StorageClasses for pre-created (local) volumes, which no
	// provisioner creates: berth does not place members whose unbound claims use one.
	NoProvisioner = "kubernetes.io/no-provisioner"
	// GPUResource is NVIDIA's extended resource for whole GPUs (device plugin), also the key of
	// the taint GPU NodePools carry.
	GPUResource = "nvidia.com/gpu"
	// GPUTaintKey is the taint berth's GPU NodePool templates put on GPU nodes (pods requesting
	// GPUResource tolerate it through the ExtendedResourceToleration admission plugin on EKS).
	GPUTaintKey = GPUResource
	// GFDProductLabel is the label NVIDIA's GPU feature discovery sets; where present, berth's
	// agent sets no GPU labels of its own.
	GFDProductLabel = "nvidia.com/gpu.product"
	// NVIDIAGPUPresentLabel ("true") marks a node with NVIDIA GPUs (NVIDIA's GPU operator sets
	// it); the default node affinity of NVIDIA's DRA driver's kubelet plugin selects it.
	NVIDIAGPUPresentLabel = "nvidia.com/gpu.present"
	// NVIDIADevicePluginDeployLabel ("false") tells NVIDIA's GPU operator not to run its device
	// plugin on the node, so the DRA driver alone hands out its GPUs.
	NVIDIADevicePluginDeployLabel = "nvidia.com/gpu.deploy.device-plugin"

	// CoschedulingPodGroupLabel is scheduler-plugins coscheduling's pod label naming its gang.
	CoschedulingPodGroupLabel = "scheduling.x-k8s.io/pod-group"
	// CoschedulingLegacyPodGroupLabel is the label older coscheduling releases used.
	CoschedulingLegacyPodGroupLabel = "pod-group.scheduling.sigs.k8s.io"
	// VolcanoGroupNameKey is the pod annotation (not a label) Volcano writes naming a pod's
	// PodGroup.
	VolcanoGroupNameKey = "scheduling.k8s.io/group-name"
	// VolcanoJobNameLabel is the label Volcano puts on the pods of a Volcano Job.
	VolcanoJobNameLabel = "volcano.sh/job-name"
	// KAIPodGroupAnnotation is KAI Scheduler's pod annotation naming its PodGroup.
	KAIPodGroupAnnotation = "pod-group-name"
	// KAIQueueLabel is KAI Scheduler's queue label.
	KAIQueueLabel = "kai.scheduler/queue"
	// KueuePodGroupNameLabel is Kueue's label making plain pods one group.
	KueuePodGroupNameLabel = "kueue.x-k8s.io/pod-group-name"
	// KueuePodGroupTotalCountAnnotation is Kueue's annotation with a pod group's size.
	KueuePodGroupTotalCountAnnotation = "kueue.x-k8s.io/pod-group-total-count"
	// KueueQueueNameLabel is Kueue's label submitting a workload to a LocalQueue.
	KueueQueueNameLabel = "kueue.x-k8s.io/queue-name"

	// LWSGroup is LeaderWorkerSet's API group.
	LWSGroup = "leaderworkerset.x-k8s.io"
	// LWSNameLabel is LeaderWorkerSet's label on every pod of a LeaderWorkerSet, naming it.
	LWSNameLabel = "leaderworkerset.sigs.k8s.io/name"
	// LWSWorkerIndexLabel is LeaderWorkerSet's label with a pod's index in its group ("0": the
	// group's leader).
	LWSWorkerIndexLabel = "leaderworkerset.sigs.k8s.io/worker-index"
	// LWSGroupIndexLabel is LeaderWorkerSet's label with a pod's group index (on a leader, set by
	// LeaderWorkerSet's pod webhook).
	LWSGroupIndexLabel = "leaderworkerset.sigs.k8s.io/group-index"
	// LWSRevisionLabel is LeaderWorkerSet's label with the template revision a pod was made
	// from: a leader's workers carry its revision.
	LWSRevisionLabel = "leaderworkerset.sigs.k8s.io/template-revision-hash"
	// LWSSizeAnnotation is LeaderWorkerSet's annotation on every pod with its group's size
	// (leader included).
	LWSSizeAnnotation = "leaderworkerset.sigs.k8s.io/size"
	// LWSLeaderNameAnnotation is LeaderWorkerSet's annotation on a worker naming its group's
	// leader pod; a leader does not carry it.
	LWSLeaderNameAnnotation = "leaderworkerset.sigs.k8s.io/leader-name"
	// LWSExclusiveTopologyAnnotation is LeaderWorkerSet's exclusive placement (a topology key),
	// copied to its pods: LeaderWorkerSet then creates a group's workers only once the leader is
	// scheduled.
	LWSExclusiveTopologyAnnotation = "leaderworkerset.sigs.k8s.io/exclusive-topology"

	// KarpenterDiscoveryTag is the tag Karpenter's getting-started guide puts on a cluster's
	// subnets and security groups; berth's EC2NodeClass templates select on it.
	KarpenterDiscoveryTag = "karpenter.sh/discovery"
	// KwokNodeAnnotation (value "fake") makes kwok manage a node; Karpenter's kwok provider sets
	// it on every node it creates on the dev cluster.
	KwokNodeAnnotation = "kwok.x-k8s.io/node"

	// ManagedByLabel and ComponentLabel are Kubernetes' recommended labels, set on objects berth
	// creates (ManagedByLabel=ManagedByBerth).
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ComponentLabel = "app.kubernetes.io/component"
	// NameLabel is Kubernetes' recommended application-name label; Karpenter's chart sets
	// NameLabel=karpenter on its controller Deployment, which `berth doctor` reads.
	NameLabel = "app.kubernetes.io/name"
	// VersionLabel is Kubernetes' recommended version label; berth's chart sets it to the
	// release's version on every object, which `berth version` reads from the controller.
	VersionLabel = "app.kubernetes.io/version"
	// ManagedByBerth is the ManagedByLabel value of objects berth creates.
	ManagedByBerth = "berth"
)

// Keys from Go packages berth links, used from there (not redefined):
//
//   - Kubernetes (k8s.io/api/core/v1): corev1.LabelHostname, corev1.LabelTopologyZone,
//     corev1.LabelInstanceTypeStable, corev1.LabelArchStable, corev1.LabelOSStable,
//     corev1.LabelMetadataName (namespace name, in the webhook's namespace selector).
//   - Karpenter (sigs.k8s.io/karpenter/pkg/apis/v1): karpv1.DoNotDisruptAnnotationKey (written
//     on protected pods, seats and reserved nodes), karpv1.NodePoolLabelKey (seats select spec.nodePool),
//     karpv1.CapacityTypeLabelKey, karpv1.DisruptedTaintKey (read by disruption reporting).
//   - Karpenter's AWS provider (github.com/aws/karpenter-provider-aws/pkg/apis/v1):
//     awsv1.LabelInstanceFamily, LabelInstanceSize, LabelInstanceCategory,
//     LabelInstanceGPUCount, LabelInstanceGPUName, LabelInstanceGPUMemory,
//     LabelInstanceGPUManufacturer (GPU pool detection, templates, doctor).

// Keys GitOps tools leave on the objects they keep in sync. The consolidation guard reports
// the NodePools that carry them instead of patching them (their self-heal would undo it).
const (
	// ArgoCDTrackingIDAnnotation is Argo CD's annotation-based resource tracking.
	ArgoCDTrackingIDAnnotation = "argocd.argoproj.io/tracking-id"
	// ArgoCDInstanceLabel is Argo CD's label-based resource tracking (when configured to it).
	ArgoCDInstanceLabel = "argocd.argoproj.io/instance"
	// FluxKustomizationLabel names the Flux Kustomization that applied an object.
	FluxKustomizationLabel = "kustomize.toolkit.fluxcd.io/name"
	// FluxHelmReleaseLabel names the Flux HelmRelease that applied an object.
	FluxHelmReleaseLabel = "helm.toolkit.fluxcd.io/name"
)
