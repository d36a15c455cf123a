"""``warden`` command line: a thin layer over the public library.

Each command parses options, calls the library, and maps ``WardenError`` to a
message and an exit code: 0 success, 1 integrity or policy failure found,
2 bad input or configuration.
"""

from __future__ import annotations

import gc
import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.markup import escape
from rich.table import Table

from warden import __version__
from warden.cli_approvals import approvals_app
from warden.cli_db import db_app
from warden.cli_evidence import export_evidence_cmd
from warden.cli_keys import keys_app
from warden.cli_mcp import mcp_proxy_cmd
from warden.cli_records import verify_bundle_cmd, verify_record_cmd
from warden.errors import IntegrityError, WardenError

app = typer.Typer(
    name="warden",
    help="Warden: a governance gateway for the actions AI agents take (ACS v0.1 Guardian).",
    no_args_is_help=True,
    add_completion=False,
)
policy_app = typer.Typer(help="Validate and explain policy bundles.", no_args_is_help=True)
replay_app = typer.Typer(
    help="Replay recorded agent traffic against a running Warden.", no_args_is_help=True
)
app.add_typer(policy_app, name="policy")
app.add_typer(replay_app, name="replay")
app.add_typer(keys_app, name="keys")
app.add_typer(approvals_app, name="approvals")
app.add_typer(db_app, name="db")

