"""A scripted Claude: a loopback HTTP server speaking the Anthropic Messages API
(``POST /v1/messages``, streamed as server-sent events), so that the real Claude Code
CLI (bundled with the ``claude-agent-sdk`` wheel) runs offline, without an API key.

Each model turn answers with the next scripted tool use; the turn number is the number
of ``tool_result`` blocks in the conversation so far. After the script, it answers text.
``before_turn(n)`` runs before turn ``n`` is answered (a test approves a desk task
there). The stream is the documented event sequence: message_start,
content_block_start/delta/stop, message_delta, message_stop.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from claude_agent_sdk import __file__ as _sdk_file

#: The Claude Code CLI the SDK wheel ships.
BUNDLED_CLI = Path(_sdk_file).parent / "_bundled" / "claude"


@dataclass
class Script:
    tool_uses: list[tuple[str, dict[str, Any]]]
    before_turn: Callable[[int], None] = lambda n: None
    requests: list[dict[str, Any]] = field(default_factory=list)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _turn_of(body: dict[str, Any]) -> int:
    return sum(
        1
        for m in body.get("messages", [])
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    )


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self.send_response(404)
            self.end_headers()

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            script.requests.append(body)
            turn = _turn_of(body)
            script.before_turn(turn)
            if turn < len(script.tool_uses):
                name, tool_input = script.tool_uses[turn]
                block: dict[str, Any] = {"type": "tool_use", "id": f"toolu_{turn:03d}",
                                         "name": name, "input": {}}  # fmt: skip
                delta = {"type": "input_json_delta", "partial_json": json.dumps(tool_input)}
                stop = "tool_use"
            else:
                block = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": "Done."}
                stop = "end_turn"
            message = {
                "id": f"msg_{turn:03d}", "type": "message", "role": "assistant",
                "model": body.get("model", "scripted"), "content": [], "stop_reason": None,
                "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
            }  # fmt: skip
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for event, data in (
                ("message_start", {"type": "message_start", "message": message}),
                ("content_block_start",
                 {"type": "content_block_start", "index": 0, "content_block": block}),
                ("content_block_delta",
                 {"type": "content_block_delta", "index": 0, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": stop, "stop_sequence": None},
                                   "usage": {"output_tokens": 1}}),
                ("message_stop", {"type": "message_stop"}),
            ):  # fmt: skip
                self.wfile.write(_sse(event, data))
            self.wfile.flush()

    return Handler


@contextmanager
def scripted_claude(script: Script) -> Iterator[str]:
    """Serve ``script`` on loopback; yields the base URL for ``ANTHROPIC_BASE_URL``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def offline_env(base_url: str, home: Path) -> dict[str, str]:
    """The CLI's environment: the scripted model, a throwaway HOME, no telemetry."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-test-offline",
        "HOME": str(home),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
