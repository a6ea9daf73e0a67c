#!/usr/bin/env bash
# Prints the path of promtool (alert rule tests), installing the Debian/Ubuntu `prometheus`
# package first when it is missing (as root, or through sudo). PROMTOOL overrides the binary.
set -euo pipefail
if [ -n "${PROMTOOL:-}" ]; then echo "$PROMTOOL"; exit 0; fi
if ! command -v promtool >/dev/null; then
  sudo_=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "promtool not found and not root: install the prometheus package, or set PROMTOOL" >&2; exit 1; }
    sudo_="sudo"
  fi
  command -v apt-get >/dev/null || { echo "promtool not found and no apt-get: install Prometheus's promtool, or set PROMTOOL" >&2; exit 1; }
  echo "installing promtool (Debian package prometheus)..." >&2
  $sudo_ apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends prometheus >&2
fi
command -v promtool
