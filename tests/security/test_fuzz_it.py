"""The fuzzer as a regression guard (issue 16): a private cluster (etcd, store, pull,
txcheck, gateway), 3 000 seeded requests over every RPC, then the figures the issue asks
for: untyped errors 0, log tracebacks 0, crashes 0, services deregistered 0, and no
authentication bypass. Twice: with the gateway's v2 authentication only, and with
``auth_enabled`` on every service (every call signed; txmq RPCs also get hostile
credentials, which must be refused 401xx/403xx). Not vacuous: every enumerated RPC was
called, every fuzzed service is served by some process (Auth only with auth on), and
every process answered at least one call OK and refused at least one with a typed error
(a process that is down fails); with auth on, some txmq calls were refused as
unauthenticated.

About 20 s each on two cores. A failure prints the whole figures table and the findings;
the same runs by hand: ``.venv/bin/python -m tests.security.fuzz --seed 16 --requests 3000``
(add ``--auth`` for the second).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from security.fuzz import AUTH_REFUSAL_RANGES, MB, Cluster, Config, Names, format_report, fuzzed_services, run

#: Served only with auth_enabled.
AUTH_ONLY_SERVICES = {"txmq.v1.Auth"}
SEED = 16
REQUESTS = 3000


@pytest.mark.slow
@pytest.mark.parametrize("auth", [False, True], ids=["gateway-auth", "auth-enabled"])
def test_fuzzing_every_rpc_finds_nothing(tmp_path: Path, auth: bool) -> None:
    cluster = Cluster.start(tmp_path / "cluster", keep=True, auth=auth)
    try:
        config = Config(seed=SEED, requests=REQUESTS, concurrency=12, max_bytes=60 * MB)
        report = run(cluster, config, names=Names(auth=auth))
    finally:
        cluster.stop()
    figures = format_report(report, findings=80)
    print(figures)

    problems = []
    per_target = report.requests_per_target()
    never = [f"{t.process} {t.path}" for t in report.targets if per_target[f"{t.process} {t.path}"] == 0]
    if never:
        problems.append(f"RPCs never called: {never}")
    served = {name for names in report.hosted.values() for name in names}
    if unserved := sorted(set(fuzzed_services()) - served - (set() if auth else AUTH_ONLY_SERVICES)):
        problems.append(f"services no process serves (not fuzzed): {unserved}")
    if auth:
        refused = sum(
            1
            for r in report.results
            if r.case.expect_unauthorized
            and not r.case.target.v2
            and r.verdict.code is not None
            and r.verdict.code // 100 in AUTH_REFUSAL_RANGES
        )
        if refused == 0:
            problems.append("auth on, but no txmq call with hostile credentials was refused 401xx/403xx")
    for process, verdicts in sorted(report.by(lambda r: r.case.target.process).items()):
        if verdicts["ok"] == 0:
            problems.append(f"{process}: no call answered OK (is it serving?)")
        if verdicts["typed"] == 0:
            problems.append(f"{process}: no typed error at all (is it checking anything?)")
    if set(report.hosted) != set(cluster.addresses):
        problems.append(f"processes fuzzed {sorted(report.hosted)} != started {sorted(cluster.addresses)}")
    if report.untyped:
        problems.append(f"untyped errors: {report.untyped}")
    if report.tracebacks:
        problems.append(f"log tracebacks: {report.tracebacks}")
    if report.crashes:
        problems.append(f"crashes: {report.crashed}")
    if report.deregistered:
        problems.append(f"services deregistered: {report.deregistered}")
    if report.unresponsive:
        problems.append(f"not serving after the run: {report.unresponsive}")
    if bypasses := report.count("auth_bypass"):
        problems.append(f"authentication bypasses: {bypasses}")
    if client_errors := report.count("client_error"):
        problems.append(f"calls the fuzzer itself could not make: {client_errors}")
    assert not problems, "\n".join(problems) + f"\n\nlogs in {tmp_path / 'cluster' / 'logs'}\n\n" + figures
