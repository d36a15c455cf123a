"""How ``warden … --help`` prints (decision 991): the same text wherever it goes.

Typer's Rich help fits a table to the terminal and cuts what does not fit with ``…``
(44 cuts in ``warden serve --help`` through a pipe, none at ``COLUMNS=250``), and reads
a help text's ``[loopback]`` as Rich markup and drops it. Every ``warden`` app uses
Click's plain help instead, at a fixed 80 columns: it wraps, never cuts, prints brackets
as written and does not depend on the terminal. A group lists each command with the
first sentence of its help, whole (Click cuts it to the line with ``...``), and a group
run without a command prints its help on stdout and exits 2, as before.
"""

from __future__ import annotations

import os
from typing import Any

import typer
from typer._click.exceptions import BadParameter
from typer.core import TyperGroup

# A limit no first sentence reaches: Click then keeps it whole.
_WHOLE = 1 << 16


class WholeHelpGroup(TyperGroup):
    """A Typer group whose command list keeps each command's first sentence whole."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        # A group run bare prints its help on stdout (exit 2), as the Rich help did;
        # Click's own error would print it on stderr.
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            typer.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(2)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BadParameter as exc:
            line = _environment_error(exc)
            if line is None:
                raise
            # A WARDEN_* variable Click could not convert: the settings' one line (as for a
            # value out of range), not a usage error that hides which variable it was.
            typer.echo(f"error: {line}", err=True)
            ctx.exit(2)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        # ctx, formatter: Click's Context and HelpFormatter (Typer vendors Click privately).
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=_WHOLE)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


#: Keyword arguments every ``warden`` ``typer.Typer(...)`` takes.
HELP_SETTINGS: dict[str, Any] = {
    "cls": WholeHelpGroup,
    "rich_markup_mode": None,
    "context_settings": {"terminal_width": 80, "max_content_width": 80},
}


def _environment_error(exc: BadParameter) -> str | None:
    """``invalid settings: name: why (environment: VAR='value')`` when ``exc`` refused an
    option's value read from its environment variable; None for any other bad parameter."""
    param, ctx = exc.param, exc.ctx
    if param is None or ctx is None or param.name is None or not isinstance(param.envvar, str):
        return None
    source = ctx.get_parameter_source(param.name)
    if getattr(source, "name", None) != "ENVIRONMENT":
        return None
    from warden.config_file import shown

    value = shown(os.environ.get(param.envvar, ""))
    return f"invalid settings: {param.name}: {exc.message} (environment: {param.envvar}={value!r})"
