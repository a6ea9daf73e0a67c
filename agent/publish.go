package agent

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// FieldManager is the server-side-apply manager of everything the agent writes. Server-side
// apply makes the agent the owner of exactly its conditions, labels and annotation: it never
// removes or rewrites what another component owns.
const FieldManager = "berth-agent"

// Publisher writes the agent's view to its Node.
type Publisher struct {
	Client   client.Client
	NodeName string
	Now      func() time.Time
}

// Labels are the GPU labels for an inventory ("" values are omitted).
func Labels(inv Inventory) map[string]string {
	if len(inv.GPUs) == 0 {
		return nil
	}
	return map[string]string{
		berthv1alpha1.GPUProductLabel: labelValue(inv.GPUs[0].Name),
		berthv1alpha1.GPUCountLabel:   strconv.Itoa(len(inv.GPUs)),
		berthv1alpha1.GPUMemoryLabel:  strconv.FormatUint(inv.GPUs[0].MemoryMiB, 10),
	}
}

// labelValue makes a product name a valid label value ("NVIDIA H100 80GB HBM3" →
// "NVIDIA-H100-80GB-HBM3").
func labelValue(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-_.")
	if len(out) > 63 {
		out = strings.Trim(out[:63], "-_.")
	}
	return out
}

// Node reads the agent's node.
func (p *Publisher) Node(ctx context.Context) (*corev1.Node, error) {
	var node corev1.Node
	if err := p.Client.Get(ctx, client.ObjectKey{Name: p.NodeName}, &node); err != nil {
		return nil, fmt.Errorf("reading node %s: %w", p.NodeName, err)
	}
	return &node, nil
}

// Report is one publication: GPUDegraded always, AcceleratedHardwareReady when Hardware is
// set, the GPU labels, and whether the verdict holds a fatal fault (latched across agent
// restarts on this boot through berthv1alpha1.FatalBootAnnotation).
type Report struct {
	Hardware *Condition
	Degraded Condition
	Labels   map[string]string
	Fatal    bool
}

// Publish applies the report to node (as read this probe) and says who writes
// AcceleratedHardwareReady: "" when berth does, else the other field manager, in which case
// berth leaves that condition alone. lastTransitionTime moves only when a status changes.
func (p *Publisher) Publish(ctx context.Context, node *corev1.Node, rep Report) (string, error) {
	now := metav1.NewTime(p.Now())
	owner := OtherWriter(node, ConditionType)
	conds := []*corev1ac.NodeConditionApplyConfiguration{p.condition(node, DegradedConditionType, rep.Degraded, now)}
	if rep.Hardware != nil && owner == "" {
		conds = append(conds, p.condition(node, ConditionType, *rep.Hardware, now))
	}
	statusApply := corev1ac.Node(p.NodeName).WithStatus(corev1ac.NodeStatus().WithConditions(conds...))
	// No forced ownership: should another manager start writing one of these conditions
	// between the read and this write, the write fails instead of taking it over.
	if err := p.Client.Status().Apply(ctx, statusApply, client.FieldOwner(FieldManager)); err != nil {
		return owner, fmt.Errorf("applying GPU conditions to node %s: %w", p.NodeName, err)
	}
	labels := rep.Labels
	if _, gfd := node.Labels[berthv1alpha1.GFDProductLabel]; gfd {
		labels = nil // GFD's labels are authoritative; an apply without labels drops ours.
	}
	metaApply := corev1ac.Node(p.NodeName).WithLabels(labels)
	if rep.Fatal && node.Status.NodeInfo.BootID != "" {
		metaApply.WithAnnotations(map[string]string{berthv1alpha1.FatalBootAnnotation: node.Status.NodeInfo.BootID})
	}
	if err := p.Client.Apply(ctx, metaApply, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return owner, fmt.Errorf("applying GPU labels to node %s: %w", p.NodeName, err)
	}
	return owner, nil
}

// condition is the apply configuration of one condition, keeping its lastTransitionTime while
// its status is unchanged.
func (p *Publisher) condition(node *corev1.Node, typ corev1.NodeConditionType, c Condition, now metav1.Time) *corev1ac.NodeConditionApplyConfiguration {
	transition := now
	for _, have := range node.Status.Conditions {
		if have.Type == typ && have.Status == c.Status {
			transition = have.LastTransitionTime
		}
	}
	return corev1ac.NodeCondition().WithType(typ).WithStatus(c.Status).WithReason(c.Reason).
		WithMessage(truncate(c.Message, 1024)).WithLastHeartbeatTime(now).WithLastTransitionTime(transition)
}

// OtherWriter names a field manager other than the agent that writes the node condition typ
// (the EKS node monitoring agent writes AcceleratedHardwareReady), or "" when none does.
func OtherWriter(node *corev1.Node, typ corev1.NodeConditionType) string {
	key := []byte(`"k:{\"type\":\"` + string(typ) + `\"}"`)
	for _, mf := range node.ManagedFields {
		if mf.Manager == FieldManager || mf.FieldsV1 == nil || mf.Subresource != "status" && mf.Subresource != "" {
			continue
		}
		if bytes.Contains(mf.FieldsV1.GetRawBytes(), key) {
			return mf.Manager
		}
	}
	return ""
}

// RestoredFatal is the AcceleratedHardwareReady=False a previous agent wrote during this boot of
// the node (berthv1alpha1.FatalBootAnnotation matches the boot ID), as a latched fault, so a
// restarted agent keeps the node marked; nil when there is none.
func RestoredFatal(node *corev1.Node) *Fault {
	boot := node.Status.NodeInfo.BootID
	if boot == "" || node.Annotations[berthv1alpha1.FatalBootAnnotation] != boot {
		return nil
	}
	for _, c := range node.Status.Conditions {
		if c.Type != ConditionType || c.Status != corev1.ConditionFalse {
			continue
		}
		f := Fault{GPU: -1, Kind: "restored", Detail: "seen before the agent restarted: " + c.Message, Fatal: true}
		var xid uint64
		if _, err := fmt.Sscanf(c.Reason, berthv1alpha1.ReasonNvidiaXIDErrorFormat, &xid); err == nil {
			f.XID = xid
		}
		return &f
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
