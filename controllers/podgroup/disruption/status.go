package disruption

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Causes of a disruption: the reason label of berth_podgroup_disruptions_total.
const (
	// CauseNodeGone: the node was deleted while members were bound to it.
	CauseNodeGone = "node_gone"
	// CauseNodeDeleting: the node has a deletionTimestamp.
	CauseNodeDeleting = "node_deleting"
	// CauseNodeClaimDeleting: the node's Karpenter NodeClaim has a deletionTimestamp.
	CauseNodeClaimDeleting = "nodeclaim_deleting"
	// CauseDisruptedTaint: Karpenter tainted the node karpenter.sh/disrupted.
	CauseDisruptedTaint = "disrupted_taint"
	// CauseDisruptionTarget: a member on the node has condition DisruptionTarget=True (eviction,
	// preemption, kubelet termination).
	CauseDisruptionTarget = "disruption_target"
)

// Causes are every cause, in the order the metric's help lists them.
var Causes = []string{CauseNodeGone, CauseNodeDeleting, CauseNodeClaimDeleting, CauseDisruptedTaint, CauseDisruptionTarget}

// messagePrefix starts the Disrupted condition's message, which lists every node reported so
// far as "<node> (<why>)", separated by entrySeparator; the list is how the controller knows,
// across restarts, which nodes it already reported.
const (
	messagePrefix  = "nodes backing the gang were disrupted: "
	entrySeparator = "; "
	// maxMessage keeps the message under the API's 32768-byte limit for condition messages.
	maxMessage = 30000
)

// disruption is one node backing a gang that is being disrupted.
type disruption struct {
	// Node is the node's name.
	Node string
	// Cause is one of the Cause* constants.
	Cause string
	// Why says what was seen, for the condition message and the Event.
	Why string
	// NodePool is the Karpenter NodePool the node (or its NodeClaim) belongs to ("" when it
	// is not Karpenter's, or gone without a NodeClaim): the metric's route to a pool's owner.
	NodePool string
}

// nodeState is what the I/O layer read about one node backing a gang.
type nodeState struct {
	// Name is the node's name.
	Name string
	// Node is the node; nil when it does not exist.
	Node *corev1.Node
	// Claim is the node's NodeClaim; nil when there is none (or Karpenter is not installed).
	Claim *karpv1.NodeClaim
}

// watched reports whether the controller looks after a gang in this phase: once it holds
// nodes, until it finishes.
func watched(phase berthv1alpha1.PodGroupPhase) bool {
	return phase == berthv1alpha1.PodGroupAdmitted || phase == berthv1alpha1.PodGroupRunning
}

