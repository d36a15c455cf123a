"""``warden`` command line: a thin layer over the public library.

Each command parses options, calls the library, and maps ``WardenError`` to a
message and an exit code: 0 success, 1 integrity or policy failure found,
2 bad input or configuration.
"""

from __future__ import annotations

import gc
import logging
import signal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from warden import __version__
from warden.cli_agents import agents_app
from warden.cli_approvals import approvals_app
from warden.cli_db import db_app
from warden.cli_doctor import doctor_cmd
from warden.cli_evidence import export_evidence_cmd
from warden.cli_hook import hook_app
from warden.cli_keys import keys_app
from warden.cli_ledger import export_cmd, verify_cmd
from warden.cli_log import log_app, witness_cmd
from warden.cli_mcp import mcp_proxy_cmd
from warden.cli_options import HELP_SETTINGS
from warden.cli_output import print_json
from warden.cli_policy import policy_app
from warden.cli_records import verify_bundle_cmd, verify_record_cmd
from warden.cli_replay import replay_app
from warden.cli_whatif import activate_cmd, whatif_cmd
from warden.errors import WardenError

app = typer.Typer(
    **HELP_SETTINGS,
    name="warden",
    help="Warden: a governance gateway for the actions AI agents take (ACS v0.1 Guardian).",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(policy_app, name="policy")
app.add_typer(replay_app, name="replay")
app.add_typer(keys_app, name="keys")
app.add_typer(approvals_app, name="approvals")
app.add_typer(db_app, name="db")
app.add_typer(agents_app, name="agents")
app.add_typer(log_app, name="log")
app.add_typer(hook_app, name="hook")

from warden.cli_options import (  # noqa: E402 - after the Typer apps
    DbUrl,
    KeyFile,
    _fail,
    console,
    err_console,
    shown_url,
)
from warden.cli_serve_options import (  # noqa: E402 - issue 18's serve options
    ConfigFile,
    MetricsAccess,
    OtlpEndpoint,
    PolicyPollInterval,
    ReplicaId,
    ShadowPolicy,
    TlsCert,
    TlsKey,
    TraceSampleRatio,
    tls_options,
)


@app.command()
def version(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document (docs/cli-json.md) on stdout.")
    ] = False,
) -> None:
    """Print Warden's version."""
    if as_json:
        print_json({"version": __version__})
        return
    console.print(__version__)


