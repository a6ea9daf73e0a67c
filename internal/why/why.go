// Package why explains what a gang (a berth PodGroup) waits for, in the words an ML engineer
// needs: its Scheduled condition, each member's state (gated by berth, held by another
// scheduler's gate, pinned to a node, bound, pending with kube-scheduler's reason), the capacity
// request in flight, its NodePool's GPU limit, and the namespace's quotas on what the members
// ask for. Explain is pure; Read gathers its inputs from the cluster.
package why

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Inputs are what Explain reads: the PodGroup, its members, its NodePool (nil when it names
// none or it is not found) and the namespace's ResourceQuotas.
type Inputs struct {
	Group    *berthv1alpha1.PodGroup
	Members  []corev1.Pod
	NodePool *karpv1.NodePool
	Quotas   []corev1.ResourceQuota
	// Claims are the namespace's ResourceClaims, when a member claims devices (DRA).
	Claims []resourcev1.ResourceClaim
}

// Explanation is what a gang waits for.
type Explanation struct {
	PodGroup  string `json:"podGroup"`
	Phase     string `json:"phase"`
	MinMember int32  `json:"minMember"`
	// Reason and Message are the Scheduled condition's.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Capacity is the CapacityProvisioned condition and the request in flight, if any.
	Capacity *Capacity      `json:"capacity,omitempty"`
	Members  []MemberState  `json:"members"`
	NodePool *NodePoolLimit `json:"nodePool,omitempty"`
	Quotas   []QuotaUse     `json:"quotas,omitempty"`
	// Summary says it in sentences, most important first.
	Summary []string `json:"summary"`
}

// Capacity is the gang's capacity request.
type Capacity struct {
	Reason      string `json:"reason,omitempty"`
	Message     string `json:"message,omitempty"`
	Attempt     int32  `json:"attempt,omitempty"`
	Seats       int32  `json:"seats,omitempty"`
	LastFailure string `json:"lastFailure,omitempty"`
}

// MemberState is one member and why it is where it is.
type MemberState struct {
	Name string `json:"name"`
	// State is one of the State* values.
	State string `json:"state"`
	// Node is the node it is bound or pinned to.
	Node string `json:"node,omitempty"`
	// Detail is what holds it: another scheduler's gates, kube-scheduler's reason.
	Detail string `json:"detail,omitempty"`
	// GPUs it asks for (nvidia.com/gpu).
	GPUs int64 `json:"gpus,omitempty"`
	// Devices are its resource claims (DRA), one line each: what it claims and where that
	// stands (to be made, missing, not allocated yet, allocated on a node).
	Devices []string `json:"devices,omitempty"`
}

// Member states.
const (
	StateGated     = "gated"     // held by berth's gate until the whole gang fits
	StateHeld      = "held"      // held by another scheduler's gate (a queue such as Kueue)
	StatePinned    = "released"  // released onto a node, not bound yet
	StatePending   = "pending"   // no gate left, not bound: kube-scheduler's turn
	StateBound     = "bound"     // bound, not running yet
	StateRunning   = "running"   // running
	StateSucceeded = "succeeded" // finished well
	StateFailed    = "failed"    // finished badly
	StateDeleting  = "deleting"  // being deleted
)

// NodePoolLimit is the gang's NodePool and its GPU budget.
type NodePoolLimit struct {
	Name  string `json:"name"`
	Limit string `json:"gpuLimit,omitempty"`
	Used  string `json:"gpuUsed,omitempty"`
}

// QuotaUse is a ResourceQuota on something the members ask for.
type QuotaUse struct {
	Quota    string `json:"quota"`
	Resource string `json:"resource"`
	Used     string `json:"used"`
	Hard     string `json:"hard"`
	// Short says the gang's members that are not running yet would not fit under it.
	Short bool `json:"short"`
}

const gpu = berthv1alpha1.GPUResource

// Explain builds the explanation.
func Explain(in Inputs) Explanation {
	g := in.Group
	ex := Explanation{PodGroup: g.Namespace + "/" + g.Name, Phase: string(g.Status.Phase), MinMember: g.Spec.MinMember}
	if ex.Phase == "" {
		ex.Phase = string(berthv1alpha1.PodGroupPending)
	}
	if c := meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionScheduled); c != nil {
		ex.Reason, ex.Message = c.Reason, c.Message
	}
	if c := meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionCapacityProvisioned); c != nil || g.Status.Provisioning != nil {
		ex.Capacity = &Capacity{}
		if c != nil {
			ex.Capacity.Reason, ex.Capacity.Message = c.Reason, c.Message
		}
		if p := g.Status.Provisioning; p != nil {
			ex.Capacity.Attempt, ex.Capacity.Seats, ex.Capacity.LastFailure = p.Attempt, p.Seats, p.LastFailure
		}
	}
	waiting := corev1.ResourceList{}
	counts := map[string]int{}
	claims := make(map[string]*resourcev1.ResourceClaim, len(in.Claims))
	for i := range in.Claims {
		claims[in.Claims[i].Name] = &in.Claims[i]
	}
	for i := range in.Members {
		m := memberState(&in.Members[i])
		m.Devices = memberDevices(&in.Members[i], claims)
		ex.Members = append(ex.Members, m)
		counts[m.State]++
		if m.State != StateRunning && m.State != StateSucceeded && m.State != StateFailed && m.State != StateBound {
			addRequests(waiting, &in.Members[i])
		}
	}
	sort.Slice(ex.Members, func(i, j int) bool { return ex.Members[i].Name < ex.Members[j].Name })
	if np := in.NodePool; np != nil {
		ex.NodePool = &NodePoolLimit{Name: np.Name}
		if q, ok := np.Spec.Limits[gpu]; ok {
			ex.NodePool.Limit = q.String()
		}
		if q, ok := np.Status.Resources[gpu]; ok {
			ex.NodePool.Used = q.String()
		}
	}
	ex.Quotas = quotaUses(in.Quotas, waiting)
	ex.Summary = summarize(ex, counts, len(in.Members), waiting)
	return ex
}

