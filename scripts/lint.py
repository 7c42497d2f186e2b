"""The gates `scripts/test.sh` runs before the tests: ruff (format check + lint) and mypy
over the services, the SDK and the CLI, as a ratchet.

- ``ruff format --check`` must pass outright: the tree is formatted.
- ``ruff check`` and ``mypy`` findings are counted per (file, tool:code) and compared
  with ``scripts/lint-baseline.json``. A count above its baseline fails (new findings
  are listed with their lines); a count below it also fails, asking for
  ``scripts/lint.py --update``, so the baseline only ever shrinks and an entry in it is
  always a finding that still exists. ``--update`` refuses to raise any count.

With ``--warn-unused-ignores`` (mypy) and RUF100 (ruff: unused ``noqa``), a
``# type: ignore`` or ``# noqa`` that suppresses nothing is itself a finding.

    .venv/bin/python scripts/lint.py            # the gate
    .venv/bin/python scripts/lint.py --update   # after fixing findings: shrink the baseline
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "scripts" / "lint-baseline.json"
BIN = Path(sys.executable).parent

#: What ruff looks at (its excludes, e.g. the generated stubs, are in pyproject.toml).
RUFF_PATHS = ["services", "clients/python/src", "cli", "analytics", "bench", "tests", "scripts"]
#: mypy: the services, the SDK and the CLI, as packages (their sources are mapped by MYPYPATH).
MYPY_ROOTS = {
    "txmq": "clients/python/src",
    "txmq_runtime": "services/runtime",
    "txmq_store": "services/store",
    "txmq_txcheck": "services/txcheck",
    "txmq_pull": "services/pull",
    "txmq_gateway": "services/gateway",
    "txmq_cli": "cli",
}
MYPY_LINE = re.compile(r"^(?P<path>[^:\s]+\.pyi?):(?P<line>\d+): error: (?P<msg>.*?)\s+\[(?P<code>[a-z0-9-]+)\]$")

Finding = tuple[str, str]  # (path, "tool:code")


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


def ruff_format_check() -> list[str]:
    proc = run([str(BIN / "ruff"), "format", "--check", *RUFF_PATHS])
    if proc.returncode == 0:
        return []
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    return [*lines, "fix: .venv/bin/ruff format " + " ".join(RUFF_PATHS)]


def ruff_findings() -> dict[Finding, list[str]]:
    proc = run([str(BIN / "ruff"), "check", "--output-format", "json", "--no-fix", *RUFF_PATHS])
    if proc.returncode not in (0, 1):
        raise SystemExit(f"lint: ruff failed: {proc.stderr.strip()}")
    out: dict[Finding, list[str]] = collections.defaultdict(list)
    for item in json.loads(proc.stdout or "[]"):
        path = os.path.relpath(item["filename"], ROOT)
        code = item.get("code") or "syntax"
        row = item["location"]["row"]
        out[(path, f"ruff:{code}")].append(f"{path}:{row}: {item['message']} [{code}]")
    return out


def mypy_findings() -> dict[Finding, list[str]]:
    env = {**os.environ, "MYPYPATH": os.pathsep.join(MYPY_ROOTS.values())}
    cmd = [str(BIN / "mypy"), "--no-error-summary", "--show-error-codes", "--no-pretty"]
    for package in MYPY_ROOTS:
        cmd += ["-p", package]
    proc = run(cmd, env=env)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"lint: mypy failed: {(proc.stderr or proc.stdout).strip()}")
    out: dict[Finding, list[str]] = collections.defaultdict(list)
    for line in proc.stdout.splitlines():
        m = MYPY_LINE.match(line)
        if m:
            out[(m["path"], f"mypy:{m['code']}")].append(line)
    return out


def load_baseline() -> dict[Finding, int]:
    if not BASELINE.exists():
        return {}
    raw = json.loads(BASELINE.read_text())
    return {(path, code): n for path, codes in raw.items() for code, n in codes.items()}


def write_baseline(counts: dict[Finding, int]) -> None:
    nested: dict[str, dict[str, int]] = {}
    for (path, code), n in sorted(counts.items()):
        if n:
            nested.setdefault(path, {})[code] = n
    BASELINE.write_text(json.dumps(nested, indent=1, sort_keys=True) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="shrink the baseline to the current findings")
    parser.add_argument("--init", action="store_true", help="write the first baseline (only when there is none)")
    args = parser.parse_args()

    fmt = ruff_format_check()
    findings = {**ruff_findings(), **mypy_findings()}
    counts = {key: len(lines) for key, lines in findings.items()}
    baseline = load_baseline()

    grown = {key: n for key, n in counts.items() if n > baseline.get(key, 0)}
    shrunk = {key: n for key, n in baseline.items() if counts.get(key, 0) < n}

    if args.init:
        if BASELINE.exists():
            print("lint: a baseline exists; it may only shrink (--update)")
            return 1
        write_baseline(counts)
        print(f"lint: first baseline, {sum(counts.values())} findings in {len({p for p, _ in counts})} files")
        return 0 if not fmt else 1
    if args.update:
        if grown:
            for key in sorted(grown):
                print(*findings[key], sep="\n")
            print(f"lint: refusing to raise the baseline for {len(grown)} (file, code) pairs: fix them")
            return 1
        write_baseline(counts)
        print(f"lint: baseline now {sum(counts.values())} findings in {len({p for p, _ in counts})} files")
        return 0 if not fmt else 1

    ok = True
    if fmt:
        ok = False
        print("lint: ruff format --check failed:", *fmt, sep="\n  ")
    if grown:
        ok = False
        print("lint: new findings (not in scripts/lint-baseline.json):")
        for key in sorted(grown):
            extra = counts[key] - baseline.get(key, 0)
            print(f"  {key[0]} {key[1]}: {counts[key]} (baseline {baseline.get(key, 0)}, +{extra})")
            for line in findings[key]:
                print(f"    {line}")
    if shrunk:
        ok = False
        print("lint: fewer findings than the baseline — good; shrink it: .venv/bin/python scripts/lint.py --update")
        for key in sorted(shrunk):
            print(f"  {key[0]} {key[1]}: {counts.get(key, 0)} (baseline {baseline[key]})")
    if ok:
        print(f"lint: ok (format clean; {sum(counts.values())} baselined findings, none new)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
