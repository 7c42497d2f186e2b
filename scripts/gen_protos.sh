#!/usr/bin/env bash
# The one command that generates the Python stubs (+ .pyi) from protos/ into the SDK
# package (clients/python/src/txmq/v1, and txmq/keda for KEDA's external scaler contract
# in protos/externalscaler). Never edit the generated files by hand.
# Usage: scripts/gen_protos.sh [OUT_DIR]   (default: clients/python/src)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/clients/python/src}"
py="${PYTHON:-$root/.venv/bin/python}"
mkdir -p "$out/txmq/v1" "$out/txmq/keda"
rm -f "$out"/txmq/v1/*_pb2*.py "$out"/txmq/v1/*_pb2*.pyi "$out"/txmq/keda/*_pb2*.py "$out"/txmq/keda/*_pb2*.pyi
"$py" -m grpc_tools.protoc -I "$root/protos" \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  "$root"/protos/txmq/v1/*.proto
touch "$out/txmq/v1/__init__.py"
# KEDA's externalscaler.proto (its package and wire format unchanged) compiled under the
# virtual path txmq/keda/, so its stubs are txmq.keda.* in the SDK, not a top-level
# `externalscaler` package of their own.
"$py" -m grpc_tools.protoc -I "txmq/keda=$root/protos/externalscaler" \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  txmq/keda/externalscaler.proto
touch "$out/txmq/keda/__init__.py"
# protoc's .pyi marks a module-level extension's field number ClassVar (a class-body-only
# annotation mypy refuses): plain int there.
sed -i -E 's/^([A-Z0-9_]+_FIELD_NUMBER): _ClassVar\[int\]$/\1: int/' "$out"/txmq/v1/*_pb2.pyi "$out"/txmq/keda/*_pb2.pyi
# The access table beside STATUS_CODES.md, from the (txmq.v1.access) options just compiled.
PYTHONPATH="$out${PYTHONPATH:+:$PYTHONPATH}" "$py" "$root/scripts/access_table.py"
