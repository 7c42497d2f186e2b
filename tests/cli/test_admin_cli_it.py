"""Admin commands as a new user tries them, against the session cluster (auth off)."""

from __future__ import annotations

import json

from .conftest import Txmq


def test_whoami_with_auth_off_is_anonymous(txmq: Txmq) -> None:
    text = txmq("whoami")
    assert (text.exit_code, text.stdout, text.stderr) == (0, "anonymous (auth is off)\n", "")
    as_json = txmq("whoami", "-o", "json")
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout) == {
        "username": "",
        "super_user": False,
        "authenticated_by": "",
        "auth_enabled": False,
    }
