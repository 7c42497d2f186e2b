"""Re-print the table and ratios from result files of ``bench.produce``, merging them.

    .venv/bin/python -m bench.report bench/results/a.json bench/results/b.json

Rounds of the same scenario from several files are pooled (median of the quiet rounds).
A scenario run with different txmq clients in different files is kept apart: pass
``--client sdk`` or ``--client stubs`` to pick one; likewise ``--peer-path`` picks the
peer rows of one client path (``conn``, ``asyncio@4``, ...).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from bench.produce import Result, best_of_rounds, print_report


def load(paths: list[Path], client: str | None, peer_path: str | None = None) -> tuple[list[Result], list[dict]]:
    fields = {f.name for f in dataclasses.fields(Result)}
    results, docs = [], []
    for p in paths:
        doc = json.loads(p.read_text())
        docs.append(doc)
        for raw in doc["results"]:
            r = Result(**{k: v for k, v in raw.items() if k in fields})
            if client and r.system.startswith(("txmq", "grpc-null")):
                is_sdk = r.client.startswith("txmq SDK")
                if (client == "sdk") != is_sdk:
                    continue
            if peer_path and r.system in ("redis", "redis-aof", "nats"):
                if peer_path not in (r.client_path, r.client_path.split("@")[0]):
                    continue
            results.append(r)
    return results, docs


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--client", type=click.Choice(["sdk", "stubs"]), default=None, help="Only txmq rows measured with this client."
)
@click.option(
    "--peer-path",
    default=None,
    help="Only Redis / NATS rows measured on this client path: a name (conn) or name@in-flight (asyncio@4).",
)
def main(files: tuple[Path, ...], client: str | None, peer_path: str | None) -> None:
    results, docs = load(list(files), client, peer_path)
    for p, d in zip(files, docs, strict=True):
        m = d.get("machine", {})
        c = d.get("config", {})
        click.echo(
            f"{p}: {d.get('started_at', '?')[:16]} UTC, {m.get('cores')} cores {m.get('cpu', '')}, "
            f"git {m.get('git_head', '?')}, batch {c.get('batch_size')}, "
            f"concurrency {c.get('concurrency')}, rounds {c.get('rounds')}"
        )
    rounds: dict[str, int] = {}
    for r in results:
        rounds[r.scenario] = rounds.get(r.scenario, 0) + 1
    click.echo("rounds pooled: " + ", ".join(f"{k} {v}" for k, v in rounds.items()))
    click.echo("")
    print_report(best_of_rounds(results))


if __name__ == "__main__":
    main()
