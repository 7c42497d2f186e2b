"""One flag style for every ``txmq`` command: kebab-case (``--data-dir``).

Use :func:`option` instead of ``click.option``. A long flag is always shown in
kebab-case; its underscore spelling (``--data_dir``, the style of releases before
0.2) is still accepted, as a hidden alias, for one release. The parameter name is the
same either way (``data_dir``). An option with an ``envvar`` names it in --help.

    from txmq_cli.options import option

    @option("--data-dir", default="./data", help="...")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


class AliasedOption(click.Option):
    """A click option whose ``hidden_aliases`` work on the command line but are left
    out of --help and of "missing option" errors."""

    def __init__(self, *args: Any, hidden_aliases: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hidden_aliases = hidden_aliases

    def _shown(self) -> list[str]:
        return [o for o in self.opts if o not in self.hidden_aliases]

    def get_help_spec(self, ctx: click.Context) -> str:
        opts, self.opts = self.opts, self._shown()
        try:
            return super().get_help_spec(ctx)
        finally:
            self.opts = opts

    def get_error_hint(self, ctx: click.Context | None) -> str:
        opts, self.opts = self.opts, self._shown()
        try:
            return super().get_error_hint(ctx)
        finally:
            self.opts = opts


def kebab(flag: str) -> str:
    """``--data_dir`` -> ``--data-dir``; short flags, names and ``--a/--no-a`` pairs unchanged."""
    if not flag.startswith("--") or "/" in flag:
        return flag
    return "--" + flag[2:].replace("_", "-")


def option(*param_decls: str, aliases: tuple[str, ...] = (), **attrs: Any) -> Callable[[F], F]:
    """``click.option`` with kebab-case long flags and their underscore spellings as
    hidden aliases. Declarations may be written either way; a name without dashes
    (the Python parameter name) is passed through. ``aliases``: older names of the
    same option (``("--expr",)``), accepted and hidden as well."""
    decls: list[str] = []
    aliases = tuple(dict.fromkeys(a for old in aliases for a in (kebab(old), "--" + old[2:].replace("-", "_"))))
    hidden: list[str] = [a for a in aliases]
    for decl in param_decls:
        shown = kebab(decl)
        decls.append(shown)
        alias = "--" + shown[2:].replace("-", "_") if shown.startswith("--") and "/" not in shown else shown
        if alias != shown:
            hidden.append(alias)
    # A hidden alias never names the parameter: click would take the longest flag.
    if not any(d.isidentifier() for d in decls):
        long_flags = [d for d in decls if d.startswith("--")]
        if long_flags:
            decls.append(long_flags[0][2:].replace("-", "_"))
    hidden = list(dict.fromkeys(h for h in hidden if h not in decls))
    if attrs.get("envvar"):
        attrs.setdefault("show_envvar", True)  # --help names the env var that sets it too
    attrs.setdefault("cls", AliasedOption)
    if issubclass(attrs["cls"], AliasedOption):
        attrs["hidden_aliases"] = tuple(hidden)
    return click.option(*decls, *hidden, **attrs)
