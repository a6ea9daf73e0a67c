package scheduling

// Why a gang does not fit, in words like kube-scheduler's.

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// explain says why the best attempt failed, naming the resource that ran short where one did.
func (s *Snapshot) explain(g Gang, classes []*class, best *attempt, nDomains int) string {
	c := best.failed
	total := len(g.Members)
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d members fit", best.placed, total)
	if g.TopologyKey != "" {
		fmt.Fprintf(&b, " in the best %s (%s, of %d)", g.TopologyKey, best.domain, nDomains)
	}
	if c == nil {
		return b.String()
	}
	inDomain := func(n *NodeState) bool { return best.domain == "" || n.Node.Labels[g.TopologyKey] == best.domain }
	eligible := 0
	for _, n := range c.cands() {
		if inDomain(n) {
			eligible++
		}
	}
	if eligible == 0 {
		fmt.Fprintf(&b, ": no node can take member %s (%d nodes: %s)", c.rep.Name, len(s.nodes), c.rejects().String())
		return b.String()
	}
	// Needs (of the whole gang) vs. free per resource over the class's eligible nodes, before
	// this gang.
	for _, t := range c.terms {
		name := s.ri.names[t.slot]
		var need int64
		for _, other := range classes {
			need += int64(len(other.members)) * at(other.req, t.slot)
		}
		var free, largest int64
		for _, n := range c.cands() {
			if !inDomain(n) {
				continue
			}
			f := at(n.alloc, t.slot) - at(n.used, t.slot)
			free += max(0, f)
			largest = max(largest, f)
		}
		if free < need {
			scope := "eligible nodes have"
			if g.TopologyKey != "" {
				scope = fmt.Sprintf("the best %s has", g.TopologyKey)
			}
			where := ""
			if g.TopologyKey != "" {
				where = " in one " + g.TopologyKey
			}
			fmt.Fprintf(&b, "; needs %s %s for %d members%s, %s %s free",
				fmtQty(name, need), name, total, where, scope, fmtQty(name, free))
			return b.String() + rejectSuffix(c)
		}
		if largest < t.amt {
			fmt.Fprintf(&b, "; each member needs %s %s on one node, the largest free on an eligible node is %s",
				fmtQty(name, t.amt), name, fmtQty(name, largest))
			return b.String() + rejectSuffix(c)
		}
	}
	switch {
	case c.dra && best.draErr != nil:
		fmt.Fprintf(&b, "; member %s's resource claims cannot be allocated: %v", c.rep.Name, best.draErr)
	case c.dra && !hasInterPodRules(c.rep) && len(hostPorts(c.rep)) == 0:
		fmt.Fprintf(&b, "; no eligible node has the devices member %s's resource claims ask for free", c.rep.Name)
		if c.shares {
			b.WriteString(" (berth orders no nodes for members that name claims other pods may share: they must exist first)")
		}
	case c.slow && hasInterPodRules(c.rep) && len(hostPorts(c.rep)) > 0:
		b.WriteString("; the members' host ports, pod affinity, anti-affinity or topology spread rules cannot all be met")
	case c.slow && len(hostPorts(c.rep)) > 0:
		fmt.Fprintf(&b, "; the members' host ports (%s) are taken on every node that has room", strings.TrimSuffix(portsKey(c.rep), ";"))
	case c.slow:
		b.WriteString("; the members' pod affinity, anti-affinity or topology spread rules cannot all be met")
	default:
		b.WriteString("; free capacity is split across nodes so no node holds a whole member")
	}
	return b.String() + rejectSuffix(c)
}

func rejectSuffix(c *class) string {
	if len(c.rejects()) == 0 {
		return ""
	}
	return " (other nodes excluded: " + c.rejects().String() + ")"
}

// fmtQty prints a milli-unit amount in the resource's usual unit.
func fmtQty(name corev1.ResourceName, milli int64) string {
	switch name {
	case corev1.ResourceCPU:
		if milli%1000 == 0 {
			return fmt.Sprintf("%d", milli/1000)
		}
		return fmt.Sprintf("%dm", milli)
	case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return fmt.Sprintf("%.1fGi", float64(milli)/1000/(1<<30))
	default:
		return fmt.Sprintf("%d", milli/1000)
	}
}
