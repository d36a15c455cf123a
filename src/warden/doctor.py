"""``warden doctor``'s checks of a deployment (issue 18 item 5), read-only.

:func:`run_checks` returns one :class:`Check` per aspect: the data directory, key files
(exist, mode 0600, load as ``serve`` loads them),
the database (reachable, schema at this Warden's revision), the policy bundle, the
budgets and webhooks files (the webhooks' destinations under their allow-list), TLS
files, the clock against the database server's, and whether this install runs the
decision path compiled (``native``: :mod:`warden.native`). Each check is ``ok``, ``warn``,
``fail`` or ``skip`` (not applicable or not configured: never counted as passed).
Nothing is created or changed: a key file that ``serve`` would generate is a ``warn``
(a ``fail`` when ``serve`` could not create it), one that exists is read with the loader
``serve`` uses, a missing SQLite database is a ``warn``, and the database is opened
without migrating. The data directory gets the check every command makes of
``--data-dir`` (:mod:`warden.data_dir`; to tell whether an absent one can be created it
makes and removes one empty directory beside it).
"""

from __future__ import annotations

import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from warden.settings import Settings

Status = Literal["ok", "warn", "fail", "skip"]

#: Clock skew against the database server (s): above WARN a warning, above FAIL a failure.
SKEW_WARN_S = 1.0
SKEW_FAIL_S = 30.0


@dataclass(frozen=True)
class Check:
    """One check's outcome: ``name`` (e.g. ``key:ikm``), ``status``, a one-line message."""

    name: str
    status: Status
    message: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "message": self.message}


def _key_file(
    name: str, path: Path, load: Callable[[Path], object] | None, *, created_on_start: bool
) -> Check:
    """A key file: absent, a ``warn`` when ``serve`` would create it (and could: its
    folder is writable or can be made), else a ``fail``; present, loaded with ``load``,
    the loader ``serve`` uses (decision 1192), its ConfigError message being the ``fail``.
    ``load`` None (the TLS key, loaded with its certificate by the ``tls`` check) checks
    the file's type and mode only."""
    from warden.errors import WardenError

    try:
        st = path.stat()
    except FileNotFoundError:
        if not created_on_start:
            return Check(name, "fail", f"{path} does not exist")
        why = _cannot_create_in(path.parent)
        if why is not None:
            return Check(name, "fail", f"{path} does not exist and serve cannot create it: {why}")
        return Check(name, "warn", f"{path} does not exist yet (serve creates it, mode 0600)")
    except OSError as exc:
        return Check(name, "fail", f"{path} cannot be read: {exc.strerror or exc}")
    if not stat.S_ISREG(st.st_mode):
        return Check(name, "fail", f"{path} is not a regular file")
    mode = st.st_mode & 0o777
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return Check(
            name, "fail", f"{path} is accessible by group/others (mode {oct(mode)}); chmod 600 it"
        )
    if st.st_size == 0:
        return Check(name, "fail", f"{path} is empty")
    if load is not None:
        try:
            load(path)
        except WardenError as exc:
            return Check(name, "fail", exc.message)
        return Check(name, "ok", f"{path} loads (mode {oct(mode)})")
    return Check(name, "ok", f"{path} (mode {oct(mode)})")


def _cannot_create_in(folder: Path) -> str | None:
    """Why ``serve`` could not write a new file into ``folder`` (which it makes if absent),
    or None: :func:`warden.data_dir.creatable_problem` for an absent folder."""
    import os

    from warden.data_dir import creatable_problem

    if folder.is_dir():
        return None if os.access(folder, os.W_OK | os.X_OK) else f"{folder} is not writable"
    return creatable_problem(folder)


def check_data_dir(s: Settings) -> Check:
    """The data directory, with the check every command makes of ``--data-dir``
    (:func:`warden.data_dir.data_dir_problem`): ``fail`` where ``serve`` would refuse it,
    ``warn`` while it does not exist yet (``serve`` creates it)."""
    from warden.data_dir import data_dir_problem

    why = data_dir_problem(s.data_dir)
    if why is not None:
        return Check("data_dir", "fail", why)
    if not s.data_dir.is_dir():
        return Check("data_dir", "warn", f"{s.data_dir} does not exist yet (serve creates it)")
    return Check("data_dir", "ok", f"{s.data_dir} is a directory")


