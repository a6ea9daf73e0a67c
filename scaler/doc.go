// Package scaler sizes vLLM Deployments from what their replicas report: requests waiting in
// the queue (vllm:num_requests_waiting), KV-cache usage (vllm:kv_cache_usage_perc) and,
// optionally, time to first token. It holds the pure parts of berth's KEDA external scaler:
// trigger metadata parsing (Trigger), the replica policy (Decide) and the signal types every
// source produces (Sample, Observation). The gRPC server lives in scaler/server, the sources
// in scaler/pods (scrape each replica) and scaler/promsource (instant queries to Prometheus).
//
// See docs/scaler.md for the math and how it composes with KEDA and the HPA.
package scaler
