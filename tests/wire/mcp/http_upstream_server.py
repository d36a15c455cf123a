"""A tiny streamable-HTTP MCP server for the ``--upstream`` tests (the official SDK's
``MCPServer``, FastMCP's name since mcp 2).

    python http_upstream_server.py PORT CALLS_FILE

Serves ``http://127.0.0.1:PORT/mcp``. Every tool call it runs is appended to
CALLS_FILE as one JSON line, so a test can prove which calls reached it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

PORT = int(sys.argv[1])
CALLS = Path(sys.argv[2])

server = MCPServer("warden-test-upstream", version="0.0.1", log_level="WARNING")


def seen(tool: str, **arguments: str) -> None:
    with CALLS.open("a") as fh:
        fh.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    seen("echo", text=text)
    return f"echo: {text}"


@server.tool()
def delete_item(name: str) -> str:
    """Delete an item (here: only record that it was asked to)."""
    seen("delete_item", name=name)
    return f"deleted {name}"


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=PORT)
