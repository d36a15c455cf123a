"""The MCP proxy: an MCP server to the client, an MCP client to the real server.

Built on the official ``mcp`` SDK: the low-level :class:`mcp.server.lowlevel.Server`
faces the client (stdio), and a :class:`mcp.client.session.ClientSession` over
``stdio_client`` (a server command) or ``streamable_http_client`` (a URL) faces the
real server. Every governed message goes through :class:`~warden.wire.mcp.gateway.
Gateway` first (issue 6; docs/decisions.md 88–96):

- ``initialize`` (observed in middleware; a refusal fails the handshake),
- ``tools/list``, ``resources/list``, ``resources/templates/list``, ``prompts/list``,
- ``tools/call``, ``resources/read``, ``prompts/get``: forwarded only on allow or
  modify, the upstream answer chained as the wrapped response step.

Only the capabilities the real server advertises are offered to the client.
Logs go to stderr: stdout is the MCP channel.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from warden.policy.bundle import Bundle
from warden.transport.mcp_direct_calls import DirectCalls
from warden.transport.stdio_channel import MAX_LINE, claim_stdio
from warden.transport.upstream_stdio import connect_stdio
from warden.wire.mcp.fast_path import serve_channel
from warden.wire.mcp.gateway import Gateway, Ruling, refusal
from warden.wire.mcp.outcome import (
    REFUSED_CODE,
    UnsupportedModification,
    modify_message,
    refusal_text,
    refused_tool_result,
    with_meta,
    withheld_tool_result,
)

log = logging.getLogger(__name__)

TOOLS_CALL = "protocols/MCP/tools/call"


@dataclass(frozen=True)
class Upstream:
    """The real MCP server: a command run over stdio, or a streamable HTTP URL."""

    command: tuple[str, ...] = ()
    url: str | None = None
    #: Every request to the real server (initialize included) gets an answer within
    #: this many seconds or fails (an MCP error to the client), so a stalled or dead
    #: server never hangs the proxy.
    timeout_s: float = 120.0
    #: The longest line read from the real server or the client (decision 900).
    max_line: int = MAX_LINE

    def __post_init__(self) -> None:
        if bool(self.command) == (self.url is not None):
            raise ValueError("give exactly one of a server command or an upstream URL")

    def describe(self) -> str:
        return self.url if self.url is not None else " ".join(self.command)

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[tuple[ClientSession, DirectCalls | None]]:
        """An initialized client session to the real server (closed on exit), and over
        stdio the side channel its ``tools/call`` take."""
        if self.url is not None:
            async with (
                streamable_http_client(self.url) as (read, write),
                ClientSession(read, write, read_timeout_seconds=self.timeout_s) as session,
            ):
                await session.initialize()
                yield session, None
            return
        if sys.platform != "win32":
            async with connect_stdio(
                self.command, self.timeout_s, max_line=self.max_line
            ) as connected:
                yield connected
            return
        params = StdioServerParameters(command=self.command[0], args=list(self.command[1:]))
        async with stdio_client(params, errlog=sys.stderr) as (read, write):
            # tools/call goes straight to the transport (DirectCalls); the rest through
            # the session, which gets every message but the answers to those calls.
            direct = DirectCalls(write, self.timeout_s)
            to_session, session_read = anyio.create_memory_object_stream[
                SessionMessage | Exception
            ](0)
            async with anyio.create_task_group() as tg:
                tg.start_soon(direct.route, read, to_session)
                async with ClientSession(
                    session_read, write, read_timeout_seconds=self.timeout_s
                ) as session:
                    await session.initialize()
                    direct.session = session
                    yield session, direct
                tg.cancel_scope.cancel()


def hidden_tools(bundle: Bundle, names: Sequence[str]) -> frozenset[str]:
    """Tools the bundle denies whatever the arguments: a ``deny`` rule without
    ``when`` that targets ``protocols/MCP/tools/call`` and names the tool in its
    ``tools`` globs. (A tool denied only by the bundle's default or by a condition
    stays listed; calling it is still decided per call.)"""
    out = set()
    for name in names:
        for rule in bundle.rules:
            if (
                rule.effect.value == "deny"
                and rule.condition is None
                and rule.tools is not None
                and rule.matches_method(TOOLS_CALL)
                and rule.matches_tool(name)
            ):
                out.add(name)
                break
    return frozenset(out)


def _dump(model: BaseModel) -> dict[str, Any]:
    out: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return out


class Proxy:
    """The governed bridge of one connection: client-facing handlers over an open
    upstream session and the connection's :class:`Gateway`."""

    def __init__(
        self,
        gateway: Gateway,
        upstream: ClientSession,
        *,
        bundle: Bundle | None = None,
        hide_denied: bool = False,
        direct: DirectCalls | None = None,
    ) -> None:
        self.gateway = gateway
        self.upstream = upstream
        self.direct = direct
        self.bundle = bundle
        self.hide_denied = hide_denied and bundle is not None
        self._hidden: frozenset[str] = frozenset()
        #: The protocol version the client negotiated, once ``tools/call`` may take the
        #: fast path (:mod:`warden.wire.mcp.fast_path`); None until then.
        self.fast_version: str | None = None
        #: Whether the client's ``initialize`` was answered (decision 902).
        self.initialized = False

    # -- the gateway, one ACS step at a time (one session chain) ---------------------
    # Run on the event loop itself, not a worker thread: a step is synchronous, so
    # steps never interleave (the session chain is one sequence) and each saves two
    # thread switches (docs/decisions.md 652).

    async def check(self, message: dict[str, Any]) -> Ruling:
        return self.gateway.check(message)

    async def record(
        self, request: dict[str, Any], response: dict[str, Any], ruling: Ruling, failed: bool
    ) -> Ruling:
        return self.gateway.record(request, response, ruling, failed=failed)

    # -- handlers ----------------------------------------------------------------------

    async def initialize_gate(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> Any:
        """Middleware: ``initialize`` is a governed step; a refusal fails the handshake."""
        if ctx.method == "initialize" and ctx.request_id is not None:
            ruling = await self.check(_message(ctx))
            if not ruling.forwards:
                raise MCPError(
                    REFUSED_CODE,
                    refusal_text(ruling, "initialize"),
                    {"warden": ruling.meta()},
                )
        try:
            result = await call_next(ctx)
        except MCPError as exc:
            if self.initialized:
                raise
            raise _before_initialize(exc, ctx.method) from None
        if ctx.method == "initialize" and isinstance(result, dict):
            self.initialized = True
            # The fast path answers tools/call itself only on a handshake-era connection
            # whose version it knows, and only where the SDK would serve tools/call.
            version = result.get("protocolVersion")
            tools = (self.upstream.server_capabilities or types.ServerCapabilities()).tools
            legacy = isinstance(version, str) and version not in MODERN_PROTOCOL_VERSIONS
            self.fast_version = version if legacy and tools is not None else None
        return result

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> HandlerResult:
        return await self.govern_tool_call(_message(ctx), params.name)

    async def govern_tool_call(self, message: dict[str, Any], name: str) -> dict[str, Any]:
        """Decide, forward and chain one ``tools/call`` (the intact JSON-RPC request);
        the ``CallToolResult`` for the client (wire JSON), or :class:`MCPError` for an
        upstream error answer."""
        ruling = await self.check(message)
        if ruling.forwards and name in self._hidden:
            ruling = refusal(
                "tool_hidden",
                "This tool is hidden by policy (denied for any arguments).",
                ruling.request_id,
            )
        if not ruling.forwards:
            return refused_tool_result(ruling, name)
        sent = message
        if ruling.decision == "modify":
            try:
                sent = modify_message(message, ruling.result.get("modifications") or {})
            except UnsupportedModification as exc:
                log.error("cannot apply a modification to tools/call %s: %s", name, exc)
                return refused_tool_result(
                    refusal("modification_unsupported", str(exc), ruling.request_id), name
                )
        arguments = (sent.get("params") or {}).get("arguments")
        failed = False
        try:
            args = arguments if isinstance(arguments, dict) else None
            if self.direct is not None and self.direct.usable:
                result = await self.direct.call_tool(name, args)
            else:
                result = await self.upstream.call_tool(name, args)
            response: dict[str, Any] = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "result": _dump(result),
            }
            failed = bool(getattr(result, "is_error", False))
        except MCPError as exc:
            response = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": exc.code, "message": exc.message},
            }
            failed = True
        except Exception as exc:  # noqa: BLE001 - the SDK's checks refused the server's answer
            # (not a CallToolResult, or outside the tool's output schema): the tool ran, so
            # its refused answer is chained and the client told why (decision 295).
            log.warning("the MCP server's answer to tools/call %s was refused: %s", name, exc)
            text = " ".join(str(exc).split())[:300]
            response = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {
                    "code": -32603,
                    "message": f"the MCP server's answer was refused: {text}",
                },
            }
            failed = True
        answer = await self.record(sent, response, ruling, failed)
        response = answer.replaced or response  # refused and chained as an error (1037)
        if not answer.forwards:
            return withheld_tool_result(answer, name)
        if answer.decision == "modify":
            try:
                response = modify_message(response, answer.result.get("modifications") or {})
            except UnsupportedModification:
                return withheld_tool_result(
                    refusal("modification_unsupported", "", answer.request_id), name
                )
        warden = ruling.meta()
        if ruling.decision == "modify":
            warden["modified"] = ruling.result.get("modifications")
        warden["result"] = answer.meta()
        if "error" in response:
            err = response["error"]
            raise MCPError(int(err["code"]), str(err["message"]), {"warden": warden})
        out: dict[str, Any] = with_meta(response["result"], warden)
        return out

    def forwarder(
        self, call: Callable[[dict[str, Any]], Awaitable[BaseModel]], *, listing_tools: bool = False
    ) -> Callable[[ServerRequestContext[Any, Any], Any], Awaitable[HandlerResult]]:
        """A handler for a request without an error result (lists, ``resources/read``,
        ``prompts/get``): decided, forwarded with ``call(params)``, its answer chained;
        a refusal is an MCP error response carrying the refusal text."""

        async def handle(ctx: ServerRequestContext[Any, Any], _params: Any) -> HandlerResult:
            message = _message(ctx)
            what = str(message["method"])
            ruling = await self.check(message)
            if not ruling.forwards:
                raise MCPError(REFUSED_CODE, refusal_text(ruling, what), {"warden": ruling.meta()})
            sent = message
            if ruling.decision == "modify":
                try:
                    sent = modify_message(message, ruling.result.get("modifications") or {})
                except UnsupportedModification as exc:
                    bad = refusal("modification_unsupported", str(exc), ruling.request_id)
                    raise MCPError(REFUSED_CODE, refusal_text(bad, what)) from exc
            try:
                result = _dump(await call(dict(sent.get("params") or {})))
            except MCPError as exc:
                response = {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "error": {"code": exc.code, "message": exc.message},
                }
                await self.record(sent, response, ruling, True)
                raise
            response = {"jsonrpc": "2.0", "id": message["id"], "result": result}
            answer = await self.record(sent, response, ruling, False)
            if not answer.forwards:
                raise MCPError(
                    REFUSED_CODE,
                    refusal_text(answer, f"the result of {what}"),
                    {"warden": answer.meta()},
                )
            if answer.replaced is not None:  # refused and chained as an error (1037)
                err = answer.replaced["error"]
                warden = ruling.meta() | {"result": answer.meta()}
                raise MCPError(int(err["code"]), str(err["message"]), {"warden": warden})
            if answer.decision == "modify":
                try:
                    response = modify_message(response, answer.result.get("modifications") or {})
                except UnsupportedModification as exc:
                    raise MCPError(REFUSED_CODE, f"Warden withheld the result of {what}.") from exc
            result = response["result"]
            if listing_tools and self.hide_denied and self.bundle is not None:
                tools = [t for t in result.get("tools", []) if isinstance(t, dict)]
                self._hidden = self._hidden | hidden_tools(
                    self.bundle, [str(t.get("name", "")) for t in tools]
                )
                result = {
                    **result,
                    "tools": [t for t in tools if t.get("name") not in self._hidden],
                }
            warden = ruling.meta()
            warden["result"] = answer.meta()
            out: dict[str, Any] = with_meta(result, warden)
            return out

        return handle

    def server(self) -> Server[Any]:
        """The client-facing MCP server, offering what the real server offers."""
        caps = self.upstream.server_capabilities or types.ServerCapabilities()
        info = self.upstream.server_info
        up = self.upstream
        server: Server[Any] = Server(
            "warden-mcp-proxy",
            version=info.version if info is not None else "",
            instructions=self.upstream.instructions,
        )
        server.middleware.append(self.initialize_gate)
        if caps.tools is not None:
            server.add_request_handler(
                "tools/list",
                types.PaginatedRequestParams,
                self.forwarder(
                    lambda p: up.list_tools(params=types.PaginatedRequestParams.model_validate(p)),
                    listing_tools=True,
                ),
            )
            server.add_request_handler("tools/call", types.CallToolRequestParams, self.call_tool)
        if caps.resources is not None:
            server.add_request_handler(
                "resources/list",
                types.PaginatedRequestParams,
                self.forwarder(
                    lambda p: up.list_resources(
                        params=types.PaginatedRequestParams.model_validate(p)
                    )
                ),
            )
            server.add_request_handler(
                "resources/templates/list",
                types.PaginatedRequestParams,
                self.forwarder(
                    lambda p: up.list_resource_templates(
                        params=types.PaginatedRequestParams.model_validate(p)
                    )
                ),
            )
            server.add_request_handler(
                "resources/read",
                types.ReadResourceRequestParams,
                self.forwarder(lambda p: up.read_resource(str(p.get("uri", "")))),
            )
        if caps.prompts is not None:
            server.add_request_handler(
                "prompts/list",
                types.PaginatedRequestParams,
                self.forwarder(
                    lambda p: up.list_prompts(params=types.PaginatedRequestParams.model_validate(p))
                ),
            )
            server.add_request_handler(
                "prompts/get",
                types.GetPromptRequestParams,
                self.forwarder(lambda p: up.get_prompt(str(p.get("name", "")), p.get("arguments"))),
            )
        return server