func memberState(p *corev1.Pod) MemberState {
	m := MemberState{Name: p.Name, Node: p.Spec.NodeName}
	if q, ok := requests(p)[gpu]; ok {
		m.GPUs = q.Value()
	}
	var others []string
	berthGated := false
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == berthv1alpha1.SchedulingGate {
			berthGated = true
		} else {
			others = append(others, g.Name)
		}
	}
	switch {
	case p.DeletionTimestamp != nil:
		m.State = StateDeleting
	case p.Status.Phase == corev1.PodSucceeded:
		m.State = StateSucceeded
	case p.Status.Phase == corev1.PodFailed:
		m.State = StateFailed
	case p.Status.Phase == corev1.PodRunning:
		m.State = StateRunning
	case p.Spec.NodeName != "":
		m.State = StateBound
	case len(others) > 0:
		m.State, m.Detail = StateHeld, "held by "+strings.Join(others, ", ")
	case berthGated:
		m.State = StateGated
	default:
		m.State = StatePending
		if n := p.Annotations[berthv1alpha1.PinnedNodeAnnotation]; n != "" {
			m.State, m.Node = StatePinned, n
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				m.Detail = strings.TrimSpace(c.Reason + ": " + c.Message)
			}
		}
	}
	return m
}

// requests is what a pod asks of a node: the sum of its containers (the larger of that and any
// init container), plus overhead — enough for quotas and GPUs.
func requests(p *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, c := range p.Spec.Containers {
		for k, v := range c.Resources.Requests {
			q := out[k]
			q.Add(v)
			out[k] = q
		}
		for k, v := range c.Resources.Limits {
			if _, ok := c.Resources.Requests[k]; !ok && k == gpu {
				q := out[k]
				q.Add(v)
				out[k] = q
			}
		}
	}
	for _, c := range p.Spec.InitContainers {
		for k, v := range c.Resources.Requests {
			if v.Cmp(out[k]) > 0 {
				out[k] = v.DeepCopy()
			}
		}
	}
	for k, v := range p.Spec.Overhead {
		q := out[k]
		q.Add(v)
		out[k] = q
	}
	return out
}

func addRequests(into corev1.ResourceList, p *corev1.Pod) {
	for k, v := range requests(p) {
		q := into[k]
		q.Add(v)
		into[k] = q
	}
}