def check_keys(s: Settings) -> list[Check]:
    """The secret files: HMAC master secret, admin token, signing keys (responses,
    governance, ML-DSA, the log's checkpoints, RFC 9421 requests), the TLS key. Each one
    there is read with ``serve``'s loader (never created or rewritten)."""
    from warden.adcp.governance_token import GOVERNANCE_KEY_FILENAME, load_governance_signer
    from warden.adcp.webhook_signing import load_webhook_signer
    from warden.crypto.asymmetric import load_mldsa_key
    from warden.crypto.ed25519_keys import load_signing_key
    from warden.crypto.keystore import load_api_token, load_ikm
    from warden.tlog.keys import load_checkpoint_signer

    def governance(path: Path) -> object:
        return load_governance_signer(s.data_dir, s.resolved_public_url(), path, create=False)

    def checkpoint(path: Path) -> object:
        return load_checkpoint_signer(path, s.log_origin, create=False)

    def request_signing(path: Path) -> object:
        return load_webhook_signer(s.data_dir, path, create=False)

    out = [
        _key_file("key:ikm", s.resolved_key_file(), load_ikm, created_on_start=True),
        _key_file(
            "key:api_token", s.resolved_api_token_file(), load_api_token, created_on_start=True
        ),
        _key_file(
            "key:signing", s.resolved_signing_key_file(), load_signing_key, created_on_start=True
        ),
        _key_file(
            "key:governance",
            s.data_dir / GOVERNANCE_KEY_FILENAME,
            governance,
            created_on_start=True,
        ),
        _key_file("key:mldsa", s.resolved_mldsa_key_file(), load_mldsa_key, created_on_start=True),
        _key_file(
            "key:checkpoint", s.resolved_checkpoint_key_file(), checkpoint, created_on_start=True
        ),
        _key_file(
            "key:request_signing",
            s.resolved_webhook_signing_key_file(),
            request_signing,
            created_on_start=True,
        ),
    ]
    if s.tls_key is not None:
        out.append(_key_file("key:tls", s.tls_key, None, created_on_start=False))
    return out


def check_database(s: Settings) -> tuple[Check, Check]:
    """Reachability and schema revision; then the clock against the database's (PostgreSQL
    ``now()``; SQLite: ``skip``, it has no clock of its own)."""
    from sqlalchemy.engine import make_url

    from warden.cli_options import shown_url
    from warden.errors import WardenError
    from warden.store.sql import head_revision, parse_database_url

    url = s.resolved_database_url()
    shown = shown_url(url)
    try:
        parsed = parse_database_url(url)
    except WardenError as exc:
        return Check("database", "fail", exc.message), _skew_skip("no usable database URL")
    if parsed.get_backend_name() == "sqlite":
        db = make_url(url).database or ""
        if db and db != ":memory:" and not Path(db).exists():
            why = _cannot_create_in(Path(db).parent)
            return (
                Check("database", "warn", f"{shown}: no database yet (serve creates it)")
                if why is None
                else Check(
                    "database", "fail", f"{shown}: no database, and serve cannot create it: {why}"
                ),
                _skew_skip("not applicable: SQLite runs on this host's clock"),
            )
    try:
        revision, skew = _read_database(url)
    except Exception as exc:  # noqa: BLE001 - any failure to read is "unreachable"
        detail = getattr(exc, "orig", None) or exc
        text = " ".join(str(detail).split())[:300]
        return (
            Check("database", "fail", f"{shown}: cannot be reached or read: {text}"),
            _skew_skip("database unreachable"),
        )
    head = head_revision()
    if revision is None:
        db_check = Check(
            "database", "warn", f"{shown}: reachable, no schema yet (serve or `warden db upgrade`)"
        )
    elif revision != head:
        db_check = Check(
            "database",
            "fail",
            f"{shown}: schema at revision {revision}, this Warden needs {head} "
            "(run `warden db upgrade`; a newer schema needs a newer Warden)",
        )
    else:
        db_check = Check("database", "ok", f"{shown}: reachable, schema at revision {head}")
    if skew is None:
        return db_check, _skew_skip("not applicable: SQLite runs on this host's clock")
    if abs(skew) > SKEW_FAIL_S:
        status: Status = "fail"
    elif abs(skew) > SKEW_WARN_S:
        status = "warn"
    else:
        status = "ok"
    return db_check, Check(
        "clock_skew",
        status,
        f"this host's clock is {skew:+.3f} s from the database server's "
        f"(warn above {SKEW_WARN_S:g} s, fail above {SKEW_FAIL_S:g} s)",
    )


