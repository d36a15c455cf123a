"""How ``warden`` commands print: JSON documents for machines, width-proof text for people.

Two rules (docs/decisions.md 200–201, docs/cli-json.md):

* ``--json`` prints exactly one JSON document on stdout (UTF-8, indented, no Rich markup,
  never wrapped) whose shape is the command's schema in ``warden/schemas/cli/``;
  :func:`print_json` writes it, :func:`cli_schema` loads the schema.
* Human output does not depend on the terminal's width where it could be read back: a
  summary line is printed soft-wrapped (:func:`print_line`, one line whatever
  ``COLUMNS`` says), and a table (:func:`table`, :func:`print_table`) folds its cells
  instead of cutting them with ``…`` and keeps every header whole, printing wider than
  the console when the headers alone need more room.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from importlib import resources
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table

# Far wider than any table: measuring against it gives the table's unconstrained needs.
_UNBOUNDED = 1 << 16


def print_json(value: Any) -> None:
    """Write ``value`` to stdout as one JSON document (2-space indent, non-ASCII kept)."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")
    sys.stdout.flush()


@cache
def cli_schema(command: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``warden <command> --json``'s document.

    ``command`` names the file ``warden/schemas/cli/<command>.json``, e.g. ``verify`` or
    ``policy-explain``. Raises ``FileNotFoundError`` for a command without a schema.
    """
    path = resources.files("warden.schemas").joinpath("cli", f"{command}.json")
    schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return schema


def print_line(console: Console, text: str) -> None:
    """Print one line of Rich markup that the console never breaks (the terminal may wrap
    it visually; a reader of the captured output still sees one line)."""
    console.print(text, soft_wrap=True, highlight=False)


def table(*headers: str, title: str | None = None) -> Table:
    """A table whose cells fold rather than being cut, and whose headers keep their width."""
    columns = [Column(h, overflow="fold", min_width=len(h)) for h in headers]
    return Table(*columns, title=title)


def _headers_width(console: Console, t: Table) -> int:
    """Columns the headers of ``t`` need, borders and padding included."""
    bare = Table(
        *(Column(str(c.header), min_width=c.min_width) for c in t.columns),
        box=t.box,
        padding=t.padding,
        show_edge=t.show_edge,
        pad_edge=t.pad_edge,
    )
    return Measurement.get(console, console.options.update_width(_UNBOUNDED), bare).minimum


def print_table(console: Console, t: Table) -> None:
    """Print ``t`` at the console's width, or wider when its headers need more room.

    Rich crops a table it cannot fit (headers become ``tas…``); a console as wide as the
    headers need is used instead, and the terminal wraps the long lines.
    """
    need = _headers_width(console, t)
    if need <= console.width:
        console.print(t)
        return
    wide = Console(
        file=console.file,
        width=need,
        force_terminal=console.is_terminal,
        color_system=console.color_system,  # type: ignore[arg-type]
        no_color=console.no_color,
        highlight=False,
    )
    wide.print(t)
