"""What ``txmq ... --help`` tells a new user: every env var an option reads."""

from __future__ import annotations

from collections.abc import Iterator

import click
from click.testing import CliRunner

from txmq_cli.main import cli


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