def _before_initialize(exc: MCPError, method: str) -> MCPError:
    """The SDK's refusal of a request before the handshake (INVALID_PARAMS, ``data: ""``)
    with a message that says so (decision 902); any other error as it is."""
    if exc.code != types.INVALID_PARAMS or exc.error.data != "":
        return exc
    return MCPError(
        types.INVALID_PARAMS,
        f"Invalid request: {method} before initialize; MCP requires the client to send "
        "initialize, and wait for its answer, before any request but ping",
    )


def _message(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
    """The intact MCP JSON-RPC request the handler answers."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": ctx.request_id, "method": ctx.method}
    if ctx.params is not None:
        message["params"] = dict(ctx.params)
    return message


async def serve_stdio(
    gateway: Gateway,
    upstream: Upstream,
    *,
    bundle: Bundle | None = None,
    hide_denied: bool = False,
) -> None:
    """Connect to ``upstream``, open the gateway's ACS session and serve one MCP
    client on this process's stdin/stdout until it disconnects; then seal the session
    and stop the real server."""
    async with upstream.connect() as (session, direct):
        await anyio.to_thread.run_sync(gateway.open)
        try:
            proxy = Proxy(gateway, session, bundle=bundle, hide_denied=hide_denied, direct=direct)
            server = proxy.server()
            with claim_stdio(upstream.max_line) as channel:
                await serve_channel(proxy, server, channel)
        finally:
            await anyio.to_thread.run_sync(gateway.close)
