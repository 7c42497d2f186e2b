"""The generated stubs are produced by scripts/gen_protos.sh and never edited by hand:
regenerating must change nothing."""

import filecmp
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "clients/python/src"
#: The generated packages: txmq's contract, and KEDA's external scaler contract.
PACKAGES = ("txmq/v1", "txmq/keda")


def test_generated_stubs_are_fresh(tmp_path: Path) -> None:
    subprocess.run(
        ["bash", str(ROOT / "scripts/gen_protos.sh"), str(tmp_path)],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    for package in PACKAGES:
        generated = SRC / package
        fresh = sorted(p.name for p in (tmp_path / package).iterdir() if p.suffix in (".py", ".pyi"))
        committed = sorted(p.name for p in generated.iterdir() if p.suffix in (".py", ".pyi"))
        assert fresh == committed, f"{package}: stub file set differs: run scripts/gen_protos.sh"
        stale = [n for n in fresh if not filecmp.cmp(tmp_path / package / n, generated / n, shallow=False)]
        assert not stale, f"{package}: stale generated stubs {stale}: run scripts/gen_protos.sh"


def test_every_enum_starts_unspecified() -> None:
    from txmq.v1 import common_pb2, errors_pb2, pull_pb2, route_pb2, store_pb2, txcheck_pb2

    for module in (common_pb2, errors_pb2, pull_pb2, route_pb2, store_pb2, txcheck_pb2):
        for enum in module.DESCRIPTOR.enum_types_by_name.values():
            zero = enum.values_by_number[0].name
            assert zero.endswith("_UNSPECIFIED"), f"{enum.full_name} starts with {zero}"
