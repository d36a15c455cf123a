"""``warden db``: create or upgrade the database schema, and show its revision.

A Typer sub-app (:data:`db_app`) that ``warden.cli`` mounts as ``db``. ``warden serve``
migrates on start too; ``warden db upgrade`` is for deployments that migrate once before
starting several replicas (on PostgreSQL, concurrent upgrades wait on an advisory lock,
so starting replicas together is safe either way).

Exit codes: 0 success, 2 bad input or configuration (unsupported URL, unreachable or
damaged database, a schema newer than this Warden).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from warden.cli_options import (
    HELP_SETTINGS,
    DataDir,
    DbUrl,
    _fail,
    console,
    existing_database_url,
    shown_url,
)
from warden.cli_output import print_json
from warden.errors import WardenError

db_app = typer.Typer(
    **HELP_SETTINGS,
    help="The database schema (Alembic migrations).",
    no_args_is_help=True,
    add_completion=False,
)

AsJson = Annotated[
    bool, typer.Option("--json", help="Print one JSON document (docs/cli-json.md) on stdout.")
]


def _url(data_dir: Path, database_url: str | None) -> str:
    return database_url or f"sqlite:///{data_dir / 'warden.db'}"


def _stored(url: str) -> str | None:
    """The database's revision before an upgrade: None for one that does not exist yet (a
    SQLite file is not created here: ``open_store`` creates it private) or that cannot be
    read (``open_store`` says why)."""
    from sqlalchemy.exc import SQLAlchemyError

    from warden.store.sql import current_revision, parse_database_url

    try:
        parsed = parse_database_url(url)
        if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").exists():
            return None
        return current_revision(url)
    except (SQLAlchemyError, WardenError, ValueError):
        return None


@db_app.command()
def upgrade(
    as_json: AsJson = False, data_dir: DataDir = Path(".warden"), database_url: DbUrl = None
) -> None:
    """Create the schema, or migrate it to this Warden's revision."""
    from warden.store import open_store
    from warden.store.sql import head_revision

    url = _url(data_dir, database_url)
    try:
        previous = _stored(url)
        open_store(url, migrate=True).close()
    except WardenError as exc:
        raise _fail(exc) from exc
    if as_json:
        print_json(
            {"database_url": shown_url(url), "previous": previous, "revision": head_revision()}
        )
        return
    before = "created" if previous is None else f"was {previous}"
    console.print(f"{shown_url(url)}: schema at revision {head_revision()} ({before})")


@db_app.command()
def current(
    as_json: AsJson = False, data_dir: DataDir = Path(".warden"), database_url: DbUrl = None
) -> None:
    """Print the schema revision of the database and the one this Warden writes."""
    from sqlalchemy.exc import SQLAlchemyError

    from warden.store.sql import current_revision, head_revision

    try:
        url = existing_database_url(data_dir, database_url)
        revision = current_revision(url)
    except WardenError as exc:
        raise _fail(exc) from exc
    except SQLAlchemyError as exc:
        detail = getattr(exc, "orig", None) or exc
        raise _fail(WardenError(f"cannot read the database: {detail}")) from exc
    if as_json:
        head = head_revision()
        print_json(
            {
                "database_url": shown_url(url),
                "revision": revision,
                "head": head,
                "up_to_date": revision == head,
            }
        )
        return
    console.print(f"database: {revision or 'none (empty)'}\nthis Warden: {head_revision()}")
