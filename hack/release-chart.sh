#!/usr/bin/env bash
# Packages the release chart: charts/berth with its version and appVersion set to the release's
# and both images pinned by the digests just pushed, into DEST; prints the package's path.
# The release workflow (.github/workflows/release.yaml) and `make release-dry-run` both run it,
# so the chart the dry run checks is packaged as a release packages it. The checkout is left
# untouched.
#
# Usage: hack/release-chart.sh VERSION BERTH_DIGEST AGENT_DIGEST DEST   (VERSION: v1.2.3)
# helm: $HELM, else helm on $PATH.
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: $0 VERSION BERTH_DIGEST AGENT_DIGEST DEST" >&2; exit 2; }
version=$1 berth=$2 agent=$3 dest=$4
helm=${HELM:-helm}
for d in "$berth" "$agent"; do
  [[ $d =~ ^sha256:[0-9a-f]{64}$ ]] || { echo "release-chart: $d is no image digest (sha256:<64 hex>)" >&2; exit 2; }
done
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "release-chart: $version is no version (v1.2.3, v1.2.3-rc.1)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/charts/berth" "$work/berth"
sed -i "s/^version: .*/version: ${version#v}/; s/^appVersion: .*/appVersion: \"${version}\"/" "$work/berth/Chart.yaml"
sed -i "s/^  digest: \"\" # berth$/  digest: \"${berth}\" # berth/; s/^    digest: \"\" # berth-agent$/    digest: \"${agent}\" # berth-agent/" "$work/berth/values.yaml"
grep -q "digest: \"${berth}\" # berth$" "$work/berth/values.yaml" && grep -q "digest: \"${agent}\" # berth-agent$" "$work/berth/values.yaml" ||
  { echo "release-chart: the digests did not land in values.yaml (its '# berth' / '# berth-agent' digest lines changed?)" >&2; exit 1; }
mkdir -p "$dest"
"$helm" package "$work/berth" --destination "$dest" >&2
echo "$dest/berth-${version#v}.tgz"
