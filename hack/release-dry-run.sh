#!/usr/bin/env bash
# `make release-dry-run`: the release workflow's steps (.github/workflows/release.yaml) run
# offline on this machine, everything checked as a user would check a release:
#   1. both images built (hack/image, this machine's architecture: the release builds
#      linux/amd64 and linux/arm64 with buildx) with an SPDX SBOM each;
#   2. pushed to a registry on loopback (crane's), the digests it reports equal to the built ones;
#   3. signed, and each SBOM attached as a signed SPDX attestation, with cosign — with a key pair
#      made for the run where the release signs keylessly (GitHub's OIDC identity; no Rekor here);
#   4. the chart packaged by hack/release-chart.sh (the release's own step) with both digests
#      pinned, pushed as an OCI artifact and signed the same way;
#   5. verified offline: every signature and attestation against the public key (and refused
#      against another key: a verification that cannot fail proves nothing), and the chart pulled
#      back from the registry renders both images by digest.
# cosign, crane and helm come from hack/tools/release (hack/build-tools.sh builds them).
#
# What it cannot check is said here: the release builds its images with buildx for two
# platforms and attaches BuildKit's SBOM and provenance; the dry run builds this machine's
# platform with hack/image and attaches its own SPDX SBOM as a cosign attestation. The chart step
# is the release's own script.
#
# Usage: hack/release-dry-run.sh [OUT]   (default bin/release-dry-run; emptied first, so it must be
#        empty or an earlier dry run's; VERSION overrides v0.0.0-dryrun)
set -euo pipefail
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/bin/release-dry-run}
mkdir -p "$out" && out=$(cd "$out" && pwd)
# The folder is emptied first: only one the dry run made (its marker), or an empty one.
if [ -n "$(ls -A "$out")" ] && [ ! -f "$out/.release-dry-run" ]; then
  echo "release-dry-run: $out is not empty and not a dry run's output; give another folder" >&2; exit 2
fi
find "$out" -mindepth 1 -delete && touch "$out/.release-dry-run"
version=${VERSION:-v0.0.0-dryrun}
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
arch=$(go env GOARCH)
bin="$("$root/hack/build-tools.sh" cosign crane helm)/bin"
crane=$bin/crane
export HELM=$bin/helm
# Offline means offline: cosign asks Sigstore's TUF CDN for its trusted root even when told to
# skip the transparency log; through a proxy that refuses at once it fails fast, not after a
# firewall's timeout. The loopback registry is reached directly.
cosign() { HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 NO_PROXY=127.0.0.1,localhost "$bin/cosign" "$@"; }
step() { echo "release-dry-run: $*" >&2; }
registry_pid=""
finish() {
  rc=$?
  if [ -n "$registry_pid" ]; then kill "$registry_pid" 2>/dev/null || true; fi
  if [ $rc -ne 0 ]; then
    for log in registry.log cosign.log chart-push.log chart-pull.log; do
      if [ -s "$out/$log" ]; then echo "--- last lines of $out/$log" >&2; tail -n 20 "$out/$log" >&2; fi
    done
  fi
  exit $rc
}
trap finish EXIT

step "1/5 images and SBOMs ($version, linux/$arch)"
go -C "$root/hack/image" run . -root ../.. -out "$out/images" -version "$version" -commit "$commit" -sbom >"$out/images.txt"
declare -A built
for img in berth berth-agent; do
  built[$img]=$(awk -v f="$out/images/$img-$arch.tar" '$1==f{print $2}' "$out/images.txt")
  [ -n "${built[$img]}" ] && [ -s "$out/images/$img-$arch.spdx.json" ] || { step "no archive or SBOM of $img"; exit 1; }
done

step "2/5 push to a registry on loopback"
"$crane" registry serve --address 127.0.0.1:0 >"$out/registry.log" 2>&1 &
registry_pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$out/registry.log" | head -n1)
  [ -n "$port" ] && "$crane" catalog --insecure "127.0.0.1:$port" >/dev/null 2>&1 && break
  port=""; sleep 0.1