// quotaUses are the quotas on what the waiting members ask for; Short when used plus their
// requests passes hard.
func quotaUses(quotas []corev1.ResourceQuota, waiting corev1.ResourceList) []QuotaUse {
	var out []QuotaUse
	for _, q := range quotas {
		// The quota controller fills status; until it has, the spec's limits stand and nothing
		// counts as used yet.
		hards := q.Status.Hard
		if len(hards) == 0 {
			hards = q.Spec.Hard
		}
		names := make([]corev1.ResourceName, 0, len(hards))
		for name := range hards {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			res := strings.TrimPrefix(string(name), "requests.")
			need, ok := waiting[corev1.ResourceName(res)]
			if !ok {
				continue
			}
			hard, used := hards[name], q.Status.Used[name]
			total := used.DeepCopy()
			total.Add(need)
			out = append(out, QuotaUse{Quota: q.Name, Resource: string(name), Used: used.String(), Hard: hard.String(), Short: total.Cmp(hard) > 0})
		}
	}
	return out
}

func summarize(ex Explanation, counts map[string]int, members int, waiting corev1.ResourceList) []string {
	var out []string
	switch ex.Phase {
	case string(berthv1alpha1.PodGroupRunning), string(berthv1alpha1.PodGroupSucceeded):
		out = append(out, fmt.Sprintf("the gang is %s: nothing to wait for", strings.ToLower(ex.Phase)))
	case string(berthv1alpha1.PodGroupFailed):
		out = append(out, "the gang failed: "+ex.Message)
	}
	if members < int(ex.MinMember) {
		out = append(out, fmt.Sprintf("waiting for members: %d of minMember %d exist (the workload has not created the rest, or they carry another gang's label)", members, ex.MinMember))
	}
	if n := counts[StateHeld]; n > 0 {
		out = append(out, fmt.Sprintf("%d member(s) are held by another scheduler's gate (a queue such as Kueue admits them first); berth's wait does not start until they are released", n))
	}
	if ex.Reason != "" && ex.Reason != berthv1alpha1.ReasonAdmitted && ex.Phase != string(berthv1alpha1.PodGroupRunning) {
		out = append(out, fmt.Sprintf("%s: %s", ex.Reason, ex.Message))
	}
	if c := ex.Capacity; c != nil && c.Reason != "" && ex.Phase == string(berthv1alpha1.PodGroupProvisioning) {
		out = append(out, fmt.Sprintf("capacity from Karpenter (attempt %d, %d seat(s)): %s", c.Attempt, c.Seats, c.Message))
	}
	if c := ex.Capacity; c != nil && c.LastFailure != "" && ex.Phase != string(berthv1alpha1.PodGroupRunning) {
		out = append(out, "the last capacity request failed: "+c.LastFailure)
	}
	if np := ex.NodePool; np != nil && np.Limit != "" {
		limit, used := resource.MustParse(np.Limit), resource.MustParse(orZero(np.Used))
		need := waiting[gpu]
		total := used.DeepCopy()
		total.Add(need)
		if need.Sign() > 0 && total.Cmp(limit) > 0 {
			out = append(out, fmt.Sprintf("NodePool %s: %s of its %s GPU limit are in use; the %s GPUs still waiting would pass it, so Karpenter cannot launch them (raise spec.limits or use another pool)", np.Name, orZero(np.Used), np.Limit, need.String()))
		}
	}
	for _, q := range ex.Quotas {
		if q.Short {
			out = append(out, fmt.Sprintf("ResourceQuota %s: %s used of %s for %s; the waiting members would pass it, so the API server refuses them or their replacements", q.Quota, q.Used, q.Hard, q.Resource))
		}
	}
	dra := 0
	for _, m := range ex.Members {
		if len(m.Devices) > 0 && (m.State == StateGated || m.State == StatePending || m.State == StatePinned) {
			dra++
		}
	}
	if dra > 0 {
		out = append(out, fmt.Sprintf("%d waiting member(s) claim devices through DRA: berth admits them only where kube-scheduler's allocator can allocate their claims; their seats carry copies of their claim templates, and members that name a shared claim get no seats (docs/dra.md)", dra))
	}
	for _, m := range ex.Members {
		if m.State == StatePinned && m.Detail != "" {
			out = append(out, fmt.Sprintf("member %s was released onto %s but kube-scheduler does not bind it: %s", m.Name, m.Node, m.Detail))
		}
	}
	if len(out) == 0 {
		out = append(out, "nothing found holding the gang")
	}
	return out
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}
