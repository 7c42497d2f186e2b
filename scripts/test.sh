#!/usr/bin/env bash
# The test command (README, .ci/run): idempotent setup with the test tools (the dev extra,
# helm and the Kubernetes schemas, the Node.js client's npm packages), then the whole suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k store -x).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh --test
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