done
[ -n "$port" ] || { step "the loopback registry did not come up in 10 s"; exit 1; }
repo=127.0.0.1:$port/berth-dev
declare -A ref
for img in berth berth-agent; do
  "$crane" push --insecure "$out/images/$img-$arch.tar" "$repo/$img:$version" >/dev/null 2>>"$out/registry.log"
  got=$("$crane" digest --insecure "$repo/$img:$version")
  [ "$got" = "${built[$img]}" ] || { step "$img: the registry reports $got, the build printed ${built[$img]}"; exit 1; }
  ref[$img]=$repo/$img@$got
done

step "3/5 sign the images, attest their SBOMs"
export COSIGN_PASSWORD=""
(cd "$out" && cosign generate-key-pair --output-key-prefix release >/dev/null 2>&1 && cosign generate-key-pair --output-key-prefix other >/dev/null 2>&1)
sign=(--key "$out/release.key" --tlog-upload=false --allow-http-registry --yes)
for img in berth berth-agent; do
  cosign sign "${sign[@]}" "${ref[$img]}" 2>>"$out/cosign.log"
  cosign attest "${sign[@]}" --type spdxjson --predicate "$out/images/$img-$arch.spdx.json" "${ref[$img]}" 2>>"$out/cosign.log"
done

step "4/5 package the chart with the digests pinned, push and sign it"
tgz=$("$root/hack/release-chart.sh" "$version" "${built[berth]}" "${built[berth-agent]}" "$out/chart")
"$HELM" push "$tgz" "oci://$repo/charts" --plain-http >"$out/chart-push.log" 2>&1
chart_digest=$(sed -n 's/^Digest: //p' "$out/chart-push.log")
[ -n "$chart_digest" ] || { step "helm push printed no digest"; cat "$out/chart-push.log" >&2; exit 1; }
ref[chart]=$repo/charts/berth@$chart_digest
cosign sign "${sign[@]}" "${ref[chart]}" 2>>"$out/cosign.log"

step "5/5 verify offline"
verify=(--insecure-ignore-tlog --allow-http-registry --offline)
for a in berth berth-agent chart; do
  cosign verify --key "$out/release.pub" "${verify[@]}" "${ref[$a]}" >"$out/verify-$a.json" 2>>"$out/cosign.log" ||
    { step "$a: the signature does not verify"; exit 1; }
  # Refused for the right reason: no signature of that key, not a registry or network error.
  if cosign verify --key "$out/other.pub" "${verify[@]}" "${ref[$a]}" >"$out/refused-$a.log" 2>&1; then
    step "$a: verifies against a key that never signed it"; exit 1
  fi
  grep -q "no matching signatures" "$out/refused-$a.log" ||
    { step "$a: verifying against another key failed for another reason:"; cat "$out/refused-$a.log" >&2; exit 1; }
done
for img in berth berth-agent; do
  cosign verify-attestation --key "$out/release.pub" --type spdxjson "${verify[@]}" "${ref[$img]}" >"$out/attestation-$img.json" 2>>"$out/cosign.log" ||
    { step "$img: the SBOM attestation does not verify"; exit 1; }
done
mkdir -p "$out/pulled"
"$HELM" pull "oci://$repo/charts/berth" --version "${version#v}" --plain-http --destination "$out/pulled" >"$out/chart-pull.log" 2>&1 ||
  { step "pulling the chart back failed"; cat "$out/chart-pull.log" >&2; exit 1; }
kube=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$root/hack/tools/go.mod") # the Kubernetes CI runs
"$HELM" template berth "$out/pulled/berth-${version#v}.tgz" --kube-version "$kube" >"$out/rendered.yaml"
for img in berth berth-agent; do
  grep -q "image: \"\?ghcr.io/berth-dev/$img@${built[$img]}" "$out/rendered.yaml" ||
    { step "the released chart does not run $img by its digest ${built[$img]}"; exit 1; }
done
{
  echo "version $version (commit $commit), linux/$arch"
  for a in berth berth-agent chart; do echo "${ref[$a]#"$repo/"}  signed, verified offline"; done
  for img in berth berth-agent; do echo "$img SBOM: $(grep -c '"SPDXID": "SPDXRef-Package-' "$out/images/$img-$arch.spdx.json") packages, attested, verified"; done
} | tee "$out/summary.txt"
step "done: $out"
