"""Options, consoles and exit codes shared by every ``warden`` command module."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from warden.errors import WardenError

console = Console()
err_console = Console(stderr=True)

EXIT_FAILURE_FOUND = 1
EXIT_BAD_INPUT = 2

DataDir = Annotated[
    Path,
    typer.Option(
        "--data-dir", envvar="WARDEN_DATA_DIR", help="Folder for the default database and key file."
    ),
]
DbUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="WARDEN_DATABASE_URL",
        help="Database URL (default: sqlite:///<data-dir>/warden.db).",
    ),
]
KeyFile = Annotated[
    Path | None,
    typer.Option(
        "--key-file",
        envvar="WARDEN_KEY_FILE",
        help="HMAC master secret (IKM) file, hex, mode 0600 (default: <data-dir>/ikm.key; "
        "created on first start).",
    ),
]


def _fail(exc: WardenError, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {escape(exc.message)}")
    return typer.Exit(code)
