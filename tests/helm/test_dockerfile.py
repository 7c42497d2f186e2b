"""The Dockerfile, read as text (no Docker engine here): multi-stage from python:3.11-slim,
a non-root numeric USER, `txmq` as the entrypoint, nothing but the finished venv in the
final stages, and the commands the chart runs exist in the `txmq` CLI."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
VALUES = yaml.safe_load((ROOT / "helm" / "txmq" / "values.yaml").read_text())


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [arg for kw, arg in self.instructions if kw == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with line continuations joined."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        if keyword == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest, re.IGNORECASE)
            assert m, line
            base = re.sub(r"\$\{?(\w+)\}?", lambda v: args.get(v.group(1), v.group(0)), m.group(1))
            stages.append(Stage(name=m.group(2) or str(len(stages)), base=base))
        elif keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append((keyword, rest))
    return args, stages


ARGS, STAGES = parse(DOCKERFILE.read_text())
BY_NAME = {s.name: s for s in STAGES}


def chain(stage: Stage) -> list[Stage]:
    """The stage and the stages it is built FROM, base first."""
    out = [stage]
    while out[0].base in BY_NAME:
        out.insert(0, BY_NAME[out[0].base])
    return out


def effective(stage: Stage, keyword: str) -> str | None:
    values = [v for s in chain(stage) for v in s.all(keyword)]
    return values[-1] if values else None


FINAL = STAGES[-1]
SHIPPED = [FINAL, BY_NAME["analytics"]]


def test_multi_stage_from_python_3_11_slim() -> None:
    assert len(STAGES) >= 3
    external = {s.base for s in STAGES if s.base not in BY_NAME}
    assert external and all(b.startswith("python:3.11-slim") for b in external), external
    # The default target (the last stage) is the service image.
    assert FINAL.name == "runtime"


@pytest.mark.parametrize("stage", SHIPPED, ids=lambda s: s.name)
def test_runs_as_a_non_root_numeric_user(stage: Stage) -> None:
    user = effective(stage, "USER")
    assert user is not None
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, user
    # The chart runs the pods as that user.
    assert int(uid) == VALUES["podSecurityContext"]["runAsUser"]


@pytest.mark.parametrize("stage", SHIPPED, ids=lambda s: s.name)
def test_entrypoint_is_txmq(stage: Stage) -> None:
    entrypoint = effective(stage, "ENTRYPOINT")
    assert entrypoint is not None and json.loads(entrypoint) == ["txmq"]  # exec form: txmq is PID 1 and gets SIGTERM
    assert json.loads(effective(stage, "CMD") or "null") is not None


@pytest.mark.parametrize("stage", SHIPPED, ids=lambda s: s.name)
def test_shipped_stages_have_no_build_tools_or_source(stage: Stage) -> None:
    for s in chain(stage):
        if s.base not in BY_NAME and s is not stage and s.name.startswith("build"):
            pytest.fail(f"{stage.name} is built from a build stage")
        for run in s.all("RUN"):
            assert not re.search(r"\b(gcc|g\+\+|build-essential|python3?-dev|make|git)\b", run), run
            assert "pip install" not in run, f"{s.name} installs packages itself: {run}"
        for copy in s.all("COPY"):
            assert copy.startswith("--from=build"), f"{s.name} copies from the context: {copy}"
    copies = [c for s in chain(stage) for c in s.all("COPY")]
    assert any(c.split()[1:] == ["/opt/txmq", "/opt/txmq"] for c in copies), copies


def test_the_build_installs_the_sdk_with_its_committed_stubs() -> None:
    build = BY_NAME["build"]
    copies = [c.split() for c in build.all("COPY")]
    assert ["clients/python/", "clients/python/"] in copies
    stubs = sorted((ROOT / "clients/python/src/txmq/v1").glob("*_pb2*.py"))
    assert stubs, "the generated stubs are committed in clients/python/src/txmq/v1"
    ignored = dockerignore_patterns()
    for stub in stubs:
        assert not is_ignored(stub.relative_to(ROOT).as_posix(), ignored), stub
    run = " ".join(build.all("RUN"))
    assert 'install ./clients/python ".[export]"' in run
    assert "import txmq.v1." in run  # the build fails if the stubs did not make it


def test_the_runtime_image_can_write_the_export_the_chart_turns_on() -> None:
    # With analytics.exports.source store the chart turns store.settings.export_interval_ms
    # on; the store refuses that setting without pyarrow, so the runtime image installs the
    # export extra and checks it imports.
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith("pyarrow") for dep in extras["export"])
    run = " ".join(BY_NAME["build"].all("RUN"))
    assert '".[export]"' in run and "pyarrow.parquet" in run
    assert BY_NAME["runtime"].all("COPY") == ["--from=build /opt/txmq /opt/txmq"]


def test_every_copied_path_is_in_the_repository_and_the_context() -> None:
    ignored = dockerignore_patterns()
    for stage in STAGES:
        for copy in stage.all("COPY"):
            parts = copy.split()
            if parts[0].startswith("--from="):
                continue
            for src in parts[:-1]:
                assert (ROOT / src).exists(), src
                assert not is_ignored(src.rstrip("/"), ignored), f"{src} is excluded by .dockerignore"


def test_dockerignore_keeps_local_state_out() -> None:
    ignored = dockerignore_patterns()
    for path in (".venv", ".git", "data", "tests", "helm", "txmq_server.egg-info", "services/store/__pycache__"):
        assert is_ignored(path, ignored), path


def test_analytics_image_adds_a_jre_and_the_analytics_extra() -> None:
    analytics = BY_NAME["analytics"]
    assert "openjdk" in " ".join(analytics.all("RUN"))
    assert "rm -rf /var/lib/apt/lists" in " ".join(analytics.all("RUN"))
    assert '".[analytics]"' in " ".join(BY_NAME["build-analytics"].all("RUN"))


def test_pyproject_declares_the_analytics_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
    if "analytics" not in extras:
        pytest.xfail("pyproject.toml has no [analytics] extra yet (issue 5); the analytics image needs it")
    assert any(dep.lower().startswith("pyspark") for dep in extras["analytics"])


#: The services the image runs as `txmq <service>` (each a pod in the chart).
SERVICES = ("store", "pull", "txcheck", "gateway")


def test_exposed_ports_are_the_charts() -> None:
    exposed = {int(p) for e in BY_NAME["base"].all("EXPOSE") for p in e.split()}
    assert exposed == {int(VALUES[s]["settings"]["port"]) for s in SERVICES}


def test_the_build_imports_every_service() -> None:
    """The build fails when a service's entry point (or a dependency it imports, such as
    the gateway's apache.rocketmq.v2 modules from rocketmq-python-client) is missing."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_dirs = project["tool"]["setuptools"]["package-dir"]
    run = " ".join(BY_NAME["build"].all("RUN"))
    (check,) = re.findall(r'-c "import ([^"]+)"', run)
    imported = {m.strip() for m in check.split(",")}
    for service in SERVICES:
        package = f"txmq_{service}"
        assert package in project["tool"]["setuptools"]["packages"], package
        assert (ROOT / package_dirs[package] / "__main__.py").is_file(), package
        assert f"{package}.__main__" in imported, f"the build does not import {package}.__main__"
        assert not is_ignored(f"{package_dirs[package]}/__main__.py", dockerignore_patterns()), package
    assert any(d.replace(" ", "").startswith("rocketmq-python-client==") for d in project["project"]["dependencies"])


