#!/usr/bin/env bash
# The main job (README): idempotent setup of what the demo needs (no test tools), then a
# local cluster plus the end-to-end demo. Extra arguments go to scripts/demo.py (e.g.
# --keep-running).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
exec .venv/bin/python scripts/demo.py "$@"