@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[
        str | None, typer.Option(envvar="WARDEN_HOST", help="Interface to bind [127.0.0.1].")
    ] = None,
    port: Annotated[
        int | None, typer.Option(envvar="WARDEN_PORT", help="TCP port (0 = any free) [8787].")
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            envvar="WARDEN_DATA_DIR",
            help="Folder for the default database and key file [.warden].",
        ),
    ] = None,
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
        str | None,
        typer.Option(envvar="WARDEN_KEY_ID", help="key_id put on Warden's signatures [warden]."),
    ] = None,
    skew_window_ms: Annotated[
        int | None,
        typer.Option(
            envvar="WARDEN_SKEW_WINDOW_MS",
            help="Accepted clock skew of request timestamps, in ms, 0 to 3600000 (one hour).",
        ),
    ] = None,
    sqlite_sync: Annotated[
        str | None,
        typer.Option(
            envvar="WARDEN_SQLITE_SYNC",
            help="SQLite synchronous mode: FULL (durable across power loss; default) or NORMAL "
            "(durable across process crashes only).",
        ),
    ] = None,
    database_pool_size: Annotated[
        int | None,
        typer.Option(
            envvar="WARDEN_DATABASE_POOL_SIZE",
            help="PostgreSQL: connections kept for reads beside the writing one (1-64; "
            "default 4). Ignored for SQLite.",
        ),
    ] = None,
    database_lock_timeout_ms: Annotated[
        int | None,
        typer.Option(
            envvar="WARDEN_DATABASE_LOCK_TIMEOUT_MS",
            help="How long a write waits for a lock another connection holds before the "
            "request fails closed (503 or a signed deny), in ms, 1 to 600000 (default: 10000 "
            "on SQLite, 5000 on PostgreSQL).",
        ),
    ] = None,
    max_body_bytes: Annotated[
        int | None,
        typer.Option(
            envvar="WARDEN_MAX_BODY_BYTES",
            help="Largest accepted request body, 1024 to 67108864 bytes (64 MiB); larger "
            "ones get -32600 unread (`/acs`: "
            "from a `Content-Length` over it, before reading; a body without one is read up "
            "to the cap, no further).",
        ),
    ] = None,
    provenance_cache_bytes: Annotated[
        int | None,
        typer.Option(
            envvar="WARDEN_PROVENANCE_CACHE_BYTES",
            min=0,
            help="Byte budget of this process's cache of session provenance graphs; the "
            "least recently used sessions are evicted past it and rebuilt from their chain "
            "when they return (default 256 MiB).",
        ),
    ] = None,
    policy_requires_provenance: Annotated[
        bool | None,
        typer.Option(
            envvar="WARDEN_POLICY_REQUIRES_PROVENANCE",
            help="Refuse clients whose ClientHello says provenance_producer: none (-32002).",
        ),
    ] = None,
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
        bool | None,
        typer.Option(
            "--adcp-test-controller/--no-adcp-test-controller",
            envvar="WARDEN_ADCP_TEST_CONTROLLER",
            help="Serve AdCP's comply_test_controller (the compliance runner's seeding "
            "hook, which overwrites the caller's plans). For compliance testing only.",
        ),
    ] = None,
    adcp_request_signing: Annotated[
        str | None,
        typer.Option(
            envvar="WARDEN_ADCP_REQUEST_SIGNING",
            help="AdCP RFC 9421 signed requests: supported (verified when sent), required "
            "(AdCP required_for: unsigned calls need a valid API key), warn (a bad "
            "signature falls back to the API key) or off [supported].",
        ),
    ] = None,
    adcp_signing_profile: Annotated[
        str | None,
        typer.Option(
            envvar="WARDEN_ADCP_SIGNING_PROFILE",
            help="The AdCP request-signing profile: 3.2 or 3.1 (legacy Base64URL) [3.2].",
        ),
    ] = None,
    idempotency_ttl_seconds: Annotated[
        int | None,
        typer.Option(
            envvar="WARDEN_IDEMPOTENCY_TTL_SECONDS",
            help="How long an idempotency key replays its stored answer (the spend wire's "
            "Idempotency-Key, AdCP's idempotency_key; AdCP's replay_ttl_seconds).",
        ),
    ] = None,
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
    unsafe_shared_ikm: Annotated[
        bool | None,
        typer.Option(
            "--unsafe-shared-ikm/--no-unsafe-shared-ikm",
            envvar="WARDEN_UNSAFE_SHARED_IKM",
            help="Accept ACS requests signed with the master IKM (no verified identity; "
            "every such decision is marked unsafe_shared_ikm).",
        ),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option(envvar="WARDEN_LOG_LEVEL", help="Python logging level [INFO].")
    ] = None,
    metrics_access: MetricsAccess = None,
    replica_id: ReplicaId = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    otlp_endpoint: OtlpEndpoint = None,
    trace_sample_ratio: TraceSampleRatio = None,
    shadow_policy: ShadowPolicy = None,
    policy_poll_interval_s: PolicyPollInterval = None,
    config: ConfigFile = None,
) -> None:
    """Run Warden: ACS at POST /acs, the REST API under /v1 (API keys; the bootstrap admin
    token is <data-dir>/api.token), the approval desk at /desk, health at /healthz."""
    import uvicorn

    from warden.config_file import load_settings
    from warden.runtime import Runtime
    from warden.server.app import create_app
    from warden.server.http_protocol import CoalescingHttpToolsProtocol

    try:
        settings = load_settings(
            config,
            ctx=ctx,
            host=host,
            port=port,
            data_dir=data_dir,
            database_url=database_url,
            policy=policy,
            key_file=key_file,
            key_id=key_id,
            skew_window_ms=skew_window_ms,
            sqlite_sync=sqlite_sync.upper() if sqlite_sync is not None else None,
            database_pool_size=database_pool_size,
            database_lock_timeout_ms=database_lock_timeout_ms,
            max_body_bytes=max_body_bytes,
            provenance_cache_bytes=provenance_cache_bytes,
            policy_requires_provenance=policy_requires_provenance,
            budgets=budgets,
            webhooks=webhooks,
            public_url=public_url,
            adcp_test_controller=adcp_test_controller,
            adcp_request_signing=adcp_request_signing,
            adcp_signing_profile=adcp_signing_profile,
            idempotency_ttl_seconds=idempotency_ttl_seconds,
            signing_key_file=signing_key_file,
            kla_keys=kla_keys,
            unsafe_shared_ikm=unsafe_shared_ikm,
            log_level=log_level,
            metrics_access=metrics_access,
            replica_id=replica_id,
            tls_cert=tls_cert,
            tls_key=tls_key,
            otlp_endpoint=otlp_endpoint,
            trace_sample_ratio=trace_sample_ratio,
            shadow_policy=shadow_policy,
            policy_poll_interval_s=policy_poll_interval_s,
        )
    except WardenError as exc:
        raise _fail(exc) from exc
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        tls = tls_options(settings)  # before anything is created
        runtime = Runtime.start(settings)
    except WardenError as exc:
        raise _fail(exc) from exc
    ref = runtime.bundle.ref
    err_console.print(
        f"warden {__version__}: bundle {escape(ref.id)}@{escape(ref.version)} "
        f"({len(runtime.bundle.rules)} rules, {ref.digest[:19]}…), "
        f"store {escape(shown_url(settings.resolved_database_url()))}, "
        f"key file {escape(str(settings.resolved_key_file()))}, "
        f"admin API token {escape(str(settings.resolved_api_token_file()))}, "
        f"approval desk {escape(settings.resolved_public_url())}/desk"
        + (", TLS" if settings.tls_cert is not None else "")
    )
    if runtime.demo_agent_key is not None:
        err_console.print(
            f"[yellow]quick start:[/yellow] registered the demo agent [bold]demo-agent[/bold] "
            f"(owner demo-owner); its ACS key file is {escape(str(runtime.demo_agent_key))} "
            "(mode 0600)"
        )
    app_ = create_app(runtime)
    # Everything loaded so far (libraries, schemas, the bundle: ~130k objects) lives as
    # long as the process: take it out of the cyclic collector's full passes, which
    # otherwise stall every session ~0.3 s whenever one session allocates heavily
    # (decision 198). ``gc_freeze = false`` leaves the collector alone (decision 330).
    if settings.gc_freeze:
        gc.collect()
        gc.freeze()
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again under the
    # handler it found: the default one would end the process before runtime.close()
    # signs the shutdown checkpoint and closes the store. This one ends it after, with
    # the same exit status (128 + SIGTERM).
    previous = signal.signal(signal.SIGTERM, _exit_after_shutdown)
    try:
        uvicorn.run(
            app_,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level.lower(),
            access_log=False,
            # httptools, one write per response (warden.server.http_protocol).
            http=CoalescingHttpToolsProtocol,
            **tls,
        )
    finally:
        try:
            runtime.close()
        finally:
            signal.signal(signal.SIGTERM, previous)


def _exit_after_shutdown(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


# Audit chains (warden.cli_ledger); KLA records and evidence bundles (warden.cli_records,
# warden.cli_evidence).
app.command("verify")(verify_cmd)
app.command("export")(export_cmd)
app.command("verify-record")(verify_record_cmd)
app.command("verify-bundle")(verify_bundle_cmd)
app.command("export-evidence")(export_evidence_cmd)
app.command("mcp-proxy")(mcp_proxy_cmd)
app.command("doctor")(doctor_cmd)
app.command("witness")(witness_cmd)
# Policy change (issue 19): what-if replay and promoting a candidate (warden.cli_whatif).
app.command("whatif")(whatif_cmd)
policy_app.command("activate")(activate_cmd)


def main() -> None:
    """Console-script entry point."""
    app()
