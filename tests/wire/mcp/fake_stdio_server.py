"""A minimal MCP server over stdio for the upstream transport's tests.

Tools: ``echo`` (answers its arguments as text), ``die`` (the process exits before
answering) and ``slow`` (never answered); unlisted, ``big`` (a 2 MiB text result) and
``bad`` (a result that is no ``CallToolResult``), ``nan`` (``NaN`` and ``Infinity`` in its
``structuredContent``) and ``dup`` (a duplicate key in it): not strict JSON; ``bigint``
(2**64 in its ``structuredContent``: beyond what JSON interop carries exactly). With
``stubborn`` on the command line it ignores the end of its stdin and waits to be
signalled; with ``chatty`` it writes 1 MiB to stdout when its stdin ends (the proxy must
drain it for the server to exit); with ``biglist`` its ``tools/list`` holds 2**64."""

from __future__ import annotations

import json
import os
import sys
import time


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    print(f"fake server started pid {os.getpid()}", file=sys.stderr, flush=True)
    for line in sys.stdin:
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        if rid is None:
            continue
        if method == "initialize":
            result: dict[str, object] = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake", "version": "1"},
            }
        elif method == "tools/list":
            result = {
                "tools": [
                    {"name": n, "inputSchema": {"type": "object"}} for n in ("echo", "die", "slow")
                ]
            }
            if "biglist" in sys.argv:
                result["tools"][0]["inputSchema"]["maximum"] = 2**64  # type: ignore[index]
        elif method == "tools/call" and msg["params"]["name"] == "die":
            os._exit(3)
        elif method == "tools/call" and msg["params"]["name"] == "slow":
            continue
        elif method == "tools/call" and msg["params"]["name"] == "big":
            result = {"content": [{"type": "text", "text": "x" * (2 << 20)}], "isError": False}
        elif method == "tools/call" and msg["params"]["name"] == "bad":
            result = {"content": "not a list", "isError": False}
        elif method == "tools/call" and msg["params"]["name"] == "bigint":
            result = {"content": [], "structuredContent": {"n": 2**64}, "isError": False}
        elif method == "tools/call" and msg["params"]["name"] in ("nan", "dup"):
            dup = msg["params"]["name"] == "dup"
            body = '{"n":1,"n":2}' if dup else '{"n":NaN,"m":-Infinity}'
            sys.stdout.write(
                f'{{"jsonrpc":"2.0","id":{json.dumps(rid)},"result":{{"content":[],'
                f'"structuredContent":{body},"isError":false}}}}\n'
            )
            sys.stdout.flush()
            continue
        elif method == "tools/call":
            text = json.dumps(msg["params"].get("arguments"), sort_keys=True)
            result = {"content": [{"type": "text", "text": text}], "isError": False}
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}})
            continue
        send({"jsonrpc": "2.0", "id": rid, "result": result})
    if "chatty" in sys.argv:
        sys.stdout.write("x" * (1 << 20) + "\n")
        sys.stdout.flush()
    if "stubborn" in sys.argv:
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
