#!/usr/bin/env bash
# Builds what berth's local rig runs (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager, kwok, Karpenter's kwok provider (and, for the rig's DRA mode, that
# provider with the GPU instance types' devices: hack/tools/dra), the KEDA operator and metrics
# adapter, the JobSet controller, the LeaderWorkerSet controller, the Kueue controller manager, the Prometheus Operator,
# Prometheus), controller-gen and golangci-lint, and what `make release-dry-run` runs (cosign,
# crane, helm), from the Go module proxy at the versions pinned in hack/tools/go.mod and
# hack/tools/{keda,jobset,lws,kueue,monitoring,prometheus,release,dra,lint}/go.mod, plus
# the assets the rig needs from those modules (Karpenter's, KEDA's, JobSet's, Kueue's and the Prometheus
# Operator's CRDs, Kueue's webhook manifests, the ProvisioningRequest CRD of the Cluster
# Autoscaler API module Kueue pins, kwok's Stage configs).
#
# Everything lands in a cache folder outside the repository keyed by the tools module's
# content ($BERTH_TOOLS_CACHE, default ~/.cache/berth/tools/<key>), so a second run is instant.
# KEDA, the JobSet controller, Kueue, the Prometheus Operator, Prometheus, the release tools,
# the DRA mode's Karpenter, and golangci-lint are modules of their own with
# their own keys (folders keda-<key>, jobset-<key>, lws-<key>, kueue-<key>, monitoring-<key>,
# prometheus-<key>, release-<key>, dra-<key>, lint-<key>, linked into the main folder),
# so moving one never rebuilds the others.
#
# Usage: hack/build-tools.sh [binary...]   Builds what is missing; prints the cache folder on
#                                          stdout, progress on stderr.
#        hack/build-tools.sh --demo        What `make demo` runs first: the binaries the dev
#                                          cluster needs to come up (no golangci-lint, JobSet,
#                                          Kueue, KEDA, Prometheus Operator) and the assets; make demo then builds
#                                          KEDA in the background (the autoscale scene waits).
#        hack/build-tools.sh --dir         Only prints the cache folder (builds nothing).
# Progress says which binary of how many is building and about how long is left, from the
# build times measured on a 2-core machine (typical below).
set -euo pipefail
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
modkey() { cat "$@" | sha256sum | cut -c1-16; }
key=$(modkey "$tools/go.mod" "$tools/go.sum" "$tools/etcd/main.go")
cacheroot="${BERTH_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/berth/tools}"
cache="$cacheroot/$key"
if [ "${1:-}" = "--dir" ]; then
  echo "$cache"
  exit 0
fi
mkdir -p "$cache/bin"
kedakey=$(modkey "$tools/keda/go.mod" "$tools/keda/go.sum")
kedacache="$cacheroot/keda-$kedakey"
lintcache="$cacheroot/lint-$(modkey "$tools/lint/go.mod" "$tools/lint/go.sum")"
jobsetkey=$(modkey "$tools/jobset/go.mod" "$tools/jobset/go.sum")
jobsetcache="$cacheroot/jobset-$jobsetkey"
lwskey=$(modkey "$tools/lws/go.mod" "$tools/lws/go.sum")
lwscache="$cacheroot/lws-$lwskey"
kueuekey=$(modkey "$tools/kueue/go.mod" "$tools/kueue/go.sum")
kueuecache="$cacheroot/kueue-$kueuekey"
monkey=$(modkey "$tools/monitoring/go.mod" "$tools/monitoring/go.sum")
moncache="$cacheroot/monitoring-$monkey"
promcache="$cacheroot/prometheus-$(modkey "$tools/prometheus/go.mod" "$tools/prometheus/go.sum")"
relcache="$cacheroot/release-$(modkey "$tools/release/go.mod" "$tools/release/go.sum")"
drakey=$(modkey "$tools/dra/go.mod" "$tools/dra/go.sum" "$tools/dra/karpenter-kwok-dra/main.go")
dracache="$cacheroot/dra-$drakey"

k8sver=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$tools/go.mod")
minor=$(echo "$k8sver" | cut -d. -f2)
k8sldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8sver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"

