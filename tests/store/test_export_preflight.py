"""A store asked for the analytics export (export_interval_ms > 0) in an installation
without pyarrow fails its start with one line naming the setting, before it touches its
data or etcd (it used to start, serve, and crash in a loop once the export began)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from txmq_runtime.settings import load_settings
from txmq_store.settings import StoreSettings

# Runs the real entry point with pyarrow made unimportable (sys.modules[name] = None is
# how Python itself marks a module that must not be imported).
WITHOUT_PYARROW = "import sys; sys.modules['pyarrow'] = None; from txmq_store.__main__ import main; main()"


def test_the_export_setting_is_refused_without_pyarrow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ValidationError) as raised:
        load_settings(StoreSettings, ["--export_interval_ms", "60000"])
    (problem,) = raised.value.errors()
    assert problem["loc"] == ("export_interval_ms",)
    assert "pyarrow" in problem["msg"] and "txmq-server[export]" in problem["msg"]


def test_the_export_off_or_with_pyarrow_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(StoreSettings, ["--export_interval_ms", "60000"]).export_interval_ms == 60000
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    assert load_settings(StoreSettings, ["--export_interval_ms", "0"]).export_interval_ms == 0


@pytest.mark.slow
def test_the_store_process_says_it_in_one_line(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PYARROW, "--data_dir", str(tmp_path / "data"), "--export_interval_ms", "60000",
         "--etcd_endpoints", "127.0.0.1:9"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("txmq-store: invalid settings: export_interval_ms:")
    assert "pyarrow" in lines[0]
    assert not (tmp_path / "data").exists()  # refused before the data directory was made
