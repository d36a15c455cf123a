"""``warden whatif``: what a candidate bundle would have decided on the recorded history.

Reads the transparency log of a data directory, a database URL or an export file
(:mod:`warden.whatif.reader`), replays each recorded decision through the recorded
bundle (faithfulness) and the candidate (:mod:`warden.whatif.replay`), and prints the
report (:mod:`warden.whatif.report`; ``--json``: ``warden/schemas/cli/whatif.json``;
``--html``: one self-contained page with charts). ``--shadow`` instead summarises the
divergences ``warden serve --shadow-policy`` recorded in the log.

Exit codes: 0 done (and ``--fail-on`` found nothing); 1 ``--fail-on loosen`` found a
loosened decision, ``--fail-on any`` a changed one, or either an unfaithful replay
(without ``--allow-unfaithful``); 2 bad input or configuration (an export that does not
verify, ``--since`` after ``--until``, an unwritable ``--html``, a ``--current`` whose
digest is not the recorded one, options that exclude each other).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from warden.cli_options import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE_FOUND,
    DataDir,
    DbUrl,
    _fail,
    console,
    err_console,
    existing_database_url,
    shown_url,
)
from warden.cli_output import print_json
from warden.errors import ConfigError, WardenError


def _time(value: str | None, what: str) -> Any:
    from warden.whatif.replay import parse_time

    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError as exc:
        raise ConfigError(f"{what} {value!r} is not an RFC 3339 timestamp") from exc


def _writable(path: Path) -> str | None:
    """Why ``path`` cannot be written as a file (None: it can), checked before a replay
    so that a typo costs nothing; the write itself is still checked."""
    if path.is_dir():
        return "it is a directory"
    parent = path.parent
    if not parent.is_dir():
        return f"no directory {parent}"
    if path.exists():
        return None if os.access(path, os.W_OK) else "permission denied"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"cannot create files in {parent}"


def _check_export(export: Path, key_file: Path | None) -> str | None:
    """Refuse an export whose chains or log do not verify, as ``warden verify FILE`` does
    (:func:`warden.cli_ledger.verify_chains`: every entry hash and link, each signed head,
    the closing manifest, the log record's leaves and checkpoints), and one without its
    log record (the leaf indexes and events replay reads). With ``key_file`` the
    signatures are checked too; without it a warning is returned (the chains and log are
    still checked). Raises :class:`WardenError` (exit 2) for what does not verify."""
    from warden.cli_ledger import NotAnExport, verify_chains

    try:
        check = verify_chains(
            export,
            # The checkpoint key beside the IKM, if any; without --key-file no key at all
            # (not the working directory's .warden, which may be another deployment's).
            data_dir=key_file.parent if key_file is not None else Path(os.devnull),
            database_url=None,
            key_file=key_file,
            no_signatures=key_file is None,
        )
    except NotAnExport as exc:
        raise ConfigError(
            f"the export {export} does not verify ({exc.message}): refusing to replay it"
        ) from exc
    doc = check.document
    if not check.ok:
        failure = doc["failure"]
        raise ConfigError(
            f"the export {export} does not verify ({failure['reason']}: {failure['message']}): "
            "refusing to replay it (run `warden verify` on it for details)"
        )
    if "log" not in doc:
        raise ConfigError(
            f"the export {export} carries no transparency-log record (an export written "
            "before the log, or cut short): refusing to replay it"
        )
    if key_file is None:
        return (
            "the export's signatures were not checked (hashes, links, manifest and log "
            "were): pass --key-file to check them"
        )
    return None


def _current_mismatch(doc: dict[str, Any], current: Any, stored: set[str]) -> str | None:
    """Why ``--current`` cannot stand for the recorded bundles (None: it can): replay
    uses it for every decision whose recorded bundle was not stored, so a decision that
    names another digest would be checked against the wrong bundle."""
    digest = current.ref.digest
    others = {
        d: n for d, n in doc["recorded_bundles"].items() if d and d != digest and d not in stored
    }
    if not others:
        return None
    named = ", ".join(f"{d} ({n} decisions)" for d, n in others.items())
    return (
        f"--current has digest {digest}, but the recorded decisions name {named}, whose "
        "bundle is not stored: give the bundle they were decided with"
    )


def whatif_cmd(
    ctx: typer.Context,
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="The candidate bundle YAML (not with --shadow)."),
    ] = None,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    export: Annotated[
        Path | None,
        typer.Option(
            "--export",
            help="Read a `warden export` JSONL file instead of a database (verified first; "
            "not with --data-dir/--database-url).",
        ),
    ] = None,
    key_file: Annotated[
        Path | None,
        typer.Option(
            "--key-file",
            help="With --export: the IKM file, to check the export's signatures too.",
        ),
    ] = None,
    current: Annotated[
        Path | None,
        typer.Option(
            "--current",
            help="The bundle the history was decided with, for decisions whose bundle the "
            "database did not store (always needed for an export); refused when the "
            "decisions name another digest.",
        ),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Only decisions at or after this RFC 3339 time.")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Only decisions before this RFC 3339 time.")
    ] = None,
    agent: Annotated[str | None, typer.Option(help="Only this agent's decisions.")] = None,
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Also write the report as one self-contained HTML page."),
    ] = None,
    fail_on: Annotated[
        str | None,
        typer.Option(
            "--fail-on",
            help="Exit 1 when a decision loosened (loosen: a weaker effect, e.g. deny/ask → "
            "allow) or changed at all (any), or when the replay is not faithful.",
        ),
    ] = None,
    allow_unfaithful: Annotated[
        bool,
        typer.Option(
            "--allow-unfaithful",
            help="Let --fail-on pass a replay that is not faithful (decisions not reproduced "
            "or not checked); a warning still says so.",
        ),
    ] = False,
    shadow: Annotated[
        bool,
        typer.Option(
            "--shadow",
            help="Summarise the divergences `warden serve --shadow-policy` recorded instead.",
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document (docs/cli-json.md).")
    ] = False,
) -> None:
    """Replay the recorded decisions through a candidate bundle and report what changes
    (docs/policy-change.md)."""
    from warden.policy.bundle import load_bundle
    from warden.whatif import what_if
    from warden.whatif.reader import ExportLogReader, LogReader, StoreLogReader
    from warden.whatif.replay import Window

    def bad(message: str) -> typer.Exit:
        err_console.print(f"[red]error:[/red] {escape(message)}")
        return typer.Exit(EXIT_BAD_INPUT)

    if fail_on not in (None, "loosen", "any"):
        raise bad("--fail-on takes loosen or any")
    if shadow and policy is not None:
        raise bad(
            "--shadow summarises the divergences recorded for the shadow candidate "
            "`warden serve --shadow-policy` ran; it takes no --policy"
        )
    if policy is None and not shadow:
        raise bad("give the candidate bundle with --policy")
    if export is not None:
        given = [
            f"--{name.replace('_', '-')}"
            for name in ("data_dir", "database_url")
            # Given on the command line (an environment default is no conflict).
            if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"
        ]
        if given:
            raise bad(f"--export reads the history from a file: it takes no {' or '.join(given)}")
    elif key_file is not None:
        raise bad("--key-file checks an export's signatures: it goes with --export")
    if html is not None and (why := _writable(html)) is not None:
        raise bad(f"cannot write the HTML report to {html}: {why}")
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        err_console.print(f"[yellow]warning:[/yellow] {escape(message)}")

    store = None
    try:
        window = Window(_time(since, "--since"), _time(until, "--until"), agent)
        if window.since is not None and window.until is not None and window.since > window.until:
            raise ConfigError(
                f"--since {since} is after --until {until}: the window holds no decision"
            )
        candidate = load_bundle(policy) if policy is not None else None
        recorded = load_bundle(current) if current is not None else None
        reader: LogReader
        if export is not None:
            unsigned = _check_export(export, key_file)
            if unsigned is not None:
                warn(unsigned)
            reader = ExportLogReader(export)
        else:
            from warden.store import open_store

            url = existing_database_url(data_dir, database_url)
            store = open_store(url, migrate=False)
            reader = StoreLogReader(
                store.engine, shown_url(url) if database_url else str(data_dir / "warden.db")
            )
        if shadow:
            from warden.whatif.shadow import shadow_summary

            doc = shadow_summary(reader, window, fail_on=fail_on)
        else:
            assert candidate is not None
            doc = what_if(
                reader,
                candidate,
                current=recorded,
                window=window,
                fail_on=fail_on,
                allow_unfaithful=allow_unfaithful,
                warn=warn,
            )
            if recorded is not None:
                mismatch = _current_mismatch(doc, recorded, set(reader.bundle_sources()))
                if mismatch is not None:
                    raise ConfigError(mismatch)
    except WardenError as exc:
        raise _fail(exc) from exc
    finally:
        if store is not None:
            store.close()
    for message in doc.get("warnings") or ():
        err_console.print(f"[yellow]warning:[/yellow] {escape(message)}")
    if doc["decisions"] == 0:
        what = "shadow divergences" if shadow else "recorded decisions"
        where = f" of agent {agent!r}" if agent is not None else ""
        span = " in the --since/--until window" if since or until else ""
        warn(f"no {what}{where}{span}: the report checks nothing")
    doc["warnings"] = warnings + list(doc.get("warnings") or ())
    if html is not None:
        from warden.whatif.html import render_html

        try:
            html.write_text(render_html(doc), encoding="utf-8")
        except OSError as exc:
            raise bad(f"cannot write the HTML report to {html}: {exc.strerror or exc}") from exc
    if as_json:
        print_json(doc)
    elif shadow:
        from warden.whatif.shadow import print_shadow

        print_shadow(doc, console)
    else:
        from warden.whatif.report import print_report

        print_report(doc, console)
    if not doc["ok"]:
        raise typer.Exit(EXIT_FAILURE_FOUND)


def activate_cmd(
    bundle: Annotated[Path, typer.Argument(help="The bundle YAML to serve on every replica.")],
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    by: Annotated[
        str, typer.Option("--by", help="Who activates it (recorded in the log event).")
    ] = "cli",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document (docs/cli-json.md).")
    ] = False,
) -> None:
    """Promote BUNDLE: every replica on this database loads it atomically within its poll
    interval (policy_poll_interval_s); the digest is recorded in the transparency log and
    /readyz shows a replica still on the old one (docs/policy-change.md)."""
    from warden.policy.activation import activate, read_bundle
    from warden.store import open_store

    try:
        parsed, source = read_bundle(bundle)
        url = existing_database_url(data_dir, database_url)
        store = open_store(url, migrate=False)
        try:
            generation = activate(store, parsed, source, by=by)
        finally:
            store.close()
    except WardenError as exc:
        raise _fail(exc) from exc
    ref = parsed.ref
    doc = {"ok": True, "bundle": ref.to_wire(), "generation": generation, "by": by}
    if as_json:
        print_json(doc)
    else:
        console.print(
            f"activated {escape(ref.id)}@{escape(ref.version)} ({ref.digest}), generation "
            f"{generation}: replicas load it within their poll interval; /readyz shows each "
            "replica's bundle"
        )