from warden.cli_options import (  # noqa: E402 - after the Typer apps
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


def _settings(**kw: Any) -> Any:
    from warden.settings import Settings

    try:
        return Settings(**{k: v for k, v in kw.items() if v is not None})
    except Exception as exc:  # pydantic ValidationError: report every problem at once
        err_console.print(f"[red]invalid settings:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_BAD_INPUT) from exc


@app.command()
def version() -> None:
    """Print Warden's version."""
    console.print(__version__)


@app.command()
def serve(
    host: Annotated[
        str, typer.Option(envvar="WARDEN_HOST", help="Interface to bind.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(envvar="WARDEN_PORT", help="TCP port (0 = any free).")
    ] = 8787,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            envvar="WARDEN_POLICY",
            help="Policy bundle YAML (default: examples/policies/default.yaml).",
        ),
    ] = None,
    key_file: KeyFile = None,
    key_id: Annotated[
        str, typer.Option(envvar="WARDEN_KEY_ID", help="key_id put on Warden's signatures.")
    ] = "warden",
    skew_window_ms: Annotated[
        int,
        typer.Option(
            envvar="WARDEN_SKEW_WINDOW_MS", help="Accepted clock skew of request timestamps."
        ),
    ] = 300_000,
    sqlite_sync: Annotated[
        str,
        typer.Option(
            envvar="WARDEN_SQLITE_SYNC",
            help="SQLite synchronous mode: FULL (durable across power loss; default) or NORMAL "
            "(durable across process crashes only).",
        ),
    ] = "FULL",
    max_body_bytes: Annotated[
        int,
        typer.Option(
            envvar="WARDEN_MAX_BODY_BYTES",
            help="Largest accepted request body; larger ones get -32600 unread.",
        ),
    ] = 1 << 20,
    provenance_cache_bytes: Annotated[
        int,
        typer.Option(
            envvar="WARDEN_PROVENANCE_CACHE_BYTES",
            min=0,
            help="Byte budget of this process's cache of session provenance graphs; the "
            "least recently used sessions are evicted past it and rebuilt from their chain "
            "when they return (default 256 MiB).",
        ),
    ] = 256 * 1024 * 1024,
    policy_requires_provenance: Annotated[
        bool,
        typer.Option(
            envvar="WARDEN_POLICY_REQUIRES_PROVENANCE",
            help="Refuse clients whose ClientHello says provenance_producer: none (-32002).",
        ),
    ] = False,
    budgets: Annotated[
        Path | None,
        typer.Option(
            "--budgets",
            envvar="WARDEN_BUDGETS",
            help="YAML list of budgets (id, kind, parent, currency, cap, period, name) "
            "created or updated at start; an invalid file stops the start.",
        ),
    ] = None,
    webhooks: Annotated[
        Path | None,
        typer.Option(
            "--webhooks",
            envvar="WARDEN_WEBHOOKS",
            help="YAML file of webhooks (id, url, secret, events) notified, signed, on every "
            "approval task change; an invalid file or a private destination stops the start.",
        ),
    ] = None,
    public_url: Annotated[
        str | None,
        typer.Option(
            envvar="WARDEN_PUBLIC_URL",
            help="The URL approvers reach this Warden at, for task links, and the `iss` of "
            "AdCP governance tokens (default http://<host>:<port>).",
        ),
    ] = None,
    adcp_test_controller: Annotated[
        bool,
        typer.Option(
            "--adcp-test-controller",
            envvar="WARDEN_ADCP_TEST_CONTROLLER",
            help="Serve AdCP's comply_test_controller (the compliance runner's seeding "
            "hook, which overwrites the caller's plans). For compliance testing only.",
        ),
    ] = False,
    idempotency_ttl_seconds: Annotated[
        int,
        typer.Option(
            envvar="WARDEN_IDEMPOTENCY_TTL_SECONDS",
            help="How long an idempotency key replays its stored answer (the spend wire's "
            "Idempotency-Key, AdCP's idempotency_key; AdCP's replay_ttl_seconds).",
        ),
    ] = 86_400,
    signing_key_file: Annotated[
        Path | None,
        typer.Option(
            envvar="WARDEN_SIGNING_KEY_FILE",
            help="Warden's Ed25519 signing key for KLA records, PKCS#8 PEM, mode 0600 "
            "(default: <data-dir>/signing.key; created on first start).",
        ),
    ] = None,
    kla_keys: Annotated[
        Path | None,
        typer.Option(
            envvar="WARDEN_KLA_KEYS",
            help="Trusted public keys of action-request signers (JWKS file, PEM file or a "
            "directory of them); without it a signed action request is refused.",
        ),
    ] = None,
    log_level: Annotated[
        str, typer.Option(envvar="WARDEN_LOG_LEVEL", help="Python logging level.")
    ] = "INFO",
) -> None:
    """Run Warden: ACS at POST /acs, the REST API under /v1 (API keys; the bootstrap admin
    token is <data-dir>/api.token), the approval desk at /desk, health at /healthz."""
    import uvicorn

    from warden.runtime import Runtime
    from warden.server.app import create_app

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = _settings(
        host=host,
        port=port,
        data_dir=data_dir,
        database_url=database_url,
        policy=policy,
        key_file=key_file,
        key_id=key_id,
        skew_window_ms=skew_window_ms,
        sqlite_sync=sqlite_sync.upper(),
        max_body_bytes=max_body_bytes,
        provenance_cache_bytes=provenance_cache_bytes,
        policy_requires_provenance=policy_requires_provenance,
        budgets=budgets,
        webhooks=webhooks,
        public_url=public_url,
        adcp_test_controller=adcp_test_controller,
        idempotency_ttl_seconds=idempotency_ttl_seconds,
        signing_key_file=signing_key_file,
        kla_keys=kla_keys,
    )
    try:
        runtime = Runtime.start(settings)
    except WardenError as exc:
        raise _fail(exc) from exc
    ref = runtime.bundle.ref
    err_console.print(
        f"warden {__version__}: bundle {ref.id}@{ref.version} ({len(runtime.bundle.rules)} "
        f"rules, {ref.digest[:19]}…), store {shown_url(settings.resolved_database_url())}, "
        "key file "
        f"{settings.resolved_key_file()}, admin API token {settings.resolved_api_token_file()}, "
        f"approval desk {settings.resolved_public_url()}/desk"
    )
    app_ = create_app(runtime)
    # Everything loaded so far (libraries, schemas, the bundle: ~130k objects) lives as
    # long as the process: take it out of the cyclic collector's full passes, which
    # otherwise stall every session ~0.3 s whenever one session allocates heavily
    # (decision 198).
    gc.collect()
    gc.freeze()
    try:
        uvicorn.run(
            app_,
            host=settings.host,
            port=settings.port,
            log_level=log_level.lower(),
            access_log=False,
        )
    finally:
        runtime.close()


def _open_store(data_dir: Path, database_url: str | None) -> Any:
    from warden.store import open_store

    return open_store(existing_database_url(data_dir, database_url), migrate=False)


@app.command()
def verify(
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
) -> None:
    """Re-walk every audit chain offline: entry hashes, links, signed heads, signatures."""
    from warden.crypto.keystore import load_ikm
    from warden.ledger.verify import read_jsonl, verify_records

    try:
        ikm = None if no_signatures else load_ikm(key_file or data_dir / "ikm.key")
        if file is not None:
            records: Any = read_jsonl(file)
            source = str(file)
        else:
            store = _open_store(data_dir, database_url)
            records = store.iter_records()
            source = database_url or str(data_dir / "warden.db")
        report = verify_records(records, ikm=ikm, require_manifest=file is not None)
    except IntegrityError as exc:
        err_console.print(f"[red]FAILED[/red] {exc.reason}: {escape(exc.message)}")
        raise typer.Exit(EXIT_FAILURE_FOUND) from exc
    except WardenError as exc:
        raise _fail(exc) from exc
    console.print(
        f"[green]OK[/green] {escape(source)}: {report.sessions} sessions, "
        f"{report.entries} entries, "
        f"{report.signatures_checked} signatures checked"
        + ("" if ikm else " (signatures not checked: --no-signatures)")
    )
    table = Table("session", "chain head")
    for sid, head in list(report.heads.items())[:20]:
        table.add_row(escape(sid), escape(head))
    if report.heads:
        console.print(table)
        if len(report.heads) > 20:
            console.print(f"… and {len(report.heads) - 20} more sessions")


@app.command()
def export(
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Write JSONL here (default: standard output)."),
    ] = None,
    session: Annotated[
        str | None,
        typer.Option(help="Only this session id."),
    ] = None,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
    key_id: Annotated[
        str, typer.Option(envvar="WARDEN_KEY_ID", help="key_id put on the manifest signature.")
    ] = "warden",
) -> None:
    """Write audit chains as JSONL: per session its record, entries and signed head;
    last, a signed manifest of every exported session's head."""
    from warden.crypto.keystore import load_ikm
    from warden.ledger.export import export_records

    try:
        ikm = load_ikm(key_file or data_dir / "ikm.key")
        store = _open_store(data_dir, database_url)
    except WardenError as exc:
        raise _fail(exc) from exc
    fh = out.open("w", encoding="utf-8") if out else sys.stdout
    n = 0
    try:
        for rec in export_records(store, ikm, key_id=key_id, session_id=session):
            fh.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
            n += 1
    except IntegrityError as exc:
        err_console.print(f"[red]FAILED[/red] {exc.reason}: {escape(exc.message)}")
        raise typer.Exit(EXIT_FAILURE_FOUND) from exc
    except WardenError as exc:
        raise _fail(exc) from exc
    finally:
        if out:
            fh.close()
    if out:
        err_console.print(f"wrote {n} records to {out}")


