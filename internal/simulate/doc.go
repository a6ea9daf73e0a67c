// Package simulate is berth's economics instrument: an offline, discrete-event replay of
// request and training-job traces through berth's own decision code — the scaler's replica
// policy (scaler.Policy.Decide), gang placement (scheduling.Place, ComputeShortfall) and whole
// provisioning of a gang's capacity — next to the setups berth's users run today: an HPA on
// the GPU duty cycle, a KEDA prometheus trigger on vllm:num_requests_waiting, KubeAI-style
// concurrency, plain kube-scheduler with Karpenter, gangs without whole provisioning, and
// Karpenter's WhenEmptyOrUnderutilized consolidation without berth's guard.
//
// Replicas run vllmsim's token-level vLLM engine model (the emulator the rig serves), nodes
// take the launch time of their GPU family and replicas their model load, and cost comes from
// the gpu catalogue's prices. Everything runs on a simulated clock: no I/O but the traces the
// caller reads, so a day of traffic replays in seconds and the same inputs give the same
// report. docs/economics.md describes the model, its parameters and the headline results.
package simulate
