"""What ``txmq ... --help`` tells a new user, and one way to spell things: every env var
an option reads, units in the names of durations, booleans as flags."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from txmq_cli.cluster_cmds import AUTH_ARGS, _share_auth_secret
from txmq_cli.main import cli
from txmq_gateway.settings import GatewaySettings
from txmq_pull.settings import PullSettings
from txmq_runtime.settings import load_settings
from txmq_store.settings import StoreSettings
from txmq_txcheck.settings import TxcheckSettings


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in group.commands.items():
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


def test_every_option_with_an_env_var_names_it_in_help() -> None:
    runner = CliRunner()
    named = set()
    for path, command in [((), cli), *_commands(cli)]:
        envvars = [p.envvar for p in command.params if isinstance(p, click.Option) and p.envvar]
        if not envvars:
            continue
        shown = " ".join(runner.invoke(cli, [*path, "--help"], terminal_width=200).output.split())
        for envvar in envvars:
            assert f"env var: {envvar}" in shown, f"`txmq {' '.join(path)} --help` does not name {envvar}"
            named.add(envvar)
    assert {"TXMQ_ENDPOINT", "TXMQ_ACCESS_KEY", "TXMQ_SECRET_KEY", "TXMQ_TLS_CA_FILE"} <= named


def test_durations_carry_their_unit_in_the_flag_name() -> None:
    duration = re.compile(r"timeout|wait|interval|window|delay|backoff|retention")
    checked = []
    for path, command in _commands(cli):
        for param in command.params:
            if not isinstance(param, click.Option) or not duration.search(param.opts[0]):
                continue
            if param.opts[0] == "--delay-level":
                continue  # a level, not a duration
            assert param.opts[0].endswith(("-s", "-ms", "-hours")), f"`txmq {' '.join(path)} {param.opts[0]}`"
            checked.append(param.opts[0])
    assert {"--timeout-s", "--wait-s", "--start-timeout-s", "--interval-s"} <= set(checked)


def test_up_names_auth_as_the_services_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shown = CliRunner().invoke(cli, ["up", "--help"]).output
    assert "--auth-enabled" in shown and "--auth " not in shown
    monkeypatch.setattr(os, "environ", dict(os.environ))  # the secret goes into the env
    _share_auth_secret(tmp_path / "secret")
    assert AUTH_ARGS[0] == "--auth-enabled"
    for settings in (StoreSettings, PullSettings, TxcheckSettings, GatewaySettings):
        assert load_settings(settings, list(AUTH_ARGS)).auth_enabled, settings


def test_service_help_shows_booleans_as_flags_and_env_vars() -> None:
    shown = CliRunner().invoke(cli, ["store", "--help"], terminal_width=200).output
    assert "--auth-enabled | --no-auth-enabled" in shown and " bool" not in shown
    assert "[env: TXMQ_STORE_AUTH_ENABLED]" in " ".join(shown.split())
    assert "--flush-interval-ms int" in shown  # types, and units in the names


@pytest.mark.parametrize(
    ("args", "enabled"),
    [
        (["--auth-enabled"], True),
        (["--no-auth-enabled"], False),
        (["--auth-enabled=true"], True),  # booleans given a value, as before they were flags
        (["--auth_enabled", "false"], False),
        (["--auth-enabled", "1"], True),
        ([], False),
    ],
)
def test_service_booleans_take_a_flag_or_a_value(args: list[str], enabled: bool) -> None:
    settings = load_settings(StoreSettings, [*args, "--auth-access-key", "k", "--auth-secret-key", "s" * 16])
    assert settings.auth_enabled is enabled
