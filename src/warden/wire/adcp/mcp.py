"""The AdCP MCP binding: one tool per task over MCP Streamable HTTP at ``/mcp`` (the
official ``mcp`` SDK's low-level server, stateless, plain JSON responses).

A tool result carries the whole AdCP response in ``structuredContent`` — envelope
fields and body fields side by side at its root, as the seed ``001_…`` prescribes for
MCP — with a JSON text copy in ``content[0]``; a failure also sets ``isError`` and
carries ``errors[]`` and ``adcp_error``. Every HTTP request must present a Warden API
key (``Authorization: Bearer`` or ``x-adcp-auth``); one without a valid key is refused
with 401 before MCP sees it. Sessions are stateless, so reconnecting costs nothing.
"""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from warden import __version__
from warden.identity.api_keys import ApiKeys
from warden.wire.adcp.envelope import AdcpError, failure
from warden.wire.adcp.rest import authenticate
from warden.wire.adcp.service import AdcpService, Reply

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
                types.Tool(name=t, description=DESCRIPTIONS.get(t, t), input_schema=OPEN_OBJECT)
                for t in service.tasks
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            headers = ctx.request.headers if ctx.request is not None else {}
            who = authenticate(keys, headers)
        except AdcpError as exc:
            return tool_result(Reply(failure(exc, context_id="ctx_mcp"), True, exc.http_status))
        arguments = dict(params.arguments or {})
        reply = await anyio.to_thread.run_sync(service.call, params.name, arguments, who)
        return tool_result(reply)

    return Server(
        "warden-adcp-governance",
        version=__version__,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


class AdcpMcpEndpoint:
    """The ``/mcp`` ASGI app: API-key check first, then the stateless MCP transport.
    :meth:`run` must be entered for the app's lifetime (the SDK's session manager)."""

    def __init__(self, service: AdcpService, keys: ApiKeys) -> None:
        self.keys = keys
        self.manager = StreamableHTTPSessionManager(
            build_server(service, keys), stateless=True, json_response=True
        )

    def run(self) -> AbstractAsyncContextManager[None]:
        return self.manager.run()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            await anyio.to_thread.run_sync(authenticate, self.keys, headers)
        except AdcpError as exc:
            body = json.dumps(
                failure(exc, context_id="ctx_mcp"), ensure_ascii=False, separators=(",", ":")
            ).encode("utf-8")
            await _respond(send, 401, body, [(b"www-authenticate", b'Bearer realm="warden"')])
            return
        if scope["method"] != "POST":
            # Stateless JSON: no server-to-client stream (GET) and no session to end
            # (DELETE); clients such as the AdCP runner cope with 405.
            await _respond(send, 405, b'{"detail":"Method Not Allowed"}', [(b"allow", b"POST")])
            return
        await self.manager.handle_request(scope, receive, send)


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
