package scheduling

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Host ports, as kube-scheduler's NodePorts filter counts them: a pod may not go on a node where
// another pod uses the same protocol and host port on an overlapping host IP (0.0.0.0, the
// default, overlaps every IP). A hostNetwork pod's container ports are host ports (the API sets
// hostPort to containerPort).

// hostPort is one host port a pod uses.
type hostPort struct {
	ip       string
	protocol corev1.Protocol
	port     int32
}

// wildcardIP is the host IP a port without one binds.
const wildcardIP = "0.0.0.0"

// conflicts reports whether two host ports cannot be on one node.
func (a hostPort) conflicts(b hostPort) bool {
	return a.port == b.port && a.protocol == b.protocol && (a.ip == b.ip || a.ip == wildcardIP || b.ip == wildcardIP)
}

// hostPorts are the host ports p uses: its containers' and its restartable init containers'
// (sidecars run beside the containers); plain init containers have exited by then.
func hostPorts(p *corev1.Pod) []hostPort {
	var out []hostPort
	add := func(c *corev1.Container) {
		for _, cp := range c.Ports {
			if cp.HostPort <= 0 {
				continue
			}
			hp := hostPort{ip: cp.HostIP, protocol: cp.Protocol, port: cp.HostPort}
			if hp.ip == "" || hp.ip == "::" {
				hp.ip = wildcardIP
			}
			if hp.protocol == "" {
				hp.protocol = corev1.ProtocolTCP
			}
			out = append(out, hp)
		}
	}
	for i := range p.Spec.InitContainers {
		if c := &p.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for i := range p.Spec.Containers {
		add(&p.Spec.Containers[i])
	}
	return out
}

// portsOK reports whether none of p's host ports conflicts with a port of a pod on n (bound,
// promised, or placed earlier in this attempt).
func portsOK(p *corev1.Pod, n *NodeState, v *podView) bool {
	want := hostPorts(p)
	if len(want) == 0 {
		return true
	}
	for _, q := range v.pods(n) {
		if q.Status.Phase == corev1.PodSucceeded || q.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, used := range hostPorts(q) {
			for _, w := range want {
				if w.conflicts(used) {
					return false
				}
			}
		}
	}
	return true
}

// portsKey is a member's host ports for its class key: members with different ports are told
// apart.
func portsKey(p *corev1.Pod) string {
	var b strings.Builder
	for _, hp := range hostPorts(p) {
		fmt.Fprintf(&b, "%s/%s/%d;", hp.ip, hp.protocol, hp.port)
	}
	return b.String()
}
