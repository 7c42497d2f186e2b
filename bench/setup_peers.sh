#!/usr/bin/env bash
# Install the benchmark peers (redis-server, nats-server) and Redis's own benchmark tool
# (redis-benchmark, in redis-tools) from Debian packages, idempotently.
# Runs as root, or through sudo otherwise. The packages' own services are not used: the
# benchmark starts and stops its own instances (temp dirs, free loopback ports).
# NATS's `nats bench` is part of the nats CLI, which neither Debian nor PyPI nor npm ships:
# there is no native NATS ceiling line.
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-benchmark >/dev/null 2>&1 || need+=(redis-tools)
command -v nats-server >/dev/null 2>&1 || need+=(nats-server)
if [ "${#need[@]}" -eq 0 ]; then
  echo "peers present: $(redis-server --version | cut -d' ' -f3) / $(nats-server --version 2>&1 | tail -n1) / $(redis-benchmark --version)"
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}"
# A package's init script may have started a system-wide instance; stop it (ours are private).
for svc in redis-server nats-server; do
  if [[ " ${need[*]} " == *" $svc "* ]] && command -v service >/dev/null 2>&1; then
    "${sudo[@]}" service "$svc" stop >/dev/null 2>&1 || true
  fi
done
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null && command -v nats-server >/dev/null
echo "peers installed: ${need[*]}"
