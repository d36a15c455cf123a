"""The AdCP MCP endpoint is built on its first request (server/lazy_endpoint.py): a
server that is never asked over MCP never imports the MCP SDK (~0.3 s of every start),
and one that is serves ``/mcp`` as before (tests/adcp/test_adcp_mcp.py runs the tasks
through it with the official SDK client)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from warden.server.app import MCP_PATH
from warden.wire.adcp.mcp import PATH

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys, tempfile, threading, time
from pathlib import Path
import httpx, uvicorn
sys.path.insert(0, sys.argv[1])
from conftest import free_port
from warden.runtime import Runtime
from warden.settings import Settings
from warden.server.app import create_app

d = Path(tempfile.mkdtemp())
key = d / "ikm.key"
key.write_text(bytes(range(32)).hex())
key.chmod(0o600)
app = create_app(Runtime.start(Settings(data_dir=d, key_file=key)))
port = free_port()
server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
thread = threading.Thread(target=server.run)
thread.start()
while not server.started:
    assert thread.is_alive()
    time.sleep(0.02)
url = f"http://127.0.0.1:{port}"
seen = {"at_start": "mcp" in sys.modules}
seen["healthz"] = httpx.get(url + "/healthz").status_code
seen["at_ready"] = "mcp" in sys.modules
body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
headers = {"accept": "application/json, text/event-stream"}
seen["first"] = httpx.post(url + "/mcp", json=body, headers=headers).status_code
seen["after_first"] = "mcp" in sys.modules
seen["second"] = httpx.post(url + "/mcp", json=body, headers=headers).status_code
server.should_exit = True
thread.join(30)
seen["stopped"] = not thread.is_alive()
print(json.dumps(seen))
"""


def test_the_mcp_sdk_is_imported_by_the_first_mcp_request_only(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT / "tests")],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # No API key: the endpoint itself answers 401 (the key is checked before MCP).
    assert seen == {
        "at_start": False,
        "healthz": 200,
        "at_ready": False,
        "first": 401,
        "after_first": True,
        "second": 401,
        "stopped": True,
    }


def test_the_mount_path_is_the_wires() -> None:
    assert MCP_PATH == PATH == "/mcp"
