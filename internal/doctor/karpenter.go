package doctor

import (
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Karpenter settings check names.
const (
	CheckKarpenterIgnoresDRA = "karpenter-ignores-dra"
	CheckKarpenterNodeRepair = "karpenter-node-repair-off"
)

// Kinds the Karpenter checks read (Snapshot.Unread's keys).
const (
	KindKarpenter     = "Deployment (Karpenter)"
	KindNode          = "Node"
	KindResourceClaim = "ResourceClaim"
)

// karpenterSetting is a Karpenter option as its controller container sets it: the flag
// (--name=value) wins over the environment variable, as in Karpenter's options; def when
// neither is set.
func karpenterSetting(c corev1.Container, flag, env, def string) string {
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
			return v
		}
	}
	for _, e := range c.Env {
		if e.Name == env && e.ValueFrom == nil {
			return e.Value
		}
	}
	return def
}

// karpenterController is the Deployment's Karpenter controller container, if any.
func karpenterController(d appsv1.Deployment) (corev1.Container, bool) {
	for _, c := range d.Spec.Template.Spec.Containers {
		if strings.Contains(c.Image, "karpenter") || c.Name == "controller" {
			return c, true
		}
	}
	return corev1.Container{}, false
}

// featureGate reports whether gate is on in a --feature-gates value (off when not listed:
// Karpenter's alpha gates default off).
func featureGate(gates, gate string) bool {
	for _, kv := range strings.Split(gates, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		if k == gate {
			on, err := strconv.ParseBool(v)
			return err == nil && on
		}
	}
	return false
}

// karpenterIgnoresDRA finds a Karpenter that ignores DRA requests (IGNORE_DRA_REQUESTS, true by
// default in v1.15) in a cluster whose pods ask for devices through ResourceClaims: Karpenter
// simulates those pods without their devices, so it launches nodes the claims cannot be
// allocated on, or none.
func karpenterIgnoresDRA(s Snapshot) []Finding {
	if len(s.ResourceClaims) == 0 {
		return nil
	}
	var out []Finding
	for _, d := range s.Karpenter {
		c, ok := karpenterController(d)
		if !ok {
			continue
		}
		v := karpenterSetting(c, "ignore-dra-requests", "IGNORE_DRA_REQUESTS", "true")
		if on, err := strconv.ParseBool(v); err == nil && !on {
			continue
		}
		out = append(out, Finding{Check: CheckKarpenterIgnoresDRA, Object: obj("Deployment", d.Namespace, d.Name),
			Problem: fmt.Sprintf("Karpenter ignores DRA requests (IGNORE_DRA_REQUESTS=%s) while %d ResourceClaim(s) or template(s) ask for devices (%s): Karpenter provisions those pods as if they asked for no device, so their nodes may have none", v, len(s.ResourceClaims), firstFew(s.ResourceClaims)),
			Fix:     "set IGNORE_DRA_REQUESTS=false on Karpenter (settings.ignoreDRARequests in its chart) where your Karpenter supports DRA, or request GPUs as nvidia.com/gpu"})
	}
	return out
}

// karpenterNodeRepairOff finds a Karpenter without NodeRepair in a cluster where berth's agent
// reports GPU faults: the agent turns AcceleratedHardwareReady False, admission stops placing
// gangs there, but nothing replaces the node, so its GPUs stay lost until someone drains it.
func karpenterNodeRepairOff(s Snapshot) []Finding {
	agentNodes := 0
	for _, n := range s.Nodes {
		for _, c := range n.Status.Conditions {
			if c.Type == berthv1alpha1.NodeConditionGPUDegraded {
				agentNodes++
				break
			}
		}
	}
	if agentNodes == 0 {
		return nil
	}
	var out []Finding
	for _, d := range s.Karpenter {
		c, ok := karpenterController(d)
		if !ok || featureGate(karpenterSetting(c, "feature-gates", "FEATURE_GATES", ""), "NodeRepair") {
			continue
		}
		out = append(out, Finding{Check: CheckKarpenterNodeRepair, Object: obj("Deployment", d.Namespace, d.Name),
			Problem: fmt.Sprintf("Karpenter's NodeRepair feature gate is off while berth's agent watches the GPUs of %d node(s): a node whose GPU fails is marked AcceleratedHardwareReady=False and taken out of gang placement, but never replaced", agentNodes),
			Fix:     "enable it: FEATURE_GATES NodeRepair=true (settings.featureGates.nodeRepair in Karpenter's chart); docs/agent.md has the repair timeline"})
	}
	return out
}

// firstFew names up to three objects, and how many more.
func firstFew(names []string) string {
	if len(names) <= 3 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:3], ", "), len(names)-3)
}
