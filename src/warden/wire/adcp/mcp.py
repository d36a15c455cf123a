"""The AdCP MCP binding: one tool per task over MCP Streamable HTTP at ``/mcp`` (the
official ``mcp`` SDK's low-level server, stateless, plain JSON responses).

A tool result carries the whole AdCP response in ``structuredContent`` — envelope
fields and body fields side by side at its root, as the seed ``001_…`` prescribes for
MCP — with a JSON text copy in ``content[0]``; a failure also sets ``isError`` and
carries ``errors[]`` and ``adcp_error``. Every HTTP request must present a Warden API
key (``Authorization: Bearer`` or ``x-adcp-auth``) or an RFC 9421 signature by a
registered agent's key (:mod:`.signed`); one without either is refused with 401 before
MCP sees it. Sessions are stateless, so reconnecting costs nothing.
"""

from __future__ import annotations

import json
import math
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from warden import __version__
from warden.adcp.bodies import media_type_problem, too_large
from warden.adcp.callers import Caller, echoed_context, still_live
from warden.adcp.errors import AdcpError
from warden.adcp.request_signing import RequestSigning
from warden.crypto.canonical import MAX_REQUEST_DEPTH, nesting_exceeds, parse_request_json
from warden.errors import ParseError
from warden.identity.api_keys import ApiKeys
from warden.wire.adcp.envelope import echoable_context_id, failure, unparsable
from warden.wire.adcp.schemas import bundled_request_schema
from warden.wire.adcp.service import AdcpService, Reply
from warden.wire.adcp.signed import authenticate, identify_caller, request_url, www_authenticate
from warden.wire.mcp.bad_input import Rejection, message_of

PATH = "/mcp"

DESCRIPTIONS = {
    "get_adcp_capabilities": "AdCP protocol capabilities: versions, idempotency window, "
    "governance support.",
    "sync_plans": "Create or update campaign governance plans (budgets, flight, policies).",
    "check_governance": "Ask the governance agent whether a governed action may proceed "
    "(intent check) or a prepared buy may commit (execution check).",
    "report_plan_outcome": "Report what happened to a governed action (settles its budget).",
    "report_plan_adjustment": "Report (seller) or review (plan owner) a decommitment, "
    "refund, credit or makegood on a completed outcome.",
    "get_plan_audit_logs": "Read a plan's governance audit log, budget and summary.",
    "get_task_status": "Poll an async task (a check_governance under human review).",
}
OPEN_OBJECT = {"type": "object", "additionalProperties": True}


IDENTITY_KEY = "warden_adcp_caller"
#: A remembered key the tool's transaction found revoked: the endpoint answers the HTTP
#: request as it answers an unknown key (decision 813).
REFUSED_KEY = "warden_adcp_refused"


def _known_caller(request: Any) -> tuple[dict[str, Any], Caller] | None:
    """The caller :class:`AdcpMcpEndpoint` identified for this HTTP request, if any."""
    state = getattr(request, "scope", {}).get("state") if request is not None else None
    who = state.get(IDENTITY_KEY) if isinstance(state, dict) else None
    return (state, who) if isinstance(state, dict) and isinstance(who, Caller) else None


def tool_result(reply: Reply) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(reply.body, ensure_ascii=False))],
        structured_content=reply.body,
        is_error=reply.failed,
    )


