"""The ASGI application: mounts the wires; health and readiness.

``POST /acs`` serves ACS JSON-RPC (always HTTP 200 with a JSON-RPC body, like
the reference Guardians); the body is read up to the configured cap and no
further. ``/adcp/<task>`` and ``/mcp`` are the AdCP governance agent
(:mod:`warden.wire.adcp`; its JWKS at ``/.well-known/jwks.json``). ``/v1/…`` is the
Governed Agent Spend REST wire (bearer token; see
:mod:`warden.wire.spend`), the approval desk's and the action request wire's
(:mod:`warden.wire.kla`). ``GET /healthz`` is liveness; ``GET /readyz`` checks
the store reads and takes a write (503 otherwise) and names the bundle this replica
serves beside the one `warden policy activate` promoted; ``/openapi.json`` documents
the HTTP routes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from warden import __version__
from warden.errors import InvalidRequest, WardenError
from warden.json_text import compact_bytes
from warden.runtime import Runtime
from warden.server.agents_api import agents_router
from warden.server.approvals_api import approvals_router
from warden.server.desk import mount_desk
from warden.server.lazy_endpoint import LazyEndpoint, RunnableEndpoint
from warden.server.log_api import log_router
from warden.server.metrics import WardenMetrics
from warden.server.trace_context import TraceContext
from warden.store.group_commit import GroupCommitter
from warden.store.idempotency import Idempotency
from warden.wire.acs.render import error_response
from warden.wire.acs.service import AcsService
from warden.wire.adcp.rest import adcp_router
from warden.wire.kla import kla_router
from warden.wire.spend import SpendBodyCap, spend_router

log = logging.getLogger(__name__)

#: The AdCP governance agent's MCP endpoint (``warden.wire.adcp.mcp.PATH``; held equal by
#: tests/adcp, so serving it does not import the MCP SDK).
MCP_PATH = "/mcp"


class AcsEndpoint:
    """``POST /acs`` as a bare ASGI app in front of FastAPI.

    The ACS wire is one JSON-RPC body in, one out; routing it through FastAPI's
    request machinery cost more than the decision itself, so it is served here
    and every other path falls through to the FastAPI app.
    """

    def __init__(
        self, acs: AcsService, committer: GroupCommitter, fallback: ASGIApp, path: str = "/acs"
    ) -> None:
        self.acs = acs
        self.committer = committer
        self.fallback = fallback
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.fallback(scope, receive, send)
            return
        if scope["method"] != "POST":
            # Still the wire's own format: a JSON-RPC error (id null), with HTTP's 405.
            await _send(send, 405, _NOT_POST, [(b"allow", b"POST")])
            return
        limit = self.acs.max_body_bytes
        if _declared_length(scope) > limit:
            # A declared length over the cap is answered from the headers, unread.
            await _send(send, 200, _too_large(limit), [(b"connection", b"close")])
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                # Stop reading at the cap: an oversized body is refused, never buffered.
                await _send(send, 200, _too_large(limit), [(b"connection", b"close")])
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        response = await self.acs.handle_async(b"".join(chunks), self.committer)
        await _send(send, 200, _dump(response))


def _not_post() -> bytes:
    exc = InvalidRequest(
        "the ACS wire takes one JSON-RPC request per POST to /acs", reason="method_not_allowed"
    )
    return compact_bytes(error_response(None, exc))


#: ``GET /acs`` and every other method but POST: ``-32600`` with HTTP 405 and ``Allow: POST``.
_NOT_POST = _not_post()


def _declared_length(scope: Scope) -> int:
    """The request's ``content-length`` (-1 when absent or not a number: chunked)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else -1
    return -1


def _too_large(limit: int) -> bytes:
    """The JSON-RPC ``-32600 body_too_large`` answer (``id: null``)."""
    exc = InvalidRequest(f"request body exceeds {limit} bytes", reason="body_too_large")
    return _dump(error_response(None, exc))


def _dump(body: dict[str, Any]) -> bytes:
    """The response's wire bytes: ``json.dumps(ensure_ascii=False, separators=(",",
    ":"))`` as UTF-8, through orjson where that writes the same bytes (decision 662)."""
    return compact_bytes(body)


