#!/usr/bin/env bash
# The one command that generates the Python stubs (+ .pyi) from protos/ into the SDK
# package (clients/python/src/txmq/v1). Never edit the generated files by hand.
# Usage: scripts/gen_protos.sh [OUT_DIR]   (default: clients/python/src)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/clients/python/src}"
py="${PYTHON:-$root/.venv/bin/python}"
mkdir -p "$out/txmq/v1"
rm -f "$out"/txmq/v1/*_pb2*.py "$out"/txmq/v1/*_pb2*.pyi
"$py" -m grpc_tools.protoc -I "$root/protos" \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  "$root"/protos/txmq/v1/*.proto
touch "$out/txmq/v1/__init__.py"
# protoc's .pyi marks a module-level extension's field number ClassVar (a class-body-only
# annotation mypy refuses): plain int there.
sed -i -E 's/^([A-Z0-9_]+_FIELD_NUMBER): _ClassVar\[int\]$/\1: int/' "$out"/txmq/v1/*_pb2.pyi
# The access table beside STATUS_CODES.md, from the (txmq.v1.access) options just compiled.
PYTHONPATH="$out${PYTHONPATH:+:$PYTHONPATH}" "$py" "$root/scripts/access_table.py"
