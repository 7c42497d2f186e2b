"""CLI behaviour that needs no cluster: usage errors and an unreachable endpoint."""

from click.testing import CliRunner

from txmq_cli.main import cli


def test_an_unreachable_endpoint_is_a_typed_error_with_exit_code_1(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TXMQ_ENDPOINT", "127.0.0.1:1")  # the env var stands in for --endpoint
    result = CliRunner().invoke(cli, ["topic", "list"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: [CODE_UNAVAILABLE] ")


def test_query_needs_exactly_one_of_key_and_unique_id() -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["message", "query"]).exit_code == 2
    assert runner.invoke(cli, ["message", "query", "--key", "k", "--unique-id", "u"]).exit_code == 2
    assert "--key needs --topic" in runner.invoke(cli, ["message", "query", "--key", "k"]).output


def test_every_admin_command_takes_endpoint() -> None:
    for path in (["topic", "create"], ["topic", "list"], ["group", "get"], ["send"], ["message", "view"], ["offsets"]):
        assert "--endpoint" in CliRunner().invoke(cli, [*path, "--help"]).output
