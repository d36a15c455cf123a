"""``warden doctor``: check a deployment and print what is wrong (issue 18 item 5).

Exit codes: 0 no check failed (warnings and skips allowed), 1 at least one failed,
2 the settings themselves are invalid (nothing checked; the message on stderr).
``--json`` prints ``{ok, checks: [{name, status, message}]}``
(``warden/schemas/cli/doctor.json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from warden.cli_options import EXIT_FAILURE_FOUND, DbUrl, _fail, console
from warden.cli_output import print_json, print_table, table
from warden.cli_serve_options import ConfigFile
from warden.errors import WardenError

_STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def doctor_cmd(
    ctx: typer.Context,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            envvar="WARDEN_DATA_DIR",
            help="Folder of the default database and key files [.warden].",
        ),
    ] = None,
    database_url: DbUrl = None,
    config: ConfigFile = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print one JSON document (schemas/cli/doctor.json).")
    ] = False,
) -> None:
    """Check a deployment: key files and their modes, the database and its schema revision,
    the bundle, budgets and webhooks files, TLS, clock skew against the database, and
    whether the decision path runs compiled (native). Exit 1 if any check fails."""
    from warden.config_file import load_settings
    from warden.doctor import run_checks

    try:
        settings = load_settings(config, ctx=ctx, data_dir=data_dir, database_url=database_url)
    except WardenError as exc:
        raise _fail(exc) from exc
    checks = run_checks(settings)
    failed = any(c.status == "fail" for c in checks)
    if json_out:
        print_json({"ok": not failed, "checks": [c.to_json() for c in checks]})
    else:
        t = table("check", "status", "message")
        for c in checks:
            style = _STYLE[c.status]
            t.add_row(c.name, f"[{style}]{c.status}[/{style}]", escape(c.message))
        print_table(console, t)
        console.print(
            "[red]some checks failed[/red]" if failed else "[green]no check failed[/green]"
        )
    if failed:
        raise typer.Exit(EXIT_FAILURE_FOUND)