@pytest.mark.parametrize("service", SERVICES)
def test_txmq_service_commands_run_the_services(service: str) -> None:
    """The pods run `txmq <service>` (ENTRYPOINT + args): that command must start the
    service, not be taken by another CLI command of the same name."""
    from txmq_cli.main import cli

    command = cli.commands.get(service)  # type: ignore[attr-defined]
    assert command is not None, f"`txmq {service}` does not exist"
    assert (command.help or "").startswith(f"Run one {service} instance"), (
        f"`txmq {service}` is now {command.callback.__module__}.{command.callback.__name__}: "
        "the image's pods run `txmq store|pull|txcheck|gateway` (helm/txmq, Dockerfile)"
    )


def test_txmq_analytics_command_exists() -> None:
    from txmq_cli.main import cli

    analytics = cli.commands.get("analytics")  # type: ignore[attr-defined]
    if analytics is None:
        pytest.xfail("`txmq analytics` is not registered in txmq_cli.main yet (issue 5)")
    assert {"run", "export"} <= set(analytics.commands)  # type: ignore[attr-defined]
    params = {p.opts[0] for p in analytics.commands["run"].params}  # type: ignore[attr-defined]
    assert {"--input", "--output", "--master", "--conf"} <= params


# ---- .dockerignore (Docker's rules, enough of them for this file) --------------------------------


def dockerignore_patterns() -> list[tuple[bool, str]]:
    patterns = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        patterns.append((negate, line.lstrip("!").strip("/")))
    return patterns


def _glob_regex(pattern: str) -> str:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return out


def is_ignored(path: str, patterns: list[tuple[bool, str]]) -> bool:
    """Docker's rule: the last matching pattern wins; a matched directory takes its contents."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for negate, pattern in patterns:
        if any(re.fullmatch(_glob_regex(pattern), p) for p in prefixes):
            ignored = not negate
    return ignored


def test_the_build_compiles_the_native_record_codec() -> None:
    # The codec's C extension is optional in setup.py: without a compiler the install goes
    # on with the pure-Python codec, which the images shipped before anyone noticed. The
    # build stages get a compiler (never the final ones) and fail without the native codec.
    assert "gcc" in " ".join(BY_NAME["deps"].all("RUN"))
    for stage in ("build", "build-analytics"):
        assert "assert NATIVE" in " ".join(BY_NAME[stage].all("RUN")), stage
    for stage in SHIPPED:
        shipped_runs = [run for s in chain(stage) if s.name in ("base", stage.name) for run in s.all("RUN")]
        assert shipped_runs and not any("gcc" in run for run in shipped_runs), stage.name
