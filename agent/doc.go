// Package agent is berth's node GPU agent: it reads GPU inventory and health through NVML
// (github.com/NVIDIA/go-nvml) and publishes them where Kubernetes acts on them — the node
// condition AcceleratedHardwareReady (which Karpenter's node-repair policies and berth's gang
// admission read), GPU labels where NVIDIA's GPU feature discovery has not set any, and
// berth_agent_* Prometheus metrics.
//
// The package is split by concern: nvml.go reads the hardware, health.go turns readings into
// faults, condition.go decides the condition with hysteresis (pure), publish.go writes the node
// with server-side apply so the agent owns only its own condition and labels.
package agent
