// Package pods is the scaler's "pods" source: it scrapes each ready replica's metrics endpoint
// directly, in parallel, with a per-scrape timeout, and keeps each replica's last sample so
// that one KEDA poll (GetMetrics + IsActive) and several ScaledObjects on the same pods cost
// one scrape, and a replica whose scrape fails is still counted up to a staleness bound.
package pods
