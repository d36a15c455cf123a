"""The MCP gateway (issue 6): Warden in front of a real MCP server.

:mod:`warden.wire.mcp.gateway` governs one MCP connection as one signed ACS session
(every ``tools/call``, ``resources/read``, ``prompts/get`` and ``tools/list`` is a
wrapped ``protocols/MCP/*`` step, every upstream result the wrapped response step);
:mod:`warden.wire.mcp.outcome` turns a ruling into what the MCP client sees;
:mod:`warden.wire.mcp.proxy` is the MCP server to the client and the MCP client to
the real server, built on the official ``mcp`` SDK. The wire never decides: the
Guardian behind the ACS service does.
"""

from warden.wire.mcp.gateway import Gateway, Ruling
from warden.wire.mcp.proxy import Upstream, serve_stdio

__all__ = ["Gateway", "Ruling", "Upstream", "serve_stdio"]
