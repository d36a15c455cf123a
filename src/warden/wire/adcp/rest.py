"""The AdCP REST binding: ``POST /adcp/<task>`` with the request as a JSON body, and the
governance key set at ``GET /.well-known/jwks.json``.

The caller authenticates with a Warden API key, ``Authorization: Bearer <token>`` (or
``x-adcp-auth: <token>``, which the AdCP runner sends too). The answer is the task body
with the envelope fields at its JSON root (seed ``001_…`` "REST" serialization) and the
HTTP status of the outcome (200, 202 for an async submission, 4xx/5xx for a failure),
mirrored in ``X-AdCP-Status``. The request's ``context`` is echoed byte for byte: the
answer splices in the exact text the request carried.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from warden.adcp.bodies import media_type_problem, too_large
from warden.adcp.callers import echoed_context
from warden.adcp.errors import AdcpError
from warden.adcp.request_signing import RequestSigning
from warden.crypto.canonical import MAX_REQUEST_DEPTH, nesting_exceeds, parse_request_json
from warden.errors import ParseError
from warden.identity.api_keys import ApiKeys
from warden.wire.adcp.envelope import (
    dump_with_raw_context,
    echoable_context_id,
    failure,
    top_level_spans,
    unparsable,
)
from warden.wire.adcp.service import AdcpService, Reply
from warden.wire.adcp.signed import (
    identify_caller,
    lenient_json,
    request_url,
    www_authenticate,
)

log = logging.getLogger(__name__)

PREFIX = "/adcp"
JWKS_PATH = "/.well-known/jwks.json"


def render(reply: Reply, raw: str | None = None) -> Response:
    """A reply as HTTP: JSON body (``context`` spliced from ``raw``), status, headers."""
    raw_context = None
    if raw is not None and "context" in reply.body:
        span = top_level_spans(raw).get("context")
        raw_context = raw[span[0] : span[1]] if span is not None else None
    headers = {"X-AdCP-Status": str(reply.body.get("status", ""))}
    error = reply.body.get("adcp_error")
    if reply.http_status == 401:
        code = error.get("code") if isinstance(error, dict) else None
        headers["WWW-Authenticate"] = www_authenticate(str(code or ""))
    if isinstance(error, dict) and isinstance(error.get("retry_after"), int):
        headers["Retry-After"] = str(error["retry_after"])
    return Response(
        dump_with_raw_context(reply.body, raw_context),
        reply.http_status,
        media_type="application/json",
        headers=headers,
    )


def adcp_router(
    service: AdcpService,
    keys: ApiKeys,
    jwks: dict[str, Any],
    *,
    max_body_bytes: int,
    signing: RequestSigning | None = None,
    public_url: str = "",
) -> APIRouter:
    """``POST /adcp/{task}`` for every task of ``service``, and the JWKS. ``signing``
    verifies RFC 9421 signed requests against ``public_url`` (:mod:`.signed`)."""
    router = APIRouter(tags=["adcp governance agent"])

    @router.get(JWKS_PATH, summary="The governance-token signing keys (JWKS)")
    def get_jwks() -> JSONResponse:
        return JSONResponse(jwks, headers={"Cache-Control": "public, max-age=300"})

    @router.post(
        PREFIX + "/{task}",
        summary="Run an AdCP governance task (get_adcp_capabilities, sync_plans, "
        "check_governance, report_plan_outcome, get_plan_audit_logs, get_task_status)",
    )
    async def run_task(task: str, request: Request) -> Response:
        context_id, parsed, raw_bytes = "ctx_rest", None, b""
        try:
            raw_bytes = await _body(request, max_body_bytes)
            context_id = _context_id(raw_bytes) or context_id
            parsed, problem = _parsed(raw_bytes)
            # After the body's own problems, as on /mcp: a strict JSON object sent
            # without content-type: application/json (decision 831).
            problem = problem or media_type_problem(request.headers.get("content-type"))
            who, live = await run_in_threadpool(
                lambda: identify_caller(
                    keys,
                    signing,
                    method=request.method,
                    url=request_url(
                        public_url,
                        request.scope.get("raw_path") or request.url.path.encode(),
                        request.scope.get("query_string", b""),
                    ),
                    headers=[
                        (k.decode("latin-1"), v.decode("latin-1"))
                        for k, v in request.scope["headers"]
                    ],
                    body=raw_bytes,
                    task=task,
                    arguments=lenient_json(raw_bytes),
                    # From memory only when nothing here refuses the call before its
                    # transaction confirms the key (decision 810).
                    remember=problem is None,
                )
            )
            if problem is not None:
                raise problem
            # AUTH_INVALID from the call only for a key answered from memory and revoked
            # since: answered here as identify's own refusal.
            reply = await run_in_threadpool(service.call, task, parsed, who, live)
        except AdcpError as exc:  # the caller's context echoed if the body parsed
            ctx = echoed_context(parsed)
            body = failure(exc, context_id=context_id, context=ctx)
            return render(Reply(body, True, exc.http_status), raw_bytes.decode() if ctx else None)
        return render(reply, raw_bytes.decode("utf-8") if isinstance(parsed, dict) else None)

    @router.api_route(
        PREFIX + "/{task}", methods=["GET", "PUT", "PATCH", "DELETE"], include_in_schema=False
    )
    def wrong_method(task: str, request: Request) -> Response:
        err = AdcpError("UNSUPPORTED_FEATURE", f"{request.method} is not served; POST the task")
        response = render(Reply(failure(err, context_id="ctx_rest"), True, 405))
        response.headers["Allow"] = "POST"
        return response

    @router.api_route(PREFIX, methods=_ANY_METHOD, include_in_schema=False)
    @router.api_route(PREFIX + "/{rest:path}", methods=_ANY_METHOD, include_in_schema=False)
    def unknown_path(request: Request) -> Response:
        # /adcp, /adcp/ and /adcp/<task>/… (a trailing slash included): no task is
        # served there; answered in AdCP's format, never FastAPI's {"detail": …}.
        err = AdcpError(
            "UNSUPPORTED_FEATURE",
            "no AdCP task at this path; POST /adcp/<task> (no trailing slash)",
        )
        return render(Reply(failure(err, context_id="ctx_rest"), True, err.http_status))

    return router


_ANY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def _parsed(raw: bytes) -> tuple[Any, AdcpError | None]:
    """The body strictly parsed, or what to refuse it with once its caller is known."""
    if not raw.strip():
        # Not {}: an empty body is no request at all (a schema error would send the
        # caller looking for a missing field).
        return None, AdcpError("INVALID_REQUEST", "the body is empty; send one JSON object")
    try:
        return parse_request_json(raw), None
    except ParseError as exc:
        return None, unparsable(exc)


def _context_id(raw: bytes) -> str | None:
    """The caller's top-level ``context_id`` if the body is readable JSON within the
    nesting limit (for errors raised before the request is parsed strictly)."""
    if nesting_exceeds(raw, MAX_REQUEST_DEPTH):
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return echoable_context_id(value.get("context_id") if isinstance(value, dict) else None)


async def _body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)