def build_server(service: AdcpService, keys: ApiKeys) -> Server[Any]:
    """The MCP server: ``tools/list`` names the tasks; ``tools/call`` runs one."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t,
                    description=DESCRIPTIONS.get(t, t),
                    input_schema=bundled_request_schema(t) or OPEN_OBJECT,
                )
                for t in service.tasks
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        cid = echoable_context_id((params.arguments or {}).get("context_id")) or "ctx_mcp"
        known = _known_caller(ctx.request)
        try:
            if known is not None:
                who, live = known[1]
            else:
                headers = ctx.request.headers if ctx.request is not None else {}
                who, live = await anyio.to_thread.run_sync(authenticate, keys, headers), None
            arguments = dict(params.arguments or {})
            reply = await anyio.to_thread.run_sync(service.call, params.name, arguments, who, live)
        except AdcpError as exc:  # the key, or a remembered key revoked since (decision 813)
            if known is not None:
                known[0][REFUSED_KEY] = exc
            return tool_result(Reply(failure(exc, context_id=cid), True, exc.http_status))
        return tool_result(reply)

    return Server(
        "warden-adcp-governance",
        version=__version__,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


class AdcpMcpEndpoint:
    """The ``/mcp`` ASGI app: the body read (at most ``max_body_bytes``) and parsed
    strictly, the API key checked, then the stateless MCP transport.
    :meth:`run` must be entered for the app's lifetime (the SDK's session manager).

    What the SDK would take or answer in its own way is answered here in AdCP's error
    format, as on REST: a body over the limit (413), a body that is not strict JSON
    (duplicate keys, ``NaN``/``Infinity``: 400, or inside a ``tools/call`` its
    JSON-RPC result with ``isError``) or not sent as ``application/json`` (415),
    ``tools/call`` arguments that are not an object, and any method but POST (405).
    JSON that is no JSON-RPC 2.0 message (a batch, no ``jsonrpc``, an ``id`` that is
    not a string or an integer) is ``-32600`` as the proxy words it (400)."""

    def __init__(
        self,
        service: AdcpService,
        keys: ApiKeys,
        *,
        max_body_bytes: int = 1 << 20,
        signing: RequestSigning | None = None,
        public_url: str = "",
    ) -> None:
        self.keys = keys
        self.max_body_bytes = max_body_bytes
        self.signing = signing
        self.public_url = public_url
        self.manager = StreamableHTTPSessionManager(
            build_server(service, keys), stateless=True, json_response=True
        )

    def run(self) -> AbstractAsyncContextManager[None]:
        return self.manager.run()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            raw = await _read(receive, headers, self.max_body_bytes)
        except AdcpError as exc:
            await _fail(send, exc.http_status, exc, "ctx_mcp")
            return
        lenient = _lenient(raw)
        context_id = _context_id(lenient)
        call_params = (
            lenient.get("params")
            if isinstance(lenient, dict) and lenient.get("method") == "tools/call"
            else None
        )
        task = call_params.get("name") if isinstance(call_params, dict) else None
        arguments = call_params.get("arguments") if isinstance(call_params, dict) else None
        lines = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
        url = request_url(self.public_url, raw_path, scope.get("query_string", b""))
        call = (
            lenient if isinstance(lenient, dict) and lenient.get("method") == "tools/call" else None
        )
        problem = _problem(raw, call, headers.get("content-type"))
        checked = message_of(lenient) if problem is None else None
        rejection = checked if isinstance(checked, Rejection) else None
        context = echoed_context(arguments) if problem is None else None  # echoed on a 401
        try:
            caller = await anyio.to_thread.run_sync(
                lambda: identify_caller(
                    self.keys,
                    self.signing,
                    method=scope["method"],
                    url=url,
                    headers=lines,
                    body=raw,
                    task=task if isinstance(task, str) else None,
                    arguments=arguments,
                    # From memory only when nothing here refuses the call before the
                    # tool's transaction confirms the key (decisions 810, 813).
                    remember=scope["method"] == "POST" and problem is None and rejection is None,
                )
            )
        except AdcpError as exc:
            await _refuse(send, exc, context_id, context)
            return
        # The tool handler runs on this scope: it takes the caller from here, so a
        # signed request is verified (and its nonce spent) exactly once.
        state = scope.setdefault("state", {})
        state[IDENTITY_KEY] = caller
        if scope["method"] != "POST":
            # Stateless JSON: no server-to-client stream (GET) and no session to end
            # (DELETE); clients such as the AdCP runner cope with 405.
            err = AdcpError("UNSUPPORTED_FEATURE", f"{scope['method']} is not served; POST")
            await _fail(send, 405, err, context_id, [(b"allow", b"POST")])
            return
        if problem is not None:
            if call is not None and "id" in call and _echoable_id(call["id"]):
                body = failure(problem, context_id=context_id)
                result = tool_result(Reply(body, True, problem.http_status))
                answer = {
                    "jsonrpc": "2.0",
                    "id": call["id"],
                    "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
                }
                data = json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
                await _respond(send, 200, data.encode("utf-8"), [])
            else:
                await _fail(send, problem.http_status, problem, context_id)
            return
        if rejection is not None:  # not JSON-RPC 2.0: the SDK's answer is a pydantic dump
            await _respond(send, 400, rejection.http_answer, [])
            return
        # Media types are case-insensitive; the SDK's check is not (decision 832).
        scope["headers"] = [
            (k, b"application/json") if k.lower() == b"content-type" else (k, v)
            for k, v in scope["headers"]
        ]

        async def send_unless_refused(message: Any) -> None:
            # A remembered key the tool's transaction found revoked: the SDK's answer is
            # replaced by the endpoint's own refusal, as for an unknown key. If the SDK
            # answered without running the tool, the key is read first.
            live = caller.live
            if message["type"] == "http.response.start" and live and not live.confirmed:
                try:
                    await anyio.to_thread.run_sync(still_live, live, REFUSED_KEY not in state)
                except AdcpError as exc:
                    state[REFUSED_KEY] = exc
            refused = state.get(REFUSED_KEY)
            if refused is None:
                await send(message)
            elif message["type"] == "http.response.start":
                await _refuse(send, refused, context_id, context)

        await self.manager.handle_request(scope, _replay(raw), send_unless_refused)


async def _refuse(send: Send, exc: AdcpError, context_id: str, context: Any = None) -> None:
    """The endpoint's answer to a caller it cannot identify: 503 when the key table
    cannot be read (the store is down), else 401 with its ``WWW-Authenticate``."""
    if exc.http_status == 503:
        retry = str(exc.retry_after or 1).encode()
        await _fail(send, 503, exc, context_id, [(b"retry-after", retry)], context)
        return
    challenge = www_authenticate(exc.code).encode("latin-1")
    await _fail(send, 401, exc, context_id, [(b"www-authenticate", challenge)], context)


def _problem(raw: bytes, call: dict[str, Any] | None, media: str | None) -> AdcpError | None:
    """What the body is refused with once its caller is known: not strict JSON, not
    sent as JSON, or a ``tools/call`` whose arguments are not an object."""
    try:
        parse_request_json(raw)
    except ParseError as exc:
        return unparsable(exc)
    if (wrong_media := media_type_problem(media)) is not None:
        return wrong_media
    params = call.get("params") if call is not None else None
    arguments = params.get("arguments") if isinstance(params, dict) else None
    if arguments is not None and not isinstance(arguments, dict):
        return AdcpError("INVALID_REQUEST", "tools/call arguments must be one JSON object")
    return None


async def _read(receive: Receive, headers: dict[str, str], limit: int) -> bytes:
    """The whole request body; ``INVALID_REQUEST`` (413) past ``limit`` bytes."""
    too_big = too_large(limit)
    length = headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_big
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_big
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(raw: bytes) -> Receive:
    """A ``receive`` that hands the already-read body to the transport once."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    return receive


def _lenient(raw: bytes) -> Any:
    """The body as plain ``json`` reads it (last duplicate wins), or None (also when it
    nests deeper than the request limit: it is refused anyway)."""
    if nesting_exceeds(raw, MAX_REQUEST_DEPTH):
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _echoable_id(value: Any) -> bool:
    """A JSON-RPC id the answer can carry: a finite number, or a string that is valid
    Unicode (a lone surrogate or ``1e400`` has no strict JSON spelling); not null
    (decision 834)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return echoable_context_id(value) is not None or value == ""


def _context_id(message: Any) -> str:
    """The caller's ``context_id`` in a ``tools/call``'s arguments, when there is one."""
    params = message.get("params") if isinstance(message, dict) else None
    args = params.get("arguments") if isinstance(params, dict) else None
    value = args.get("context_id") if isinstance(args, dict) else None
    return echoable_context_id(value) or "ctx_mcp"


async def _fail(
    send: Send,
    status: int,
    err: AdcpError,
    context_id: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    context: Any = None,
) -> None:
    body = json.dumps(
        failure(err, context_id=context_id, context=context),
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8")
    await _respond(send, status, body, headers or [])


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