declare -A pkgs=(
  [etcd]=./etcd
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [controller-gen]=sigs.k8s.io/controller-tools/cmd/controller-gen
  [kwok]=sigs.k8s.io/kwok/cmd/kwok
  [karpenter-kwok]=sigs.k8s.io/karpenter/kwok
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [keda-operator]=github.com/kedacore/keda/v2/cmd/operator
  [keda-adapter]=github.com/kedacore/keda/v2/cmd/adapter
  [golangci-lint]=github.com/golangci/golangci-lint/v2/cmd/golangci-lint
  [jobset-controller]=sigs.k8s.io/jobset
  [lws-controller]=sigs.k8s.io/lws/cmd
  [kueue-controller]=sigs.k8s.io/kueue/cmd/kueue
  [prometheus-operator]=github.com/prometheus-operator/prometheus-operator/cmd/operator
  [prometheus]=github.com/prometheus/prometheus/cmd/prometheus
  [cosign]=github.com/sigstore/cosign/v2/cmd/cosign
  [crane]=github.com/google/go-containerregistry/cmd/crane
  [helm]=helm.sh/helm/v3/cmd/helm
  [karpenter-kwok-dra]=github.com/berth-dev/berth/hack/tools/dra/karpenter-kwok-dra
)
order=(etcd kube-apiserver controller-gen golangci-lint kwok karpenter-kwok kube-scheduler kube-controller-manager jobset-controller lws-controller kueue-controller prometheus-operator prometheus cosign crane helm karpenter-kwok-dra keda-operator keda-adapter)
# Seconds each cold build took on 2 cores, for the progress estimate: the demo's set measured on a
# fresh machine with nothing else running (2026-12-05, docs/benchmarks.md), the rest while other
# builds and tests shared the cores (2026-12).
declare -A typical=(
  [etcd]=50 [kube-apiserver]=260 [controller-gen]=10 [golangci-lint]=138 [kwok]=20 [karpenter-kwok]=30
  [kube-scheduler]=50 [kube-controller-manager]=50 [jobset-controller]=171 [lws-controller]=110 [kueue-controller]=374
  [keda-operator]=825 [keda-adapter]=93 [prometheus-operator]=220 [prometheus]=380
  [cosign]=300 [crane]=30 [helm]=90 [karpenter-kwok-dra]=140
)
# Named binaries only (make lint, make generate): build those and stop; the rig's assets below
# come with the whole set. --demo: what the dev
# cluster needs to come up (control plane, kwok, Karpenter, the LeaderWorkerSet controller;
# `berth dev serve` starts KEDA once it is built), then the assets.
only=0
if [ "${1:-}" = "--demo" ]; then
  order=(etcd kube-apiserver kwok karpenter-kwok kube-scheduler kube-controller-manager controller-gen lws-controller)
