#!/usr/bin/env bash
# Idempotent: what the deployment test (tests/deploy) needs to run the image and the chart
# as containers, from Debian's packages: podman with runc, mmdebstrap (the base image is
# built from Debian packages), dnsmasq (the test cluster's DNS) and iproute2 (network
# namespaces). As root with apt it installs what is missing; otherwise it says so and
# succeeds, and the deployment test skips with the reason.
set -euo pipefail
declare -A package=([podman]=podman [mmdebstrap]=mmdebstrap [runc]=runc [dnsmasq]=dnsmasq-base [ip]=iproute2)
missing=()
for tool in "${!package[@]}"; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ]; then
    missing+=("${package[$tool]}")
  fi
done
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "install_deploy_deps: installing ${missing[*]} from Debian" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "install_deploy_deps: missing ${missing[*]} and not root with apt; tests/deploy will skip" >&2
fi
