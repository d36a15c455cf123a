"""Options, consoles and exit codes shared by every ``warden`` command module."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from warden.cli_help import HELP_SETTINGS as HELP_SETTINGS
from warden.errors import ConfigError, WardenError

# soft_wrap: Rich never inserts line breaks of its own (decision 200), so a message is one
# line at any width, whether stdout is a terminal or a pipe; tables still fit the width.
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

EXIT_FAILURE_FOUND = 1
EXIT_BAD_INPUT = 2


def checked_data_dir(ctx: typer.Context, value: Path | None) -> Path | None:
    """The ``--data-dir`` callback of every command: a path that is a file or cannot be
    created is the one-line ``error: …`` and exit 2 before the command runs (decision
    1190; :mod:`warden.data_dir`)."""
    if value is None or ctx.resilient_parsing:
        return value
    from warden.data_dir import check_data_dir

    try:
        check_data_dir(value)
    except ConfigError as exc:
        raise _fail(exc) from exc
    return value


DataDir = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        envvar="WARDEN_DATA_DIR",
        help="Folder for the default database and key file.",
        callback=checked_data_dir,
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


def shown_url(url: str) -> str:
    """``url`` fit to print: any password is masked."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL is reported by open_store
        return "<unparsable database URL>"


def existing_database_url(data_dir: Path, database_url: str | None) -> str:
    """The database URL a command that reads an existing store opens: ``database_url``, or
    the SQLite file in ``data_dir``. Raises :class:`ConfigError` when that file is absent
    (``warden serve`` or ``warden db upgrade`` creates it)."""
    url = database_url or f"sqlite:///{data_dir / 'warden.db'}"
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).exists():
        raise ConfigError(
            f"no database at {url} (run `warden serve` or `warden db upgrade` once to create it)"
        )
    return url


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
