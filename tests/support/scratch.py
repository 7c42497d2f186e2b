"""Directories for fixtures wider than one test, removed when the fixture ends.

pytest's ``tmp_path_retention_policy = "failed"`` removes a passing test's ``tmp_path`` at
once, but directories from ``tmp_path_factory.mktemp`` stay until the session is over. A
module's cluster (three stores, etcd's preallocated WAL) holds 0.3-0.9 GB, and the whole
suite's summed to 13 GB: more than CI's disk had free. ``scoped_dir`` gives a fixture its
directory and removes it at the fixture's teardown, unless a test failed while it lived
(then it is kept, like a failed test's ``tmp_path``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def scoped_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    path = tmp_path_factory.mktemp(name)
    failed_before = request.session.testsfailed

    def remove() -> None:
        if request.session.testsfailed == failed_before:
            shutil.rmtree(path, ignore_errors=True)

    request.addfinalizer(remove)
    return path
