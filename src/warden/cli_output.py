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
# Cells up to this many characters are kept whole (they fold only when longer).
_SHORT = 12


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


def table(*headers: str, title: str | None = None, whole: tuple[str, ...] = ()) -> Table:
    """A table whose cells fold rather than being cut, and whose headers keep their width.

    The columns named in ``whole`` never fold (an id to copy into the next command): they
    are as wide as their widest cell and the other columns fold instead."""
    columns = [Column(h, overflow="fold", min_width=len(h), no_wrap=h in whole) for h in headers]
    return Table(*columns, title=title)


def _fixed_widths(console: Console, t: Table) -> int:
    """Fix the column widths of ``t`` so every header is whole; the width to print at.

    Rich shrinks every wrappable column alike when a table is too wide, which pushes a
    short header below its width and crops the last columns. Instead each column keeps
    at least its header's width (and a column whose cells are all short, at most
    ``_SHORT`` characters, or that is kept whole, keeps their width) and the remaining
    room is shared in proportion to what each column's widest cell wants beyond that;
    cells fold. When even these minimums do not fit, the table is as wide as they need
    (wider than the console).
    """
    unbounded = console.options.update_width(_UNBOUNDED)
    bare = Table(
        *(Column(str(c.header), min_width=c.min_width) for c in t.columns),
        box=t.box,
        padding=t.padding,
        show_edge=t.show_edge,
        pad_edge=t.pad_edge,
    )
    heads = [max(c.min_width or 0, len(str(c.header)), 1) for c in t.columns]
    extra = Measurement.get(console, unbounded, bare).minimum - sum(heads)  # borders, padding
    natural = [
        max([low, *(Measurement.get(console, unbounded, cell).maximum for cell in c.cells)])
        for low, c in zip(heads, t.columns, strict=True)
    ]
    # A short value (a role, a status, a count) is never folded: it keeps its width too.
    # A column kept whole (``table(whole=…)``) is as wide as its widest cell.
    mins = [
        n if c.no_wrap else max(h, min(n, _SHORT))
        for h, n, c in zip(heads, natural, t.columns, strict=True)
    ]
    room = console.width - extra
    if sum(natural) <= room:
        return console.width
    widths = list(mins)
    spare = room - sum(mins)
    wants = [n - m for n, m in zip(natural, mins, strict=True)]
    if spare > 0:
        total = sum(wants)
        shares = [spare * w // total for w in wants]
        # Whole columns left over by rounding go to the columns that want the most.
        for i in sorted(range(len(wants)), key=lambda i: -wants[i])[: spare - sum(shares)]:
            shares[i] += 1
        widths = [m + s for m, s in zip(mins, shares, strict=True)]
    for column, width in zip(t.columns, widths, strict=True):
        column.width = width
    return max(console.width, sum(widths) + extra)


def print_table(console: Console, t: Table) -> None:
    """Print ``t`` at the console's width, or wider when its headers need more room;
    cells fold, nothing is cut with ``…`` (see :func:`_fixed_widths`)."""
    width = _fixed_widths(console, t)
    if width <= console.width:
        console.print(t)
        return
    wide = Console(
        file=console.file,
        width=width,
        force_terminal=console.is_terminal,
        color_system=console.color_system,  # type: ignore[arg-type]
        no_color=console.no_color,
        highlight=False,
    )
    wide.print(t)