async def _send(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


#: How long /readyz waits for the database before answering 503 (s).
READY_TIMEOUT_S = 5.0


def create_app(runtime: Runtime, *, idempotency: Idempotency | None = None) -> ASGIApp:
    """Build the ASGI app around a started :class:`Runtime`: ``/acs`` plus FastAPI.

    Audit entries of concurrent ACS requests are group-committed; the writer
    thread drains its queue and stops at shutdown. ``idempotency`` overrides the
    spend wire's replay rules (default: the configured TTL and the system clock).
    """
    if runtime.metrics is None:
        # One registry per runtime, however many apps are built around it.
        runtime.metrics = WardenMetrics(runtime)
    metrics: WardenMetrics = runtime.metrics
    committer = GroupCommitter(runtime.store, on_batch=metrics.observe_batch)
    idem = idempotency or Idempotency(runtime.settings.idempotency_ttl_seconds)
    mcp_endpoint: LazyEndpoint | None = None
    if runtime.adcp is not None:
        # One idempotency store and one set of rules for both wires (issue 9 item 4).
        adcp = runtime.adcp
        adcp.idempotency = idem

        def build_mcp() -> RunnableEndpoint:
            # Imported here: the MCP SDK is loaded by the first request to /mcp only.
            from warden.wire.adcp.mcp import AdcpMcpEndpoint

            return AdcpMcpEndpoint(
                adcp,
                runtime.api_keys,
                max_body_bytes=runtime.settings.max_body_bytes,
                signing=runtime.adcp_signing,
                public_url=runtime.settings.resolved_public_url(),
            )

        mcp_endpoint = LazyEndpoint(build_mcp)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            if mcp_endpoint is None:
                yield
            else:
                async with mcp_endpoint.run():
                    yield
        finally:
            committer.close()

    # No slash redirects: a bare 307 is no wire's answer. /v1 and /adcp paths Warden does
    # not serve are answered by their wire's catch-all, in that wire's error format.
    app = FastAPI(title="Warden", version=__version__, lifespan=lifespan, redirect_slashes=False)
    # Before the spend router, whose catch-all answers unknown /v1 routes.
    if runtime.tlog is not None:
        app.include_router(log_router(runtime.tlog))
    app.include_router(
        approvals_router(
            runtime.desk, runtime.api_keys, max_body_bytes=runtime.settings.max_body_bytes
        )
    )
    if runtime.agents is not None:
        app.include_router(
            agents_router(
                runtime.agents, runtime.api_keys, max_body_bytes=runtime.settings.max_body_bytes
            )
        )
    if runtime.kla is not None:
        app.include_router(
            kla_router(
                runtime.kla, runtime.api_keys, max_body_bytes=runtime.settings.max_body_bytes
            )
        )
    if runtime.adcp is not None:
        app.include_router(
            adcp_router(
                runtime.adcp,
                runtime.api_keys,
                adcp_jwks(runtime),
                max_body_bytes=runtime.settings.max_body_bytes,
                signing=runtime.adcp_signing,
                public_url=runtime.settings.resolved_public_url(),
            )
        )
    app.include_router(
        spend_router(
            runtime.spend,
            runtime.store,
            keys=runtime.api_keys,
            idempotency=idem,
            max_body_bytes=runtime.settings.max_body_bytes,
            guardian=runtime.guardian,
            desk=runtime.desk,
        )
    )
    app.add_middleware(SpendBodyCap, limit=runtime.settings.max_body_bytes)
    app.add_exception_handler(ClientDisconnect, _client_gone)
    mount_desk(app, runtime)

    app.add_api_route("/metrics", metrics.endpoint, methods=["GET"], include_in_schema=False)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.get("/readyz")
    async def readyz() -> Response:
        try:
            # Off the event loop and bounded: a database that hangs makes this replica
            # "unavailable" in 5 s, and never stalls the requests served beside the probe.
            policy = await asyncio.wait_for(asyncio.to_thread(_ready, runtime), READY_TIMEOUT_S)
        except TimeoutError:
            return JSONResponse(
                {"status": "unavailable", "reason": "store_timeout"}, status_code=503
            )
        except Exception as exc:  # noqa: BLE001 - any store failure means not ready
            reason = exc.reason if isinstance(exc, WardenError) else "store_unavailable"
            return JSONResponse({"status": "unavailable", "reason": reason}, status_code=503)
        return JSONResponse(
            {"status": "ready", "bundle": runtime.guardian.engine.bundle.ref.to_wire(), **policy}
        )

    fallback: ASGIApp = app if mcp_endpoint is None else PathMount(MCP_PATH, mcp_endpoint, app)
    endpoint = AcsEndpoint(runtime.acs, committer, fallback)
    if runtime.guardian.observers.tracer is None:
        return endpoint
    # Traces are exported: every wire's requests carry the caller's traceparent.
    return TraceContext(endpoint)


class _NoAnswer(Response):
    """Sends nothing: the client it would answer has gone."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        return None


async def _client_gone(request: Request, exc: Exception) -> Response:
    """A client that closed its connection before its body was read (``ClientDisconnect``
    from any route: ``/v1``, ``/adcp``, the log's): not a server error, so one DEBUG line
    and no answer, and nothing was changed (docs/decisions.md 1202)."""
    log.debug(
        "%s %s: the client went away before its body was read", request.method, request.url.path
    )
    return _NoAnswer()


def adcp_jwks(runtime: Runtime) -> dict[str, Any]:
    """``/.well-known/jwks.json``: the AdCP governance-token key, the key that signs RFC 9421
    webhooks (``adcp_use: request-signing``), then Warden's own signing keys."""
    assert runtime.adcp is not None
    keys = list(runtime.adcp.state.signer.jwks()["keys"])
    if runtime.webhook_signer is not None:
        keys.append(runtime.webhook_signer.public_jwk())
    if runtime.kla is not None:
        # Warden's own signing keys as at GET /v1/keys (Ed25519, and the ML-DSA-65 key
        # of ACS-Crypto responses, issue 21).
        keys += runtime.kla.signer.jwks()["keys"]
    return {"keys": keys}


def _ready(runtime: Runtime) -> dict[str, Any]:
    """The store answers a read and takes a write (rolled back): a database that is
    reachable but refuses writes (lock held, read-only, full) is not ready either.
    Returns the policy members of the answer (issue 19): ``active_bundle`` (the digest
    `warden policy activate` promoted, null if none), ``bundle_current`` (this replica
    serves it, or nothing was promoted) and the shadow candidate's reference."""
    from warden.policy.activation import active_row

    runtime.store.ping()
    runtime.store.probe_write()
    row = active_row(runtime.store)
    served = runtime.guardian.engine.bundle.ref.digest
    out: dict[str, Any] = {
        "active_bundle": row.digest if row is not None else None,
        "bundle_current": row is None or row.digest == served,
    }
    if runtime.shadow is not None:
        out["shadow_bundle"] = runtime.shadow.candidate.ref.to_wire()
    return out


class PathMount:
    """Serve one exact path (``/mcp``) with ``endpoint``, everything else with ``app``."""

    def __init__(self, path: str, endpoint: ASGIApp, app: ASGIApp) -> None:
        self.path = path
        self.endpoint = endpoint
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in (self.path, self.path + "/"):
            await self.endpoint(scope, receive, send)
        else:
            await self.app(scope, receive, send)
