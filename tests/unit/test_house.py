"""The size of the house: no class over 600 lines or 40 methods, no function over 80
lines, and no import cycle inside a package, in the services, the SDK, the CLI and the
analytics job (generated ``*_pb2*`` code aside).

An import counts wherever it is written: at module level, inside a function (an import
put there to dodge a cycle is still one) and under ``TYPE_CHECKING`` (a type-only
dependency still means the two modules know each other). Tests are not measured."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Each measured package: its import name and its folder.
PACKAGES = {
    "txmq": ROOT / "clients/python/src/txmq",
    "txmq_store": ROOT / "services/store/txmq_store",
    "txmq_pull": ROOT / "services/pull/txmq_pull",
    "txmq_txcheck": ROOT / "services/txcheck/txmq_txcheck",
    "txmq_gateway": ROOT / "services/gateway/txmq_gateway",
    "txmq_runtime": ROOT / "services/runtime/txmq_runtime",
    "txmq_cli": ROOT / "cli/txmq_cli",
    "txmq_analytics": ROOT / "analytics/txmq_analytics",
}
MAX_CLASS_LINES = 600
MAX_CLASS_METHODS = 40
MAX_FUNCTION_LINES = 80


def modules(package: str) -> Iterator[tuple[str, Path]]:
    """(dotted module name, path) of each hand-written module of ``package``."""
    folder = PACKAGES[package]
    for path in sorted(folder.rglob("*.py")):
        if "_pb2" in path.name:
            continue
        parts = path.relative_to(folder).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join((package, *parts)), path


def span(node: ast.stmt) -> int:
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1


def oversized(root: Path = ROOT) -> list[str]:
    found = []
    for package in PACKAGES:
        for _, path in modules(package):
            where = path.relative_to(root)
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    lines = span(node)
                    methods = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body)
                    if lines > MAX_CLASS_LINES or methods > MAX_CLASS_METHODS:
                        found.append(f"{where}: class {node.name}: {lines} lines, {methods} methods")
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = span(node)
                    if lines > MAX_FUNCTION_LINES:
                        found.append(f"{where}: def {node.name}: {lines} lines")
    return found


def imports_within(package: str, module: str, path: Path) -> set[str]:
    """The modules of ``package`` that ``module`` imports, anywhere in its file."""
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)  # a submodule by name
    return {n for n in names if n == package or n.startswith(package + ".")}


def cycles(package: str) -> list[list[str]]:
    """The strongly connected sets of two or more modules in ``package``'s import graph."""
    paths = dict(modules(package))
    graph = {m: {d for d in imports_within(package, m, p) if d in paths and d != m} for m, p in paths.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_class_or_function_outgrows_its_room():
    assert oversized() == []


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycle_inside_a_package(package):
    assert cycles(package) == []


def test_the_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    """The measure can fail: two modules importing each other (one under TYPE_CHECKING,
    one inside a function) are a cycle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    monkeypatch.setitem(PACKAGES, "pkg", pkg)
    assert cycles("pkg") == [["pkg.a", "pkg.b"]]


def test_the_size_measure_finds_a_long_function(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (pkg / "long.py").write_text(f"def long():\n{body}")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", {"pkg": pkg})
    assert oversized(tmp_path) == [f"pkg/long.py: def long: {MAX_FUNCTION_LINES + 1} lines"]
