//go:build tools

// Package tools pins the binaries berth's test rig builds from the Go module proxy.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
	_ "sigs.k8s.io/karpenter/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
