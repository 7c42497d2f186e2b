#!/usr/bin/env bash
# The test command (README, .ci/run): idempotent setup with the test tools (the dev extra,
# helm and the Kubernetes schemas, the Node.js client's npm packages), the gates (ruff
# format + lint and mypy as a ratchet: scripts/lint.py), then the whole suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -m "not slow", the fast loop); the
# suite runs on two pytest-xdist workers (TXMQ_TEST_WORKERS).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh --test
echo "test: gates (scripts/lint.py: ruff format, ruff and mypy against scripts/lint-baseline.json)"
.venv/bin/python scripts/lint.py
# Two workers, a test file each at a time (module fixtures stay within a worker; the
# deployment test's cluster is one file): TXMQ_TEST_WORKERS=0 runs in one process.
workers="${TXMQ_TEST_WORKERS:-2}"
if [ "$workers" = "0" ]; then
  exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
fi
exec .venv/bin/python -m pytest -p no:cacheprovider -n "$workers" --dist loadfile "$@"
