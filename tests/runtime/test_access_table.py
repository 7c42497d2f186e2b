"""protos/ACCESS.md is what the access options in protos/ say (scripts/gen_protos.sh writes
it), and every RPC of every txmq service has one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _render() -> str:
    spec = importlib.util.spec_from_file_location("access_table", ROOT / "scripts" / "access_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.render()


def test_access_table_is_current_and_complete() -> None:
    text = _render()
    assert (ROOT / "protos" / "ACCESS.md").read_text() == text, "protos/ACCESS.md is stale: run scripts/gen_protos.sh"
    assert "**missing**" not in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| service")]
    assert len(rows) >= 50
