// Package kubecmd holds berth's client commands — doctor, why, nodepools, version — with
// kubectl's connection flags and output formats. They build for every platform kubectl runs on
// (no cgo, no Unix-only process control), so the same commands ship as the kubectl-berth plugin
// (cmd/kubectl-berth) and inside the berth binary.
package kubecmd
