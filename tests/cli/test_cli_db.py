"""``warden db upgrade | current`` on both backends (the real ``warden`` CLI app)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from warden.cli import app
from warden.store.sql import current_revision, head_revision


def run(*args: str) -> Result:
    return CliRunner().invoke(app, ["db", *args], env={"COLUMNS": "200"})


def test_upgrade_creates_the_schema_and_current_reports_it(
    database_url: str, tmp_path: Path
) -> None:
    dd = ["--data-dir", str(tmp_path / "d"), "--database-url", database_url]
    if database_url.startswith("postgresql"):
        before = run("current", *dd)
        assert before.exit_code == 0, before.output
        assert "database: none (empty)" in before.stdout
    up = run("upgrade", *dd)
    assert up.exit_code == 0, up.output
    assert f"schema at revision {head_revision()} (created)" in up.stdout
    assert current_revision(database_url) == head_revision()
    after = run("current", *dd)
    assert after.exit_code == 0, after.output
    assert f"database: {head_revision()}" in after.stdout
    again = run("upgrade", *dd)  # idempotent
    assert again.exit_code == 0, again.output
    assert f"schema at revision {head_revision()} (was {head_revision()})" in again.stdout


def test_db_json(database_url: str, tmp_path: Path) -> None:
    from warden.cli_options import shown_url

    dd = ["--data-dir", str(tmp_path / "d"), "--database-url", database_url]
    shown = shown_url(database_url)
    up = run("upgrade", *dd, "--json")
    assert up.exit_code == 0, up.output
    assert json.loads(up.stdout) == {
        "database_url": shown,
        "previous": None,
        "revision": head_revision(),
    }
    now = run("current", *dd, "--json")
    assert now.exit_code == 0, now.output
    assert json.loads(now.stdout) == {
        "database_url": shown,
        "revision": head_revision(),
        "head": head_revision(),
        "up_to_date": True,
    }
    missing = run("current", "--data-dir", str(tmp_path / "none"), "--json")
    assert missing.exit_code == 2 and missing.stdout == ""
    again = run("upgrade", *dd, "--json")
    assert json.loads(again.stdout)["previous"] == head_revision()


def test_upgrade_json_names_the_revision_it_migrated_from(tmp_path: Path) -> None:
    from alembic import command
    from sqlalchemy import create_engine

    from warden.store.sql import _alembic_config

    path = tmp_path / "d" / "warden.db"
    path.parent.mkdir()
    engine = create_engine(f"sqlite:///{path}")
    cfg = _alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0013")
    engine.dispose()
    up = run("upgrade", "--data-dir", str(path.parent), "--json")
    assert up.exit_code == 0, up.output
    assert json.loads(up.stdout)["previous"] == "0013"
    assert json.loads(up.stdout)["revision"] == head_revision() != "0013"


def test_version_json() -> None:
    from warden import __version__

    result = CliRunner().invoke(app, ["version", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"version": __version__}


def test_the_default_sqlite_file_is_created_private(tmp_path: Path) -> None:
    data = tmp_path / "d"
    missing = run("current", "--data-dir", str(data))
    assert missing.exit_code == 2
    assert "no database at" in missing.output and "warden db upgrade" in missing.output
    assert run("upgrade", "--data-dir", str(data)).exit_code == 0
    assert stat.S_IMODE((data / "warden.db").stat().st_mode) == 0o600


def test_bad_urls_are_refused_with_a_clear_message(tmp_path: Path) -> None:
    dd = ["--data-dir", str(tmp_path / "d")]
    mysql = run("upgrade", *dd, "--database-url", "mysql://root@127.0.0.1/test")
    assert mysql.exit_code == 2
    assert "'mysql' is not supported" in mysql.output
    # Nothing listens on port 1; the password never appears in the message.
    down = run("upgrade", *dd, "--database-url", "postgresql://u:s3cret@127.0.0.1:1/x")
    assert down.exit_code == 2
    assert "cannot connect to the database" in down.output and "damaged" not in down.output
    assert "s3cret" not in down.output
    assert "Traceback" not in down.output


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://u:Tr0ub@S3cretPw@127.0.0.1:5432/x", "percent-encode"),
        # '@' then '/' in the password: the host ends early, the rest reads as a database.
        ("postgresql://u:Tr0ub@S3cretPw/z@127.0.0.1:5432/x", "percent-encode"),
        ("postgresql://u:p@127.0.0.1:abc/x", "invalid database URL"),
        ("postgresql://u:S3cretPw@127.0.0.1:5432", "names no database"),
        ("postgresql://", "names no database"),
    ],
)
def test_malformed_urls_never_echo_the_password(tmp_path: Path, url: str, says: str) -> None:
    for command in ("upgrade", "current"):
        got = run(command, "--data-dir", str(tmp_path / "d"), "--database-url", url)
        assert got.exit_code == 2, got.output
        assert says in got.output
        assert "S3cretPw" not in got.output and "Traceback" not in got.output


def test_a_locked_database_is_called_locked_not_unreachable(tmp_path: Path) -> None:
    """Another process holding the write lock (``BEGIN IMMEDIATE``) past the lock timeout:
    before, "cannot connect to the database … (OperationalError: database is locked)"."""
    import sqlite3

    from warden.errors import StoreUnavailable
    from warden.store import open_store

    path = tmp_path / "warden.db"
    url = f"sqlite:///{path}"
    open_store(url).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable) as caught:
            open_store(url, migrate=False, lock_timeout_ms=200).close()
    finally:
        holder.close()
    message = str(caught.value)
    assert message.startswith(f"the database {url} is locked by another process"), message
    assert "cannot connect" not in message
    open_store(url, migrate=False).close()  # released: it opens again
