"""The `txmq` group: subcommands registered by separate modules must not shadow each
other (click's add_command silently replaces a name), above all the service commands
that the Helm chart and Kubernetes pods run. One flag style: kebab-case everywhere,
the underscore (and older) spellings accepted but hidden."""

import re
from collections.abc import Iterator

import click
from click.testing import CliRunner

from txmq_cli.cluster import SERVICES
from txmq_cli.main import cli
from txmq_cli.options import option
from txmq_runtime.settings import load_settings
from txmq_store.settings import StoreSettings


def test_service_commands_run_the_services() -> None:
    runner = CliRunner()
    for service, one_of_its_settings in (
        ("store", "--flush-mode"),
        ("pull", "--suspend-timeout-default-ms"),
        ("txcheck", "--transaction-check-interval-ms"),
        ("gateway", "--max-body-size-bytes"),
    ):
        result = runner.invoke(cli, [service, "--help"])
        assert result.exit_code == 0, result.output
        assert one_of_its_settings in result.output, f"`txmq {service}` is not the {service} service"


def test_consumer_one_shot_pull_is_fetch() -> None:
    result = CliRunner().invoke(cli, ["fetch", "--help"])
    assert result.exit_code == 0 and "--queue-id" in result.output


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in group.commands.items():
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


def test_every_flag_of_every_command_is_kebab_case_in_help() -> None:
    runner = CliRunner()
    checked = 0
    for path, _command in _commands(cli):
        if path[0] in SERVICES:
            continue  # pass-through: their flags are the settings' (below)
        shown = runner.invoke(cli, [*path, "--help"]).output
        flags = set(re.findall(r"--[a-z0-9][a-z0-9_-]*", shown))
        assert flags, path
        assert not [f for f in flags if "_" in f], f"`txmq {' '.join(path)}` shows {sorted(flags)}"
        checked += 1
    assert checked > 15


def test_service_settings_flags_are_kebab_case_and_accept_the_field_name() -> None:
    help_text = CliRunner().invoke(cli, ["store", "--help"]).output
    assert not [f for f in re.findall(r"--[a-z0-9][a-z0-9_-]*", help_text) if "_" in f]
    assert load_settings(StoreSettings, ["--flush-mode", "sync"]).flush_mode == "sync"
    assert load_settings(StoreSettings, ["--flush_mode", "sync"]).flush_mode == "sync"
    assert load_settings(StoreSettings, ["--flush_mode=sync", "--data-dir", "d"]).data_dir == "d"


def test_underscore_and_old_spellings_are_hidden_aliases() -> None:
    up = cli.commands["up"]
    assert up.make_context("up", ["--data_dir", "x", "--store_port", "1"]).params["data_dir"] == "x"
    assert up.make_context("up", ["--data-dir", "y"]).params["data_dir"] == "y"
    tail = cli.commands["tail"]
    assert tail.make_context("tail", ["T", "--expr", "A"]).params["tag_expr"] == "A"
    assert tail.make_context("tail", ["T", "--tag_expr", "B"]).params["tag_expr"] == "B"
    fetch = cli.commands["fetch"]
    assert fetch.make_context("fetch", ["T", "--queue", "3"]).params["queue_id"] == 3
    missing = CliRunner().invoke(cli, ["fetch", "T"])
    assert missing.exit_code == 2 and "'--queue-id'" in missing.output and "--queue_id" not in missing.output


def test_option_helper() -> None:
    @click.command()
    @option("--some_flag", default="a")
    @option("--new-name", aliases=("--old",), default="b")
    def command(some_flag: str, new_name: str) -> None:
        click.echo(f"{some_flag} {new_name}")

    runner = CliRunner()
    assert runner.invoke(command, ["--some_flag", "x", "--old", "y"]).output == "x y\n"
    assert runner.invoke(command, ["--some-flag", "x", "--new_name", "z"]).output == "x z\n"
    shown = runner.invoke(command, ["--help"]).output
    assert "--some-flag" in shown and "--new-name" in shown
    assert "--some_flag" not in shown and "--old" not in shown and "--new_name" not in shown


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("txmq ")
