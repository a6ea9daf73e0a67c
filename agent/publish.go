package agent

import (
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
// apply makes the agent the owner of exactly its condition and labels: it never removes or
// rewrites a condition or label another component owns.
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

// Publish applies the condition, and the GPU labels unless GFD labelled the node. The
// condition's lastTransitionTime only moves when its status changes.
func (p *Publisher) Publish(ctx context.Context, status corev1.ConditionStatus, reason, message string, labels map[string]string) error {
	var node corev1.Node
	if err := p.Client.Get(ctx, client.ObjectKey{Name: p.NodeName}, &node); err != nil {
		return fmt.Errorf("reading node %s: %w", p.NodeName, err)
	}
	now := metav1.NewTime(p.Now())
	transition := now
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeConditionType(berthv1alpha1.NodeConditionAcceleratedHardwareReady) && c.Status == status {
			transition = c.LastTransitionTime
		}
	}
	cond := corev1ac.NodeCondition().WithType(corev1.NodeConditionType(berthv1alpha1.NodeConditionAcceleratedHardwareReady)).WithStatus(status).WithReason(reason).
		WithMessage(truncate(message, 1024)).WithLastHeartbeatTime(now).WithLastTransitionTime(transition)
	statusApply := corev1ac.Node(p.NodeName).WithStatus(corev1ac.NodeStatus().WithConditions(cond))
	if err := p.Client.Status().Apply(ctx, statusApply, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s condition to node %s: %w", corev1.NodeConditionType(berthv1alpha1.NodeConditionAcceleratedHardwareReady), p.NodeName, err)
	}
	if _, gfd := node.Labels[berthv1alpha1.GFDProductLabel]; gfd {
		labels = nil // GFD's labels are authoritative; an apply without labels drops ours.
	}
	labelApply := corev1ac.Node(p.NodeName).WithLabels(labels)
	if err := p.Client.Apply(ctx, labelApply, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying GPU labels to node %s: %w", p.NodeName, err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
