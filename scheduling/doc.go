// Package scheduling is berth's gang placement: pure functions from a snapshot of the cluster
// and a gang of member pods to either a node for every member or a reason, a human can act on,
// why the gang does not fit.
//
// It holds no Kubernetes client and does no I/O. The PodGroup controller lists nodes and pods,
// builds a Snapshot, calls Place, pins members to the nodes chosen and records them with
// Snapshot.Assume so two gangs are never promised the same capacity.
//
// Placement counts what kube-scheduler counts — pod requests including init containers,
// sidecars and overhead (k8s.io/component-helpers/resource), nodeSelector and required node
// affinity, NoSchedule/NoExecute taints, unschedulable nodes, allocatable pod count, required
// inter-pod affinity and anti-affinity, and DoNotSchedule topology spread — so that a member
// is never pinned where kube-scheduler would then refuse to bind it — host ports (a hostNetwork
// pod's ports too) and the node topology of members' volumes (resolved by the caller into a
// VolumeTopology) included — and members' resource claims (DRA): given the cluster's
// ResourceSlices, DeviceClasses, claims and templates (SetDynamicResources), each member goes
// only where k8s.io/dynamic-resource-allocation's structured allocator, the one kube-scheduler
// runs, can allocate its claims, against a device ledger of what the cluster's claims hold and
// what berth has promised. Features it does not model (namespaceSelector in pod affinity;
// claims when the snapshot was not given the dynamic resources) are detected and reported as
// unsupported instead of guessed.
//
// Gangs are packed tightly: fewest nodes first, then the least capacity left stranded on the
// nodes used, preferring existing free capacity in every case. Results are deterministic for a
// given snapshot.
package scheduling