def _provenance_line(spec: Any) -> str:
    """One line for ``policy check``: whether provenance is on, which gates, how unknown
    trust is treated."""
    if spec is None:
        return "provenance: off"
    gates = spec.enabled_gates()
    return (
        f"provenance: on; gates: {', '.join(gates) if gates else 'none'}; "
        f"unknown_trust: {spec.unknown_trust}; inference: {'on' if spec.inference else 'off'}; "
        f"{len(spec.consequential_tools)} consequential tool pattern(s)"
    )


@policy_app.command("check")
def policy_check(
    files: Annotated[list[Path], typer.Argument(help="Bundle YAML file(s).")],
) -> None:
    """Validate bundles: YAML, fields, hooks, CEL conditions, RE2 patterns, effect details.

    Prints OK per valid file; exit 2 if any file is invalid (every problem is printed).
    """
    from warden.policy import load_bundle

    failed = False
    for file in files:
        try:
            bundle = load_bundle(file)
        except WardenError as exc:
            err_console.print(f"[red]invalid bundle[/red]\n{escape(exc.message)}")
            failed = True
            continue
        console.print(
            f"[green]OK[/green] {escape(bundle.ref.id)}@{escape(bundle.ref.version)}: "
            f"{len(bundle.rules)} rules, default {bundle.default.value}, {bundle.ref.digest}; "
            f"{escape(_provenance_line(bundle.provenance))}",
            soft_wrap=True,
        )
    if failed:
        raise typer.Exit(EXIT_BAD_INPUT)


