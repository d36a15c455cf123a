"""``warden verify`` and ``warden export``: the audit chains, checked and written offline.

Plain command functions (:func:`verify_cmd`, :func:`export_cmd`) that ``warden.cli``
registers, plus :func:`verify_chains`, the check ``warden replay agentdojo --verify``
runs too. Both commands take ``--json`` (shapes: ``warden/schemas/cli/verify.json`` and
``export.json``, described in docs/cli-json.md).

Exit codes: 0 verified / written; 1 an integrity failure was found (the JSON document
says ``"ok": false`` and names the first bad record); 2 bad input or configuration
(missing database or key file; a message on stderr and nothing on stdout).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from warden.cli_options import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE_FOUND,
    DataDir,
    DbUrl,
    KeyFile,
    _fail,
    console,
    err_console,
    existing_database_url,
    shown_url,
)
from warden.cli_output import print_json, print_line, print_table, table
from warden.errors import ConfigError, IntegrityError, WardenError

if TYPE_CHECKING:  # the log's auditor (cryptography) loads when a check runs
    from warden.tlog.audit import LogProblem

AsJson = Annotated[
    bool, typer.Option("--json", help="Print one JSON document (docs/cli-json.md) on stdout.")
]
#: Sessions listed with their chain head in the human output (--json lists them all).
HEADS_SHOWN = 20


def _failure(exc: IntegrityError) -> dict[str, Any]:
    """The ``failure`` object of a JSON document: the first bad record and why."""
    return {
        "reason": exc.integrity_reason.value,
        "message": exc.message,
        "session_id": exc.session_id,
        "seq": exc.seq,
    }


@dataclass(frozen=True)
class ChainCheck:
    """The outcome of :func:`verify_chains`: ``document`` is verify.json's shape."""

    document: dict[str, Any]

    @property
    def ok(self) -> bool:
        return bool(self.document["ok"])


def _trusted_public_keys(
    path: Path | None, data_dir: Path, no_signatures: bool
) -> dict[str, Any] | None:
    """The public keys ACS-Crypto responses are checked with (issue 21): ``path`` (a JWKS
    such as ``/.well-known/jwks.json`` or ``GET /v1/keys`` saved, a PEM, or a directory),
    else the data directory's ML-DSA key when it has one (and signatures are checked)."""
    from warden.kla.keys import KeyRegistry

    if path is not None:
        published = _published_jwks(path)
        if published is not None:
            return published
        registry = KeyRegistry.load(path)
        return {kid: registry.get_key(kid) for kid in registry}
    mldsa_file = data_dir / "mldsa.key"
    if no_signatures or not mldsa_file.exists():
        return None
    from warden.crypto.asymmetric import load_mldsa_key

    signer = load_mldsa_key(mldsa_file)
    return {signer.kid: signer.public_key}


def _published_jwks(path: Path) -> dict[str, Any] | None:
    """The keys of a JWKS file as Warden serves it, or None for anything else (a PEM, a
    directory: :meth:`KeyRegistry.load` reads those). Accepts ``GET /v1/keys`` saved
    whole — the ``{"data": {"keys": [...]}}`` envelope is unwrapped — and
    ``/.well-known/jwks.json``, whose AdCP keys (those with ``adcp_use``: the governance
    token and webhook keys) sign no ACS response and are skipped (decision 622).
    Raises :class:`~warden.errors.ConfigError` as :meth:`KeyRegistry.load` does."""
    from warden.crypto.canonical import parse_strict_json
    from warden.kla.keys import public_key_from_jwk

    if not path.is_file():
        return None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if data.lstrip().startswith(b"-----BEGIN"):
        return None
    try:
        doc = parse_strict_json(data)
    except WardenError as exc:
        raise ConfigError(f"{path} is not strict JSON: {exc.message}") from exc
    if isinstance(doc, dict) and "keys" not in doc and isinstance(doc.get("data"), dict):
        doc = doc["data"]  # GET /v1/keys saved with its /v1 envelope
    keys = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(keys, list):
        raise ConfigError(
            f'{path} is not a JWKS (expected {{"keys": [...]}}, or GET /v1/keys\'s '
            '{"data": {"keys": [...]}})'
        )
    out: dict[str, Any] = {}
    for i, jwk in enumerate(keys):
        if isinstance(jwk, dict) and "adcp_use" in jwk:
            continue
        kid, key = public_key_from_jwk(jwk, f"{path} keys[{i}]")
        if kid in out:
            raise ConfigError(f"key registry {path} names kid {kid!r} twice")
        out[kid] = key
    if not out:
        raise ConfigError(f"{path} holds no Warden signing key (Ed25519 or ML-DSA-65)")
    return out


