"""CLI behaviour that needs no cluster: usage errors and an unreachable endpoint."""

from click.testing import CliRunner

from txmq_cli.main import cli


def test_an_unreachable_endpoint_says_so_in_one_line_with_exit_code_1(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TXMQ_ENDPOINT", "127.0.0.1:1")  # the env var stands in for --endpoint
    for args in (
        ["topic", "list"],
        ["fetch", "T", "--queue-id", "0"],
        ["tail", "T"],
        ["lag", "G"],
        ["transaction", "show", "tx-1"],
        ["send", "T", "body"],
    ):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, (args, result.output)
        assert result.stderr.startswith("error: no txmq service answers at 127.0.0.1:1: "), (args, result.stderr)
        assert "`txmq up`" in result.stderr and "--endpoint" in result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.output, (args, result.output)


def test_query_needs_exactly_one_of_key_and_unique_id() -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["message", "query"]).exit_code == 2
    assert runner.invoke(cli, ["message", "query", "--key", "k", "--unique-id", "u"]).exit_code == 2
    assert "--key needs --topic" in runner.invoke(cli, ["message", "query", "--key", "k"]).output


def test_every_admin_command_takes_endpoint() -> None:
    for path in (["topic", "create"], ["topic", "list"], ["group", "get"], ["send"], ["message", "view"], ["offsets"]):
        assert "--endpoint" in CliRunner().invoke(cli, [*path, "--help"]).output
