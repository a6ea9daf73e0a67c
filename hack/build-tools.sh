#!/usr/bin/env bash
# Builds what berth's local rig runs (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager, kwok, Karpenter's kwok provider) and controller-gen, from the Go
# module proxy at the versions pinned in hack/tools/go.mod, plus the assets the rig needs from
# those modules (Karpenter's CRDs, kwok's Stage configs).
#
# Everything lands in a cache folder outside the repository keyed by the tools module's
# content ($BERTH_TOOLS_CACHE, default ~/.cache/berth/tools/<key>), so a second run is instant.
#
# Usage: hack/build-tools.sh [binary...]   Prints the cache folder on stdout; progress on stderr.
set -euo pipefail
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
key=$(cat "$tools/go.mod" "$tools/go.sum" "$tools/etcd/main.go" | sha256sum | cut -c1-16)
cache="${BERTH_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/berth/tools}/$key"
mkdir -p "$cache/bin"

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
)
order=(etcd kube-apiserver controller-gen kwok karpenter-kwok kube-scheduler kube-controller-manager)
[ $# -gt 0 ] && order=("$@")

cd "$tools"
for b in "${order[@]}"; do
  pkg=${pkgs[$b]:-}
  [ -n "$pkg" ] || { echo "build-tools: unknown binary $b (known: ${!pkgs[*]})" >&2; exit 2; }
  [ -x "$cache/bin/$b" ] && continue
  echo "build-tools: building $b from the Go module proxy into $cache/bin (a cold build of the whole rig takes ~15 min on 2 cores; cached afterwards)" >&2
  start=$(date +%s)
  flags="-s -w"
  case $pkg in k8s.io/kubernetes/*) flags=$k8sldflags ;; esac
  go build -trimpath -ldflags "$flags" -o "$cache/bin/$b.tmp" "$pkg"
  mv "$cache/bin/$b.tmp" "$cache/bin/$b"
  echo "build-tools: $b built in $(( $(date +%s) - start ))s" >&2
done

# Assets from the pinned modules: CRDs and kwok Stage configs (each file starts a YAML document).
if [ ! -f "$cache/assets.done" ]; then
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
echo "$cache"
