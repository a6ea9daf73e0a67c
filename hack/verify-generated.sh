#!/usr/bin/env bash
# Fails when `make generate` changes any generated file: deepcopy code, CRDs, RBAC, the rig's
# instance types, the Helm chart's copies of config/. Works on a dirty tree too: it compares the files before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
generated=(api/v1alpha1/zz_generated.deepcopy.go config/crd config/rbac config/webhook/manifests.yaml config/scheduling/priorityclass.yaml docs/metrics.md docs/reference.md examples/nodepools test/testdata/gpu-instance-types.json charts/berth/files)
sum() { find "${generated[@]}" -type f -print0 | sort -z | xargs -0 sha256sum; }
before=$(sum)
snapshot=$(mktemp -d); trap 'rm -rf "$snapshot"' EXIT
cp -r --parents "${generated[@]}" "$snapshot"/
make --no-print-directory generate >/dev/null
after=$(sum)
if [ "$before" != "$after" ]; then
  echo "generated files were out of date; 'make generate' changed them (now updated — commit them):" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  diff -ru "$snapshot" . --exclude=.git 2>/dev/null | grep -v '^Only in' | head -60 >&2 || true
  exit 1
fi
echo "generated files are up to date"
