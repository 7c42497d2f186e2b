"""The `txmq` group: subcommands registered by separate modules must not shadow each
other (click's add_command silently replaces a name), above all the service commands
that the Helm chart and Kubernetes pods run."""

from click.testing import CliRunner
from txmq_cli.main import cli


def test_service_commands_run_the_services() -> None:
    runner = CliRunner()
    for service, one_of_its_settings in (
        ("store", "--flush_mode"),
        ("pull", "--suspend_timeout_default_ms"),
        ("txcheck", "--transaction_check_interval_ms"),
        ("gateway", "--max_body_size_bytes"),
    ):
        result = runner.invoke(cli, [service, "--help"])
        assert result.exit_code == 0, result.output
        assert one_of_its_settings in result.output, f"`txmq {service}` is not the {service} service"


def test_consumer_one_shot_pull_is_fetch() -> None:
    result = CliRunner().invoke(cli, ["fetch", "--help"])
    assert result.exit_code == 0 and "--queue" in result.output