def _skew_skip(why: str) -> Check:
    return Check("clock_skew", "skip", why)


def _read_database(url: str) -> tuple[str | None, float | None]:
    """(schema revision, host clock minus database clock in s, or None on SQLite)."""
    from sqlalchemy import text

    from warden.store.sql import _engine_for, parse_database_url, stored_revision

    engine = _engine_for(parse_database_url(url), "FULL")
    try:
        with engine.connect() as conn:
            revision = stored_revision(conn)
            if engine.dialect.name != "postgresql":
                return revision, None
            before = time.time()
            db_now = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
            after = time.time()
            # The server read its clock somewhere in the round trip: compare to its middle.
            local = datetime.fromtimestamp((before + after) / 2, UTC)
            return revision, (local - db_now).total_seconds()
    finally:
        engine.dispose()


def _loads(name: str, path: Path | None, load: Callable[[Path], object], what: str) -> Check:
    from warden.errors import WardenError

    if path is None:
        return Check(name, "skip", f"no {what} configured")
    try:
        load(path)
    except WardenError as exc:
        return Check(name, "fail", exc.message)
    except Exception as exc:  # noqa: BLE001 - any failure to load is a failed check
        return Check(name, "fail", f"{path}: {type(exc).__name__}: {exc}")
    return Check(name, "ok", f"{path} is valid")


def check_files(s: Settings) -> list[Check]:
    """The bundle, budgets, webhooks (destinations resolved under ``allow_networks``) and
    the TLS pair, each loaded as ``serve`` loads it."""
    from warden.approvals.webhooks import load_webhooks
    from warden.cli_serve_options import tls_options
    from warden.policy.bundle import load_bundle
    from warden.spend.config import load_budgets

    out = [
        _loads("bundle", s.resolved_policy(), load_bundle, "bundle"),
        _loads("budgets", s.budgets, load_budgets, "budgets file"),
        _loads("webhooks", s.webhooks, load_webhooks, "webhooks file"),
    ]
    out.append(
        _loads("tls", s.tls_cert, lambda _: tls_options(s), "TLS certificate")
        if s.tls_cert is not None
        else Check("tls", "skip", "no TLS configured (plain HTTP)")
    )
    return out


def check_native(state: str, reason: str = "") -> Check:
    """Whether the decision path runs compiled: ``state`` and ``reason`` are
    :data:`warden.native.state` and :data:`warden.native.reason` (given, so that each
    state can be checked without a build). ``python`` passes, it is a supported install;
    ``stale`` warns, since the modules compiled for speed run as Python until rebuilt."""
    if state == "native":
        return Check(
            "native", "ok", "the decision path runs compiled (mypyc), built from these sources"
        )
    if state == "python":
        return Check(
            "native",
            "ok",
            "no compiled modules: the decision path runs as pure Python (slower); to compile "
            "it, run `pip install -e .` again with a C compiler and without WARDEN_PURE_PYTHON "
            "(README, Two commands)",
        )
    if state == "stale":
        why = reason or "the compiled modules' sources changed since the build"
        return Check(
            "native",
            "warn",
            f"stale build: {why}; the compiled modules run as Python (slower) until you "
            "rebuild them: pip install -e .",
        )
    return Check("native", "warn", f"unknown build state {state!r} (warden.native.state)")


def run_checks(s: Settings) -> list[Check]:
    """Every check, in a fixed order."""
    from warden import native

    db, skew = check_database(s)
    return [
        check_data_dir(s),
        *check_keys(s),
        db,
        *check_files(s),
        skew,
        check_native(native.state, native.reason),
    ]
