"""Driving ``warden mcp-proxy`` with the official MCP SDK's client, over stdio.

The proxy runs as ``python -m warden mcp-proxy … -- <real server>`` in a child
process; the tests talk to it exactly as an MCP client would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import yaml
from conftest import agent_credential, write_key
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parents[3]
MCP_BUNDLE = ROOT / "examples" / "policies" / "mcp.yaml"
NODE_DIR = Path(__file__).resolve().parent / "node"
FILESYSTEM_SERVER = NODE_DIR / "node_modules" / ".bin" / "mcp-server-filesystem"


#: A raw client's ``initialize`` request and ``initialized`` notification (lines
#: written to a proxy's stdin by the tests that bypass the SDK client).
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def allow_all_bundle(bundle_id: str) -> str:
    """A bundle that allows every MCP message, the tool results and the session's end
    (for tests of the proxy's transport and shutdown, not of policy)."""
    return f"""\
warden_bundle: 1
id: {bundle_id}
version: "1"
default: deny
rules:
  - id: everything
    hooks: ["protocols/MCP/*", steps/sessionEnd, steps/toolCallResult]
    effect: allow
"""


def mcp_bundle(tmp_path: Path, writable_root: Path) -> Path:
    """The shipped MCP bundle with ``data.writable_roots`` pointed at ``writable_root``."""
    spec = yaml.safe_load(MCP_BUNDLE.read_text())
    spec["data"]["writable_roots"] = [f"{writable_root}/"]
    out = tmp_path / "mcp-bundle.yaml"
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return out


def agent_key_file(data_dir: Path, agent_id: str = "test-agent") -> Path:
    """Register ``agent_id`` in the data directory's database (created if absent, keyed by
    TEST_IKM) and write its key file (0600) beside it; the file's path."""
    from warden.store import open_store

    key = data_dir / "agents" / f"{agent_id}.key"
    if key.exists():
        return key
    if not (data_dir / "ikm.key").exists():
        write_key(data_dir / "ikm.key")
    store = open_store(f"sqlite:///{data_dir / 'warden.db'}")
    store.close()
    agent_credential(f"sqlite:///{data_dir / 'warden.db'}", agent_id).write(key)
    return key


@asynccontextmanager
async def proxied(
    data_dir: Path, policy: Path, server: list[str], *extra: str
) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session to the real ``server`` through the proxy, which
    runs as the registered agent ``test-agent`` (:func:`agent_key_file`)."""
    key = agent_key_file(data_dir)
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "warden",
            "mcp-proxy",
            "--data-dir",
            str(data_dir),
            "--policy",
            str(policy),
            "--agent-key",
            str(key),
            *extra,
            "--",
            *server,
        ],
        cwd=str(ROOT),
        # The SDK passes a child only a few variables by default; keep PYTHONPATH and the
        # rest, so the proxy runs the code under test (e.g. from a git worktree).
        env=dict(os.environ),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def warden_meta(result: types.CallToolResult) -> dict[str, Any]:
    meta = result.meta or {}
    out: dict[str, Any] = meta["warden"]
    return out


def verify(data_dir: Path) -> subprocess.CompletedProcess[str]:
    """``warden verify --data-dir`` (the chains of every session, the desk's included)."""
    return subprocess.run(
        [sys.executable, "-m", "warden", "verify", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
        check=False,
    )
