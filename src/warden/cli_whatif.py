"""``warden whatif``: what a candidate bundle would have decided on the recorded history.

Reads the transparency log of a data directory, a database URL or an export file
(:mod:`warden.whatif.reader`), replays each recorded decision through the recorded
bundle (faithfulness) and the candidate (:mod:`warden.whatif.replay`), and prints the
report (:mod:`warden.whatif.report`; ``--json``: ``warden/schemas/cli/whatif.json``;
``--html``: one self-contained page with charts). ``--shadow`` instead summarises the
divergences ``warden serve --shadow-policy`` recorded in the log.

Exit codes: 0 done (and ``--fail-on`` found nothing); 1 ``--fail-on loosen`` found a
loosened decision, or ``--fail-on any`` a changed one; 2 bad input or configuration.
"""

from __future__ import annotations

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


def whatif_cmd(
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="The candidate bundle YAML (not needed with --shadow)."),
    ] = None,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    export: Annotated[
        Path | None,
        typer.Option("--export", help="Read a `warden export` JSONL file instead of a database."),
    ] = None,
    current: Annotated[
        Path | None,
        typer.Option(
            "--current",
            help="The bundle the history was decided with, for decisions whose bundle the "
            "database did not store (always needed for an export).",
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
            "allow) or changed at all (any).",
        ),
    ] = None,
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

    if fail_on not in (None, "loosen", "any"):
        err_console.print("[red]error:[/red] --fail-on takes loosen or any")
        raise typer.Exit(EXIT_BAD_INPUT)
    if policy is None and not shadow:
        err_console.print("[red]error:[/red] give the candidate bundle with --policy")
        raise typer.Exit(EXIT_BAD_INPUT)
    store = None
    try:
        window = Window(_time(since, "--since"), _time(until, "--until"), agent)
        candidate = load_bundle(policy) if policy is not None else None
        recorded = load_bundle(current) if current is not None else None
        reader: LogReader
        if export is not None:
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
                warn=lambda m: err_console.print(f"[yellow]warning:[/yellow] {escape(m)}"),
            )
    except WardenError as exc:
        raise _fail(exc) from exc
    finally:
        if store is not None:
            store.close()
    if html is not None:
        from warden.whatif.html import render_html

        html.write_text(render_html(doc), encoding="utf-8")
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
