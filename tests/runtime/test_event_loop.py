"""The services' event loop (``event_loop`` setting, flag ``--event-loop``, env
``TXMQ_<SERVICE>_EVENT_LOOP``, Helm value): uvloop by default, asyncio's own on request,
anything else refused by the settings."""

from __future__ import annotations

import asyncio

import pydantic
import pytest
import uvloop

from txmq_runtime.server import loop_factory
from txmq_runtime.settings import load_settings
from txmq_store.settings import StoreSettings


def test_uvloop_by_default_asyncio_on_request() -> None:
    assert load_settings(StoreSettings, []).event_loop == "uvloop"
    assert load_settings(StoreSettings, ["--event-loop", "asyncio"]).event_loop == "asyncio"
    factory = loop_factory("uvloop")
    assert factory is not None
    with asyncio.Runner(loop_factory=factory) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)
    assert loop_factory("asyncio") is None  # asyncio.Runner's default loop


def test_an_unknown_event_loop_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXMQ_STORE_EVENT_LOOP", "trio")
    with pytest.raises((pydantic.ValidationError, SystemExit)):
        load_settings(StoreSettings, [])