// bound reports whether a member is on a node and has not finished.
func bound(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// backingNodes are the nodes a gang stands on, sorted: those of its bound members and, while it
// is Admitted (members pinned but maybe not bound yet), those admission placed it on.
func backingNodes(pg *berthv1alpha1.PodGroup, members []corev1.Pod) []string {
	set := map[string]bool{}
	for i := range members {
		if bound(&members[i]) {
			set[members[i].Spec.NodeName] = true
		}
	}
	if pg.Status.Phase == berthv1alpha1.PodGroupAdmitted {
		for _, n := range pg.Status.Nodes {
			set[n] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// berthsOwn reports whether a DisruptionTarget reason is berth's own: a member berth deletes to
// restart its gang or to replace it is no disruption of its node (admission reports those with
// its own Events).
func berthsOwn(reason string) bool {
	return reason == berthv1alpha1.DisruptionReasonGangRestart || reason == berthv1alpha1.DisruptionReasonMemberStranded
}

// findDisruptions lists the backing nodes being disrupted, one cause each (the first that
// applies of: gone, node deleting, NodeClaim deleting, disrupted taint, a member that is a
// disruption target), sorted by node.
func findDisruptions(members []corev1.Pod, nodes []nodeState) []disruption {
	targets := map[string]string{}
	for i := range members {
		p := &members[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && !berthsOwn(c.Reason) {
				if _, seen := targets[p.Spec.NodeName]; !seen {
					targets[p.Spec.NodeName] = fmt.Sprintf("member %s is a disruption target (%s)", p.Name, c.Reason)
				}
			}
		}
	}
	var out []disruption
	for _, s := range nodes {
		d := disruption{Node: s.Name}
		switch {
		case s.Node == nil:
			d.Cause, d.Why = CauseNodeGone, "node deleted while members were bound to it"
		case s.Node.DeletionTimestamp != nil:
			d.Cause, d.Why = CauseNodeDeleting, "node is being deleted"
		case s.Claim != nil && s.Claim.DeletionTimestamp != nil:
			d.Cause, d.Why = CauseNodeClaimDeleting, fmt.Sprintf("NodeClaim %s is being deleted", s.Claim.Name)
		case hasDisruptedTaint(s.Node):
			d.Cause, d.Why = CauseDisruptedTaint, "Karpenter tainted it "+karpv1.DisruptedTaintKey
		case targets[s.Name] != "":
			d.Cause, d.Why = CauseDisruptionTarget, targets[s.Name]
		default:
			continue
		}
		d.NodePool = nodePoolOf(s)
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// nodePoolOf is the NodePool of a node, from its label or else its NodeClaim's.
func nodePoolOf(s nodeState) string {
	if s.Node != nil && s.Node.Labels[karpv1.NodePoolLabelKey] != "" {
		return s.Node.Labels[karpv1.NodePoolLabelKey]
	}
	if s.Claim != nil {
		return s.Claim.Labels[karpv1.NodePoolLabelKey]
	}
	return ""
}

func hasDisruptedTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == karpv1.DisruptedTaintKey {
			return true
		}
	}
	return false
}

// reportedNodes are the nodes the Disrupted condition already names, each with its entry.
func reportedNodes(cond *metav1.Condition) map[string]string {
	out := map[string]string{}
	if cond == nil || cond.Status != metav1.ConditionTrue || !strings.HasPrefix(cond.Message, messagePrefix) {
		return out
	}
	for _, e := range strings.Split(strings.TrimPrefix(cond.Message, messagePrefix), entrySeparator) {
		if name, _, ok := strings.Cut(e, " ("); ok && name != "" {
			out[name] = e
		}
	}
	return out
}

// disruptedCondition is the Disrupted condition a gang should have given the disruptions found
// now, and the disruptions it did not report before (nil when there are none: the condition
// stays as it is). Reported nodes stay in the message, so the condition records every node the
// gang lost; it changes nothing in pg.
func disruptedCondition(pg *berthv1alpha1.PodGroup, found []disruption, now metav1.Time) (metav1.Condition, []disruption) {
	current := meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionDisrupted)
	reported := reportedNodes(current)
	var fresh []disruption
	for _, d := range found {
		if _, ok := reported[d.Node]; !ok {
			fresh = append(fresh, d)
			reported[d.Node] = fmt.Sprintf("%s (%s)", d.Node, strings.ReplaceAll(d.Why, entrySeparator, ", "))
		}
	}
	if len(fresh) == 0 {
		if current != nil {
			return *current, nil
		}
		return metav1.Condition{}, nil
	}
	names := make([]string, 0, len(reported))
	for n := range reported {
		names = append(names, n)
	}
	sort.Strings(names)
	entries := make([]string, len(names))
	for i, n := range names {
		entries[i] = reported[n]
	}
	msg := messagePrefix + strings.Join(entries, entrySeparator)
	if len(msg) > maxMessage {
		// Very large gangs: keep every node, with only a word of why.
		for i, n := range names {
			entries[i] = n + " (…)"
		}
		msg = messagePrefix + strings.Join(entries, entrySeparator)
	}
	cond := metav1.Condition{
		Type: berthv1alpha1.ConditionDisrupted, Status: metav1.ConditionTrue, Reason: berthv1alpha1.ReasonNodeDisrupted,
		Message: msg, ObservedGeneration: pg.Generation,
		LastTransitionTime: now,
	}
	if current != nil && current.Status == metav1.ConditionTrue {
		cond.LastTransitionTime = current.LastTransitionTime
	}
	return cond, fresh
}
