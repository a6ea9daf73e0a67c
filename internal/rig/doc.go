// Package rig runs a real Kubernetes control plane and Karpenter on loopback for berth's tests
// and for `berth dev up`: etcd and kube-apiserver, and on demand kube-scheduler,
// kube-controller-manager, kwok (fake kubelets with Stage configs) and Karpenter's kwok cloud
// provider with GPU instance types.
//
// Every component is a real binary built by hack/build-tools.sh from the Go module proxy. Each
// runs in its own process group, is killed if the process that started it dies, writes its
// log to <WorkDir>/logs/<component>.log, and is stopped by Rig.Stop (also on SIGINT/SIGTERM).
package rig