@policy_app.command("explain")
def policy_explain(
    file: Annotated[Path, typer.Argument(help="Bundle YAML file.")],
    request: Annotated[Path, typer.Argument(help="An ACS request envelope (JSON).")],
) -> None:
    """Show which rules are candidates for a request, which fire and why, and the verdict.

    The request is first checked as the server checks it (strict JSON, the ACS request
    envelope schema, JCS domain, method routing, the hook's payload schema or the wrapped
    MCP message); a request the server would reject is reported with its JSON-RPC error
    code, JSON pointer and message (exit 2). Signature, session, replay and clock checks
    need a live session and are not applied. A condition that errors is shown as the
    fail-closed verdict the server would sign (deny, ``evaluation_failed``; exit 0).
    """
    from warden.core.guardian import Guardian, fit_to_hook, verdict_from_evaluation
    from warden.core.tool_names import fold
    from warden.crypto.canonical import canonical_bytes, parse_strict_json
    from warden.errors import CouldNotDecide, InvalidParams, InvalidRequest, ProtocolError
    from warden.policy import PolicyEngine, RuleTrace, load_bundle
    from warden.schemas import SchemaSet
    from warden.wire.acs.mcp import check_wrapped
    from warden.wire.acs.methods import HANDSHAKE, PING, route
    from warden.wire.acs.parse import action_request

    try:
        engine = PolicyEngine(load_bundle(file))
    except WardenError as exc:
        raise _fail(exc) from exc
    try:
        body = request.read_bytes()
    except OSError as exc:
        err_console.print(
            f"[red]error:[/red] cannot read {escape(str(request))}: "
            f"{escape(exc.strerror or str(exc))}"
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc

    schemas = SchemaSet("acs")
    try:
        # The server's checks, in the server's order (wire/acs/service.py).
        msg = parse_strict_json(body)
        if isinstance(msg, list):
            raise InvalidRequest(
                "batch requests are not supported by this Guardian", reason="batch_unsupported"
            )
        problem = schemas.first_error("request-envelope.json", msg)
        if problem is not None:
            raise InvalidRequest(
                f"request envelope invalid at {problem[0] or '/'}: {problem[1]}",
                pointer=problem[0],
            )
        canonical_bytes(msg)  # raises InvalidRequest outside the JCS domain
        method, params = msg["method"], msg["params"]
        if method in (HANDSHAKE, PING):
            err_console.print(
                f"[red]error:[/red] {escape(method)} is answered by the protocol layer; "
                "policy does not evaluate it"
            )
            raise typer.Exit(EXIT_BAD_INPUT)
        info = route(method)
        if info.kind == "hook":
            assert info.schema is not None
            problem = schemas.first_error(info.schema, params["payload"])
            if problem is not None:
                raise InvalidParams(
                    f"{method} payload invalid at {problem[0] or '/'}: {problem[1]}",
                    pointer="/params/payload" + problem[0],
                    method=method,
                )
        else:
            assert info.mcp_method is not None
            check_wrapped(params["payload"], info.mcp_method, method)
        req = action_request(info, params, None)
    except ProtocolError as exc:
        err_console.print(
            f"[red]error:[/red] Warden would reject this request with JSON-RPC error "
            f"{int(exc.code)} ({exc.code.name.lower().replace('_', ' ')})"
        )
        if exc.data.get("pointer") is not None:
            err_console.print(f"  pointer: {escape(json.dumps(exc.data['pointer']))}")
        err_console.print(f"  message: {escape(exc.message)}")
        raise typer.Exit(EXIT_BAD_INPUT) from exc

    failure: str | None = None
    default_applied = False
    try:
        ev = engine.evaluate(req, explain=True)
        trace: tuple[RuleTrace, ...] = ev.trace
        default_applied = ev.default_applied
        verdict = fit_to_hook(verdict_from_evaluation(ev), req.permitted)
    except Exception as exc:  # noqa: BLE001 - the server answers any engine failure this way
        trace = exc.data.get("trace", ()) if isinstance(exc, CouldNotDecide) else ()
        failure = exc.message if isinstance(exc, WardenError) else f"{type(exc).__name__}: {exc}"
        verdict = Guardian(engine).fail_closed(req, failure)
    table = Table("rule", "effect", "fired", "why")
    for t in trace:
        fired = "error" if t.failed else "yes" if t.fired else "no"
        table.add_row(escape(t.rule_id), t.effect.value, fired, escape(t.detail))
    n_rules = len(engine.bundle.rules)
    # Tool patterns match the folded name (warden.core.tool_names): show what they saw.
    folded = fold(req.tool_name)
    shown = req.tool_name + (f" (matched as {folded})" if folded != req.tool_name else "")
    console.print(
        f"method {escape(req.method)}, tool {escape(shown or '-')}: "
        + (
            f"{len(trace)} candidate rules of {n_rules}"
            if failure is None
            else f"{len(trace)} candidate rules evaluated before the failure, of {n_rules}"
        )
    )
    console.print(table)
    console.print(
        f"verdict: [bold]{verdict.decision.value}[/bold]"
        + (" (fail closed)" if failure is not None else " (default)" if default_applied else "")
        + (f" — {escape(verdict.reasoning)}" if verdict.reasoning else "")
    )
    if verdict.reason_codes:
        console.print(f"reason codes: {escape(', '.join(verdict.reason_codes))}")
    if failure is not None:
        console.print(f"evaluation failed: {escape(failure)}")


def _replay_efficacy(
    bundle: Path,
    suites: list[str] | None,
    paradigms: list[str] | None,
    modes: list[str] | None,
    user_tasks: int | None,
    attacks: bool,
    markdown_out: Path | None,
) -> None:
    """``warden replay agentdojo --efficacy`` (README "Efficacy on AgentDojo attacks")."""
    from warden.replay.efficacy import MODES, PARADIGMS, markdown, print_report, run_efficacy

    bad = [p for p in paradigms or () if p not in PARADIGMS]
    bad += [m for m in modes or () if m not in MODES]
    if bad:
        err_console.print(
            f"[red]error:[/red] unknown {', '.join(bad)}; paradigms: {', '.join(PARADIGMS)}; "
            f"modes: {', '.join(MODES)}"
        )
        raise typer.Exit(EXIT_BAD_INPUT)
    try:
        results = run_efficacy(
            bundle,
            suites=suites,
            paradigms=paradigms or PARADIGMS,
            modes=modes or MODES,
            user_tasks=user_tasks,
            attacked=attacks,
            progress=lambda text: console.print(text),
        )
    except WardenError as exc:
        raise _fail(exc) from exc
    except (ValueError, OSError) as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    print_report(results, console)
    if markdown_out is not None:
        markdown_out.write_text(markdown(results) + "\n", encoding="utf-8")


@replay_app.command("agentdojo")
def replay_agentdojo(
    url: Annotated[str, typer.Option(help="Warden's ACS endpoint.")] = "http://127.0.0.1:8787/acs",
    key_file: Annotated[
        Path, typer.Option(help="The IKM Warden uses (the replay signs as the Observed Agent).")
    ] = Path(".warden/ikm.key"),
    suite: Annotated[
        list[str] | None,
        typer.Option(help="Suites to replay (default: all four)."),
    ] = None,
    verify_after: Annotated[
        bool,
        typer.Option(
            "--verify/--no-verify", help="Run `warden verify` on the database afterwards."
        ),
    ] = True,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    efficacy: Annotated[
        bool,
        typer.Option(
            "--efficacy",
            help="Run the provenance efficacy harness instead: benign and attacked runs "
            "against in-process Wardens, one per paradigm and provenance mode (--url, "
            "--key-file and --verify are not used).",
        ),
    ] = False,
    bundle: Annotated[
        Path, typer.Option(help="Efficacy: the base bundle (its provenance section).")
    ] = Path("examples/policies/agentdojo-provenance.yaml"),
    paradigm: Annotated[
        list[str] | None,
        typer.Option(help="Efficacy: fides, ibac, aarm, camel, combined (default: all)."),
    ] = None,
    mode: Annotated[
        list[str] | None,
        typer.Option(help="Efficacy: client, inference (default: both)."),
    ] = None,
    user_tasks: Annotated[
        int | None, typer.Option(help="Efficacy: only the first N user tasks of each suite.")
    ] = None,
    attacks: Annotated[
        bool, typer.Option("--attacks/--no-attacks", help="Efficacy: replay attacked pairs.")
    ] = True,
    markdown: Annotated[
        Path | None, typer.Option(help="Efficacy: also write the table as Markdown here.")
    ] = None,
) -> None:
    """Replay AgentDojo v1.2 ground-truth tool calls as signed ACS sessions (or, with
    --efficacy, measure the provenance gates on benign and attacked runs)."""
    from warden.crypto.keystore import load_ikm
    from warden.replay.agentdojo import replay

    if efficacy:
        _replay_efficacy(bundle, suite, paradigm, mode, user_tasks, attacks, markdown)
        return
    try:
        ikm = load_ikm(key_file)
        summary = replay(url, ikm, suites=suite, console=console)
    except WardenError as exc:
        raise _fail(exc) from exc
    except ModuleNotFoundError as exc:
        err_console.print(
            f"[red]error:[/red] {escape(str(exc))}; install it with: pip install -e '.[agentdojo]'"
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    except httpx.TransportError as exc:
        err_console.print(f"[red]error:[/red] cannot reach Warden at {escape(url)}: {exc}")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    except ValueError as exc:  # unknown suite name
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    if summary.errors:
        err_console.print(f"[red]{summary.errors} protocol errors during the replay[/red]")
    if verify_after:
        verify(
            None,
            data_dir=data_dir,
            database_url=database_url,
            key_file=key_file,
            no_signatures=False,
        )
    if summary.errors:
        raise typer.Exit(EXIT_FAILURE_FOUND)


# KLA records and evidence bundles (warden.cli_records, warden.cli_evidence).
app.command("verify-record")(verify_record_cmd)
app.command("verify-bundle")(verify_bundle_cmd)
app.command("export-evidence")(export_evidence_cmd)
app.command("mcp-proxy")(mcp_proxy_cmd)


def main() -> None:
    """Console-script entry point."""
    app()
