#!/usr/bin/env bash
# Idempotent: install the Node.js client's pinned dependencies (clients/node, from its
# package-lock.json) with `npm ci`. Re-runs only when package-lock.json changed or
# node_modules is missing. Without node/npm it installs Debian's (as root, with apt);
# failing that it says so and succeeds (the polyglot tests then skip with that reason).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/clients/node"
if { ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; } \
   && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  # Debian's nodejs (18 on bookworm) is new enough for @grpc/grpc-js and Apache's
  # rocketmq-client-nodejs (node >= 16.19).
  echo "install_node_deps: installing nodejs and npm from Debian" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install_node_deps: node/npm not found; skipping clients/node (tests/polyglot will skip)" >&2
  exit 0
fi
stamp="$dir/node_modules/.txmq-install-stamp"
want="$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$dir/node_modules/@grpc/grpc-js" ]; then
  exit 0
fi
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
echo "$want" > "$stamp"