def verify_chains(
    file: Path | None,
    *,
    data_dir: Path,
    database_url: str | None,
    key_file: Path | None,
    no_signatures: bool,
    checkpoint: Path | None = None,
    log_key: str | None = None,
    check_log: bool = True,
    public_keys: Path | None = None,
) -> ChainCheck:
    """Re-walk an export (``file``) or every chain in the database.

    Returns the verify.json document, ``ok`` false with ``failure`` at the first broken
    record (ACS §8.2, §8.6). Then (``check_log``) the transparency log: every leaf, no
    index gap, every stored checkpoint reproduced, and ``checkpoint`` (a signed note a
    client or witness kept) proven a prefix of the log (:mod:`warden.tlog.audit`); its
    key is ``log_key`` (vkey or file), else the data directory's checkpoint key. Raises
    :class:`WardenError` (not an integrity failure) for a missing or unreadable key
    file, database, export or kept checkpoint.
    """
    from warden.crypto.keystore import load_ikm
    from warden.ledger.verify import read_jsonl, verify_records
    from warden.tlog.audit import LogProblem

    ikm = None if no_signatures else load_ikm(key_file or data_dir / "ikm.key")
    trusted_keys = _trusted_public_keys(public_keys, data_dir, no_signatures)
    trusted = _read_kept(checkpoint)
    verifier = _log_verifier(log_key, data_dir) if check_log else None
    store = None
    exported: list[dict[str, Any]] | None = None
    if file is not None:
        # Read lazily, as before (a bad line is an integrity failure at its place); the
        # log record is kept aside for the log check after the chains.
        exported = []
        records: Any = _chain_records(_export_records(file, read_jsonl(file)), exported)
        source = str(file)
    else:
        from warden.store import open_store

        url = existing_database_url(data_dir, database_url)
        store = open_store(url, migrate=False)
        records = store.iter_records()
        source = shown_url(url) if database_url else str(data_dir / "warden.db")
    doc: dict[str, Any] = {"ok": False, "source": source, "signatures": ikm is not None}
    try:
        report = verify_records(
            records, ikm=ikm, require_manifest=file is not None, public_keys=trusted_keys
        )
        if store is not None:
            # Close the walk first: a generator suspended mid-session holds an open read
            # snapshot, and the final WAL checkpoint would wait out the busy timeout.
            records.close()
        log_doc = None
        if check_log:
            log_doc = _check_log(store, exported, verifier, trusted)
    except IntegrityError as exc:
        return ChainCheck(doc | {"failure": _failure(exc)})
    except LogProblem as exc:
        return ChainCheck(doc | {"failure": _log_failure(exc)})
    finally:
        if store is not None:
            records.close()
            store.close()
    result = doc | {
        "ok": True,
        "sessions": report.sessions,
        "entries": report.entries,
        "signatures_checked": report.signatures_checked,
        "heads": dict(report.heads),
    }
    if log_doc is not None:
        result["log"] = log_doc
    return ChainCheck(result)


class NotAnExport(ConfigError):
    """A file given as an audit export that is none (exit 2, decision 915)."""


