// Package vllmsim emulates vLLM inference servers for tests and demos.
//
// A Replica is one emulated vLLM server: a deterministic queueing model (a FIFO waiting queue,
// at most MaxNumSeqs running sequences, admission gated by free KV-cache blocks) advanced by the
// caller's clock, exposed over HTTP with vLLM's real Prometheus metric names, help strings,
// types and labels, plus /health and /v1/models. A LoadGenerator produces a fluid stream of
// arrivals at a rate that can be changed while it runs and spreads them round-robin over the
// replicas, like a load balancer. A Fleet serves many replicas on their own listen addresses
// (for example the loopback IPs that a test cluster gives its fake pods), steps them on a
// ticker and offers a small admin endpoint to read and change the arrival rate.
//
// Nothing in the model reads the wall clock: every method that moves time takes it as an
// argument, and the Fleet's ticker comes from an injectable clock.
package vllmsim
