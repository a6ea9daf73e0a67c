#!/usr/bin/env bash
# Builds berth and runs its GPU agent once against the real NVML of this machine, printing the
# inventory and health it reads. Meant for a machine with an NVIDIA GPU and driver; elsewhere it
# says so and exits 0 (skipped), unless BERTH_GPU_REQUIRED=1.
#
# Usage: test/gpu/check.sh [output-folder]   (writes agent-once.txt and agent-once.json there)
set -euo pipefail
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
export CGO_CFLAGS=${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$(mktemp -d)}
mkdir -p "$out"
cd "$root"

if ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml.so'; then
  msg="no NVML library (libnvidia-ml.so) on this machine: GPU check skipped"
  if [ "${BERTH_GPU_REQUIRED:-0}" = 1 ]; then echo "FAIL: $msg" >&2; exit 1; fi
  echo "SKIP: $msg"
  exit 0
fi
command -v nvidia-smi >/dev/null && nvidia-smi -L | tee "$out/nvidia-smi.txt" || true

go build -o "$out/berth" ./cmd/berth
start=$(date +%s%N)
"$out/berth" agent --once | tee "$out/agent-once.txt"
end=$(date +%s%N)
"$out/berth" agent --once --json > "$out/agent-once.json"
echo "agent --once took $(( (end - start) / 1000000 )) ms" | tee -a "$out/agent-once.txt"