#: What the first record of an audit export can be (a truncated export may start anywhere).
_EXPORT_KINDS = frozenset({"session", "entry", "head", "log", "manifest"})


def _export_records(path: Path, records: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """``records`` once its first one shows ``path`` is an audit export at all: a file
    whose first line is not a JSON object naming an export record's kind, or that holds
    no record, is unusable input (:class:`ConfigError`, exit 2), not a finding; a bad line
    after that is a finding at its place (decision 915)."""
    try:
        first = next(records, None)
    except IntegrityError as exc:
        raise NotAnExport(f"{path} is not a Warden audit export: {exc.message}") from exc
    if first is None:
        raise NotAnExport(f"{path} is not a Warden audit export: it holds no record")
    if first.get("kind") not in _EXPORT_KINDS:
        raise NotAnExport(
            f"{path} is not a Warden audit export: its first record "
            + (f"has kind {first['kind']!r:.40}" if "kind" in first else "has no kind")
            + " (an export's records are session, entry, head, log "
            "and manifest records, as `warden export` writes them)"
        )
    return itertools.chain((first,), records)


def _chain_records(
    records: Iterable[dict[str, Any]], seen: list[dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    """``records`` without the transparency log's record; every record is also kept in
    ``seen`` for the log check."""
    for rec in records:
        seen.append(rec)
        if rec.get("kind") != "log":
            yield rec


def _read_kept(checkpoint: Path | None) -> str | None:
    if checkpoint is None:
        return None
    from warden.tlog.note import NoteError, parse_checkpoint, parse_note

    try:
        text = checkpoint.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the kept checkpoint {checkpoint}: {exc}") from exc
    try:  # its form only: whether its signature verifies is a finding (log_signature)
        parse_checkpoint(parse_note(text).text)
    except NoteError as exc:
        raise ConfigError(
            f"--checkpoint {checkpoint}: not a signed checkpoint (a C2SP signed note, as "
            f"GET /v1/log/checkpoint serves it): {exc}"
        ) from exc
    return text


def _log_verifier(log_key: str | None, data_dir: Path) -> Any:
    """The checkpoint key: ``--log-key``, else the data directory's checkpoint.key (None
    when neither is there: roots are still compared, signatures are not)."""
    from warden.cli_log import read_log_key
    from warden.tlog.keys import load_checkpoint_signer
    from warden.tlog.note import NoteVerifier

    if log_key is not None:
        return read_log_key(log_key)
    path = data_dir / "checkpoint.key"
    if not path.exists():
        return None
    signer = load_checkpoint_signer(path, os.environ.get("WARDEN_LOG_ORIGIN"), create=False)
    return NoteVerifier(signer.name, signer.public)


def _check_log(
    store: Any, exported: list[dict[str, Any]] | None, verifier: Any, trusted: str | None
) -> dict[str, Any] | None:
    """The log part of verify.json (see :func:`verify_chains`); LogProblem at a fault."""
    from warden.store import tlog_sql
    from warden.tlog.audit import LogProblem, check_log
    from warden.tlog.export import check_export_log

    if exported is not None:
        if not any(r.get("kind") == "log" for r in exported):
            if trusted is not None:
                raise LogProblem("log_missing", "the export carries no log record to check against")
            return None  # an export written before the log existed (issue 17)
        report = check_export_log(exported, verifier=verifier, trusted=trusted)
    else:
        engine = store.engine
        # The counter is read before the leaves: a Warden still running only adds leaves
        # after it, so fewer leaves than it said means some were deleted (PostgreSQL keeps
        # a counter; SQLite numbers from the largest index: decision 362).
        expected = tlog_sql.next_index(engine) if engine.dialect.name == "postgresql" else None
        report = check_log(
            tlog_sql.iter_leaf_pages(engine),
            [c.note for c in tlog_sql.all_checkpoints(engine)],
            verifier=verifier,
            trusted=trusted,
            unindexed=len(tlog_sql.unindexed_entries(engine)),
            paged=True,
        )
        if expected is not None and report.leaves < expected:
            raise LogProblem(
                "log_truncated",
                f"the log's counter says {expected} leaves were appended, {report.leaves} "
                "are stored: the newest leaves were deleted",
                report.leaves,
            )
        from warden.tlog.state import check_state

        state_rows = check_state(engine)
        return report.as_dict() | {
            "checkpoint_signatures": verifier is not None,
            "state_rows": state_rows,
        }
    return report.as_dict() | {"checkpoint_signatures": verifier is not None}


def _export_log(store: Any, data_dir: Path, session: str | None) -> Any:
    """The export's log record maker: it signs a checkpoint of the whole log first when
    the data directory's checkpoint key is there (so the export is covered to its end);
    a database whose leaves contradict its checkpoints is refused (IntegrityError)."""
    from warden.errors import IntegrityReason
    from warden.tlog.export import log_record
    from warden.tlog.keys import load_checkpoint_signer
    from warden.tlog.service import LogForked, TransparencyLog

    def make() -> dict[str, Any] | None:
        path = data_dir / "checkpoint.key"
        if path.exists():
            signer = load_checkpoint_signer(path, os.environ.get("WARDEN_LOG_ORIGIN"), create=False)
            try:
                TransparencyLog(store.engine, signer).checkpoint()
            except LogForked as exc:
                raise IntegrityError(
                    f"transparency log: {exc}", reason=IntegrityReason.CHAIN_MISMATCH
                ) from exc
        return log_record(store.engine, session)

    return make


def _log_failure(exc: LogProblem) -> dict[str, Any]:
    failure: dict[str, Any] = {
        "reason": exc.reason,
        "message": exc.message,
        "session_id": None,
        "seq": None,
        "log_index": exc.index,
    }
    if exc.details is not None:
        failure["rows"] = exc.details  # state_mismatch: every row that disagrees
    return failure


def print_check(check: ChainCheck) -> None:
    """The human form of a :class:`ChainCheck`: the OK line and a table of heads on
    stdout, or the FAILED line on stderr."""
    doc = check.document
    if not check.ok:
        failure = doc["failure"]
        print_line(
            err_console, f"[red]FAILED[/red] {failure['reason']}: {escape(failure['message'])}"
        )
        for row in failure.get("rows", [])[1:]:
            print_line(err_console, f"  {escape(row['message'])}")
        return
    print_line(
        console,
        f"[green]OK[/green] {escape(doc['source'])}: {doc['sessions']} sessions, "
        f"{doc['entries']} entries, {doc['signatures_checked']} signatures checked"
        + ("" if doc["signatures"] else " (signatures not checked: --no-signatures)"),
    )
    log = doc.get("log")
    if log is not None:
        print_line(
            console,
            f"[green]OK[/green] transparency log: {log['leaves']} leaves, "
            f"{log['checkpoints_checked']} checkpoint(s) reproduced"
            + (f" (newest {log['latest_checkpoint']})" if log["latest_checkpoint"] else "")
            + (
                f", extends the kept checkpoint of {log['trusted_checkpoint']}"
                if log["trusted_checkpoint"] is not None
                else ""
            )
            + (
                ""
                if log["checkpoint_signatures"]
                else " (no checkpoint key: signatures not checked)"
            ),
        )
        _warn_uncovered(log)
        state = log.get("state_rows")
        if state is not None:
            print_line(
                console,
                f"[green]OK[/green] state rebuilt from the log: {sum(state.values())} rows "
                "agree (" + ", ".join(f"{t} {n}" for t, n in state.items() if n) + ")",
            )
    heads: dict[str, str] = doc["heads"]
    if not heads:
        return
    t = table("session", "chain head")
    for sid, head in list(heads.items())[:HEADS_SHOWN]:
        t.add_row(escape(sid), escape(head))
    print_table(console, t)
    if len(heads) > HEADS_SHOWN:
        print_line(console, f"… and {len(heads) - HEADS_SHOWN} more sessions (--json lists all)")


def verify_cmd(
    file: Annotated[
        Path | None,
        typer.Argument(help="A JSONL export to verify; default: every chain in the database."),
    ] = None,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
    no_signatures: Annotated[
        bool, typer.Option("--no-signatures", help="Check hashes and links only (no key needed).")
    ] = False,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            help="A signed checkpoint you kept: prove the log still extends it (rollback, "
            "truncation)."
        ),
    ] = None,
    log_key: Annotated[
        str | None,
        typer.Option(
            help="The log's checkpoint vkey (text or file); default: <data-dir>/checkpoint.key."
        ),
    ] = None,
    public_keys: Annotated[
        Path | None,
        typer.Option(
            "--public-keys",
            help="Warden's published keys (/.well-known/jwks.json or GET /v1/keys saved as a "
            "file, envelope and all): check ACS-Crypto "
            "responses with them (default: <data-dir>/mldsa.key). Works with --no-signatures.",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Re-walk every audit chain offline (entry hashes, links, signed heads, signatures),
    then the transparency log (every leaf, no index gap, the checkpoints, --checkpoint)."""
    try:
        check = verify_chains(
            file,
            data_dir=data_dir,
            database_url=database_url,
            key_file=key_file,
            no_signatures=no_signatures,
            checkpoint=checkpoint,
            log_key=log_key,
            public_keys=public_keys,
        )
    except WardenError as exc:
        raise _fail(exc) from exc
    if as_json:
        print_json(check.document)
    else:
        print_check(check)
    if not check.ok:
        raise typer.Exit(EXIT_FAILURE_FOUND)


def _stored_session(store: Any, session: str) -> str:
    """The stored id ``session`` names: itself, or (decision 1036) for a UUID the one
    stored session that is the same UUID in another case. Exit 1 when there is none (as
    for `agents show`, docs/cli-json.md: an export of no session would verify as a valid
    one), exit 2 when two stored sessions spell it differently; nothing written."""
    from warden.ids import uuid_key
    from warden.store.activity_sql import sessions_spelled

    if store.load_session(session) is not None:
        return session
    key = uuid_key(session)
    found = sessions_spelled(store, key) if key is not None else []
    if len(found) == 1:
        return found[0]
    store.close()
    if found:
        print_line(
            err_console,
            f"[red]error:[/red] session {escape(repr(session))} is stored in several spellings "
            f"({escape(', '.join(found))}); give one of them exactly",
        )
        raise typer.Exit(EXIT_BAD_INPUT)
    print_line(err_console, f"[red]error:[/red] no session {escape(repr(session))} in the database")
    raise typer.Exit(EXIT_FAILURE_FOUND)


class _WriteFailed(Exception):
    """Writing the export failed (a full disk, a closed pipe): its ``strerror``."""

    def __init__(self, strerror: str | None) -> None:
        super().__init__(strerror)
        self.strerror = strerror or "write failed"


def _write(fh: Any, text: str | None) -> None:
    """Write ``text`` to ``fh`` (flush it when ``None``); an ``OSError`` is a
    :class:`_WriteFailed`, told apart from the store's errors."""
    try:
        if text is None:
            fh.flush()
        else:
            fh.write(text)
    except OSError as exc:
        raise _WriteFailed(exc.strerror) from exc


def _drop_partial(fh: Any, out: Path | None) -> None:
    """After a failed write, close ``out`` and remove it when it is a regular file (a
    partial export is not kept, as an unwritable path leaves none); a device such as
    /dev/full is left alone."""
    if out is None:
        return
    with contextlib.suppress(OSError):
        fh.close()
    with contextlib.suppress(OSError):
        if out.is_file():
            out.unlink()


def export_cmd(
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Write JSONL here (default: standard output)."),
    ] = None,
    session: Annotated[
        str | None,
        typer.Option(help="Only this session id (a UUID in any case)."),
    ] = None,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
    key_id: Annotated[
        str, typer.Option(envvar="WARDEN_KEY_ID", help="key_id put on the manifest signature.")
    ] = "warden",
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print a JSON summary (docs/cli-json.md) on stdout; needs --out."
        ),
    ] = False,
) -> None:
    """Write audit chains as JSONL: per session its record, entries and signed head;
    last, a signed manifest of every exported session's head."""
    from warden.crypto.keystore import load_ikm
    from warden.ledger.export import export_records
    from warden.store import open_store

    if session is not None and not session.strip():
        # No session has an empty id: "no session in the database" (exit 1) misled.
        print_line(err_console, f"[red]error:[/red] --session is empty ({escape(repr(session))})")
        raise typer.Exit(EXIT_BAD_INPUT)
    if as_json and out is None:
        # stdout carries the export itself; a summary there would corrupt it.
        err_console.print("[red]error:[/red] --json needs --out (stdout carries the export)")
        raise typer.Exit(EXIT_BAD_INPUT)
    try:
        ikm = load_ikm(key_file or data_dir / "ikm.key")
        store = open_store(existing_database_url(data_dir, database_url), migrate=False)
    except WardenError as exc:
        raise _fail(exc) from exc
    if session is not None:
        session = _stored_session(store, session)
    try:
        fh = out.open("w", encoding="utf-8") if out else sys.stdout
    except OSError as exc:
        store.close()
        print_line(
            err_console,
            f"[red]error:[/red] cannot write {escape(str(out))}: {escape(str(exc.strerror))}",
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    counts = {"records": 0, "sessions": 0}
    try:
        log_record = _export_log(store, data_dir, session)
        for rec in export_records(
            store, ikm, key_id=key_id, session_id=session, log_record=log_record
        ):
            _write(fh, json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
            counts["records"] += 1
            counts["sessions"] += rec["kind"] == "session"
        if out:
            _write(fh, None)  # a buffered write's failure (a full disk) shows at the flush
    except _WriteFailed as exc:
        _drop_partial(fh, out)
        where = escape(str(out)) if out else "standard output"
        print_line(
            err_console, f"[red]error:[/red] cannot write {where}: {escape(str(exc.strerror))}"
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    except IntegrityError as exc:
        if as_json:
            print_json({"ok": False, "out": str(out), "failure": _failure(exc)})
        else:
            print_line(err_console, f"[red]FAILED[/red] {exc.reason}: {escape(exc.message)}")
        raise typer.Exit(EXIT_FAILURE_FOUND) from exc
    except WardenError as exc:
        raise _fail(exc) from exc
    finally:
        store.close()
        if out:
            fh.close()
    if as_json:
        print_json({"ok": True, "out": str(out), **counts})
    elif out:
        print_line(err_console, f"wrote {counts['records']} records to {escape(str(out))}")


def _warn_uncovered(log: dict[str, Any]) -> None:
    """Say on stderr which leaves no signed checkpoint covers: their history rests on the
    database alone (a kept checkpoint or a witness is what proves it was not rewritten)."""
    if log["trusted_checkpoint"] is not None or not log["leaves"]:
        return
    covered = log["latest_checkpoint"] or 0
    if covered >= log["leaves"]:
        return
    what = (
        "no stored checkpoint covers the log"
        if not log["checkpoints_checked"]
        else f"the newest {log['leaves'] - covered} leaves are under no stored checkpoint yet"
    )
    print_line(
        err_console,
        f"[yellow]warning:[/yellow] {what}: an edit there with its checkpoints deleted cannot "
        "be told from history; verify against a checkpoint kept elsewhere (--checkpoint FILE) "
        "or a witness's",
    )