elif [ $# -gt 0 ]; then
  order=("$@") && only=1
fi
# What is left to build, and about how long it takes.
missing=()
for b in "${order[@]}"; do
  out=$cache/bin
  case ${pkgs[$b]:-} in
    github.com/kedacore/*) out=$kedacache/bin ;;
    github.com/golangci/*) out=$lintcache/bin ;;
    sigs.k8s.io/jobset) out=$jobsetcache/bin ;;
    sigs.k8s.io/lws/*) out=$lwscache/bin ;;
    sigs.k8s.io/kueue/*) out=$kueuecache/bin ;;
    github.com/prometheus-operator/*) out=$moncache/bin ;;
    github.com/prometheus/prometheus/*) out=$promcache/bin ;;
    github.com/sigstore/*|github.com/google/go-containerregistry/*|helm.sh/*) out=$relcache/bin ;;
    github.com/berth-dev/berth/hack/tools/dra/*) out=$dracache/bin ;;
  esac
  [ -x "$out/$b" ] || missing+=("$b")
done
left=0
for b in "${missing[@]}"; do left=$(( left + ${typical[$b]:-120} )); done
built=0

for b in "${order[@]}"; do
  pkg=${pkgs[$b]:-}
  [ -n "$pkg" ] || { echo "build-tools: unknown binary $b (known: ${!pkgs[*]})" >&2; exit 2; }
  dir=$tools out=$cache/bin
  case $pkg in
    github.com/kedacore/*) dir=$tools/keda out=$kedacache/bin ;;
    github.com/golangci/*) dir=$tools/lint out=$lintcache/bin ;;
    sigs.k8s.io/jobset) dir=$tools/jobset out=$jobsetcache/bin ;;
    sigs.k8s.io/lws/*) dir=$tools/lws out=$lwscache/bin ;;
    sigs.k8s.io/kueue/*) dir=$tools/kueue out=$kueuecache/bin ;;
    github.com/prometheus-operator/*) dir=$tools/monitoring out=$moncache/bin ;;
    github.com/prometheus/prometheus/*) dir=$tools/prometheus out=$promcache/bin ;;
    github.com/sigstore/*|github.com/google/go-containerregistry/*|helm.sh/*) dir=$tools/release out=$relcache/bin ;;
    github.com/berth-dev/berth/hack/tools/dra/*) dir=$tools/dra out=$dracache/bin ;;
  esac
  if [ ! -x "$out/$b" ]; then
    mkdir -p "$out"
    built=$(( built + 1 ))
    echo "build-tools: building $b ($built of ${#missing[@]}, typically ~${typical[$b]:-120}s on 2 cores; ~$(( (left + 59) / 60 )) min left) from the Go module proxy into $out; cached afterwards" >&2
    left=$(( left - ${typical[$b]:-120} ))
    start=$(date +%s)
    flags="-s -w"
    case $pkg in
      k8s.io/kubernetes/*) flags=$k8sldflags ;;
      github.com/prometheus/prometheus/*)
        # Prometheus prints (and the operator is told) its version: module v0.3XY.Z is Prometheus 3.XY.Z.
        pv=$(cd "$dir" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus | sed -E 's/^v0\.3([0-9][0-9])\.([0-9]+).*/3.\1.\2/; s/^3\.0([0-9])/3.\1/')
        flags="-s -w -X github.com/prometheus/common/version.Version=$pv" ;;
    esac
    (cd "$dir" && go build -trimpath -ldflags "$flags" -o "$out/$b.tmp" "$pkg")
    mv "$out/$b.tmp" "$out/$b"
    echo "build-tools: $b built in $(( $(date +%s) - start ))s" >&2
  fi
  [ "$out" = "$cache/bin" ] || ln -sfn "$out/$b" "$cache/bin/$b"
done
if [ "$only" = 1 ]; then
  echo "$cache"
  exit 0
fi
cd "$tools"

# Assets from the pinned modules: CRDs and kwok Stage configs (each file starts a YAML document).
if [ ! -f "$cache/assets.done" ]; then
  go mod download sigs.k8s.io/karpenter sigs.k8s.io/kwok
  karp=$(go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)
  kwok=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  rm -rf "$cache/crds" "$cache/kwok-stages"
  mkdir -p "$cache/crds/karpenter" "$cache/kwok-stages"
  cp "$karp"/pkg/apis/crds/*.yaml "$karp"/kwok/apis/crds/*.yaml "$cache/crds/karpenter/"
  for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    cp "$kwok/kustomize/stage/$f" "$cache/kwok-stages/$(basename "$f")"
  done
  chmod -R u+w "$cache/crds" "$cache/kwok-stages"
  touch "$cache/assets.done"
fi
if [ ! -f "$cache/keda-$kedakey.done" ]; then
  keda=$(cd "$tools/keda" && go mod download github.com/kedacore/keda/v2 && go list -m -f '{{.Dir}}' github.com/kedacore/keda/v2)
  rm -rf "$cache/crds/keda" && mkdir -p "$cache/crds/keda"
  cp "$keda"/config/crd/bases/*.yaml "$cache/crds/keda/"
  chmod -R u+w "$cache/crds/keda"
  rm -f "$cache"/keda-*.done && touch "$cache/keda-$kedakey.done"
fi
if [ ! -f "$cache/jobset-$jobsetkey.done" ]; then
  jobset=$(cd "$tools/jobset" && go mod download sigs.k8s.io/jobset && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)
  rm -rf "$cache/crds/jobset" && mkdir -p "$cache/crds/jobset"
  cp "$jobset"/config/components/crd/bases/*.yaml "$cache/crds/jobset/"
  chmod -R u+w "$cache/crds/jobset"
  rm -f "$cache"/jobset-*.done && touch "$cache/jobset-$jobsetkey.done"
fi
# LeaderWorkerSet's CRD and webhook manifests (the rig routes the webhooks to the controller's
# local port: its pod webhook labels each group's pods, which its controller reads).
if [ ! -f "$cache/lws-$lwskey.done" ]; then
  lws=$(cd "$tools/lws" && go mod download sigs.k8s.io/lws && go list -m -f '{{.Dir}}' sigs.k8s.io/lws)
  rm -rf "$cache/crds/lws" "$cache/lws" && mkdir -p "$cache/crds/lws" "$cache/lws"
  cp "$lws"/config/crd/bases/*.yaml "$cache/crds/lws/"
  cp "$lws"/config/webhook/manifests.yaml "$cache/lws/webhooks.yaml"
  chmod -R u+w "$cache/crds/lws" "$cache/lws"
  rm -f "$cache"/lws-*.done && touch "$cache/lws-$lwskey.done"
fi
# Kueue's CRDs and webhook manifests as its kustomize bases leave them (the rig names and routes
# them, as Kueue's config/default does), and the ProvisioningRequest CRD from the Cluster
# Autoscaler API module at the version Kueue pins (what Kueue's provisioning admission check and
# berth's ProvisioningRequest controller serve).
if [ ! -f "$cache/kueue-$kueuekey.done" ]; then
  kueue=$(cd "$tools/kueue" && go mod download sigs.k8s.io/kueue && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  casapis=$(cd "$tools/kueue" && go mod download k8s.io/autoscaler/cluster-autoscaler/apis && go list -m -f '{{.Dir}}' k8s.io/autoscaler/cluster-autoscaler/apis)
  rm -rf "$cache/crds/kueue" "$cache/crds/provisioningrequest" "$cache/kueue"
  mkdir -p "$cache/crds/kueue" "$cache/crds/provisioningrequest" "$cache/kueue"
  cp "$kueue"/config/components/crd/bases/*.yaml "$cache/crds/kueue/"
  cp "$kueue"/config/components/webhook/manifests.yaml "$cache/kueue/webhooks.yaml"
  cp "$casapis"/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml "$cache/crds/provisioningrequest/"
  chmod -R u+w "$cache/crds/kueue" "$cache/crds/provisioningrequest" "$cache/kueue"
  rm -f "$cache"/kueue-*.done && touch "$cache/kueue-$kueuekey.done"
fi
# The Prometheus Operator's CRDs, as its module ships them (example/prometheus-operator-crd: the
# set kube-prometheus-stack installs), at the version the rig runs: the chart test dry-runs
# berth's monitoring objects against them, the operator rig test runs the operator on them.
if [ ! -f "$cache/monitoring-$monkey.done" ]; then
  po=$(cd "$tools/monitoring" && go mod download github.com/prometheus-operator/prometheus-operator && go list -m -f '{{.Dir}}' github.com/prometheus-operator/prometheus-operator)
  rm -rf "$cache/crds/monitoring" && mkdir -p "$cache/crds/monitoring"
  cp "$po"/example/prometheus-operator-crd/*.yaml "$cache/crds/monitoring/"
  chmod -R u+w "$cache/crds/monitoring"
  rm -f "$cache"/monitoring-*.done && touch "$cache/monitoring-$monkey.done"
fi
# cert-manager's Certificate and Issuer CRDs (plain YAML in its module), for the chart's
# cert-manager option.
certmanager=v1.19.1
if [ ! -f "$cache/cert-manager-$certmanager.done" ]; then
  cm=$(cd "$(mktemp -d)" && go mod download -json "github.com/cert-manager/cert-manager@$certmanager" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  rm -rf "$cache/crds/cert-manager" && mkdir -p "$cache/crds/cert-manager"
  cp "$cm/deploy/crds/cert-manager.io_certificates.yaml" "$cm/deploy/crds/cert-manager.io_issuers.yaml" "$cache/crds/cert-manager/"
  chmod -R u+w "$cache/crds/cert-manager"
  rm -f "$cache"/cert-manager-*.done && touch "$cache/cert-manager-$certmanager.done"
fi
echo "$cache"
