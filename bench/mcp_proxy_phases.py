"""Where the MCP proxy's time goes per ``tools/call`` (issue 16): wall-clock phases
measured inside the proxy process.

The same sessions as ``bench/mcp_proxy.py`` (its ``run``: a direct session to
``mcp_server_time`` and one proxied session, SQLite ``FULL``), but the proxy runs
under this file's ``--wrap`` mode, which stamps ``time.perf_counter()`` at fixed
points of each call before it starts ``warden mcp-proxy``:

- ``line``: the client's line is read (``StdioChannel.lines``, or offered to its
  ``take`` in the loop's reader callback);
- ``call0``: the fast path's task for it starts (``fast_path._call``);
- ``check0``/``check1``: the request step (``Gateway.check``), of which ``append``
  is the entry's durable append (``Ledger.commit``: SQL and COMMIT);
- ``send0``/``send1``: the upstream request handed to the SDK transport's writer;
- ``ans``: the upstream's answer is read (the proxy's own upstream transport's
  ``StdioChannel.lines``, decision 852; ``DirectCalls.route`` behind the SDK's
  ``stdio_client`` where that is used);
- ``up1``: ``DirectCalls.call_tool`` returns (the answer checked);
- ``record0``/``record1``: the response step (``Gateway.record``);
- ``write0``/``write1``: the answer written to the client.

Printed: the median of each interval over the timed calls (the first 100 calls
are left out), in ms. The wrapper patches names inside Warden's modules, so it
follows the code it was written for; a renamed function fails loudly, not silently.
Load inflates every figure: read them as shares, beside ``uptime``.

    python bench/mcp_proxy_phases.py --calls 1000 [--src ../other/src]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import runpy
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ORDER = [
    "line",
    "call0",
    "check0",
    "check1",
    "up0",
    "send0",
    "send1",
    "ans",
    "up1",
    "record0",
    "record1",
    "write0",
    "write1",
]


def _install(out: Path) -> None:
    """Patch the stamps into this process's Warden (the proxy), and dump at exit."""
    from warden.ledger import ledger as lg
    from warden.transport import mcp_direct_calls as dc
    from warden.transport import stdio_channel as sc
    from warden.transport import upstream_stdio as us
    from warden.wire.mcp import fast_path as fp
    from warden.wire.mcp import gateway as gw

    now = time.perf_counter
    cur: dict[str, float] = {}
    rows: list[dict[str, float]] = []
    appends: list[float] = []

    def timed_sync(cls: Any, name: str, start: str, end: str) -> None:
        inner = getattr(cls, name)

        def wrapper(*a: Any, **k: Any) -> Any:
            cur[start] = now()
            try:
                return inner(*a, **k)
            finally:
                cur[end] = now()

        setattr(cls, name, wrapper)

    timed_sync(gw.Gateway, "check", "check0", "check1")
    timed_sync(gw.Gateway, "record", "record0", "record1")

    commit = lg.Ledger.commit

    def timed_commit(self: Any, pending: Any) -> None:
        started = now()
        try:
            commit(self, pending)
        finally:
            appends.append(now() - started)

    lg.Ledger.commit = timed_commit  # type: ignore[method-assign]

    # The upstream's pipes are a StdioChannel too: tagged here, stamped apart.
    writer_init = us.PipeWriter.__init__

    def tagging_init(self: Any, channel: Any) -> None:
        channel.upstream = True
        writer_init(self, channel)

    us.PipeWriter.__init__ = tagging_init  # type: ignore[method-assign]
    lines = sc.StdioChannel.lines

    async def stamped_lines(self: Any, take: Any = None) -> AsyncIterator[bytes]:
        upstream = getattr(self, "upstream", False)

        def stamp() -> None:
            if upstream:
                cur["ans"] = now()
            else:
                cur.clear()
                cur["line"] = now()

        def stamped_take(line: bytes) -> bool:
            # A line the reader callback takes is never yielded (decision 1110).
            stamp()
            return bool(take(line))

        async for line in lines(self, stamped_take if take is not None else None):
            stamp()
            yield line

    sc.StdioChannel.lines = stamped_lines  # type: ignore[method-assign]
    write_line = sc.StdioChannel.write_line

    async def stamped_write(self: Any, data: bytes) -> None:
        if getattr(self, "upstream", False):
            await write_line(self, data)  # the request upstream: send0/send1 time it
            return
        cur["write0"] = now()
        await write_line(self, data)
        cur["write1"] = now()
        if "check0" in cur:
            rows.append(dict(cur))

    sc.StdioChannel.write_line = stamped_write  # type: ignore[method-assign]
    call = fp._call

    async def stamped_call(*a: Any, **k: Any) -> None:
        cur["call0"] = now()
        await call(*a, **k)

    fp._call = stamped_call  # type: ignore[assignment]
    send = dc.DirectCalls._send

    async def stamped_send(self: Any, item: Any) -> None:
        cur["send0"] = now()
        await send(self, item)
        cur["send1"] = now()

    dc.DirectCalls._send = stamped_send  # type: ignore[method-assign]
    call_tool = dc.DirectCalls.call_tool

    async def stamped_call_tool(self: Any, name: str, arguments: Any) -> Any:
        cur["up0"] = now()
        result = await call_tool(self, name, arguments)
        cur["up1"] = now()
        return result

    dc.DirectCalls.call_tool = stamped_call_tool  # type: ignore[method-assign]
    route = dc.DirectCalls.route

    async def stamped_route(self: Any, transport: Any, to_session: Any) -> None:
        async def items() -> AsyncIterator[Any]:
            async for item in transport:
                cur["ans"] = now()
                yield item

        await route(self, items(), to_session)

    dc.DirectCalls.route = stamped_route  # type: ignore[method-assign]

    def dump() -> None:
        timed = rows[100:]
        phases: dict[str, float] = {}
        for a, b in zip(ORDER, ORDER[1:], strict=False):
            spans = [r[b] - r[a] for r in timed if a in r and b in r]
            if spans:
                phases[f"{a} -> {b}"] = statistics.median(spans) * 1000
        phases["line -> write1 (total)"] = (
            statistics.median([r["write1"] - r["line"] for r in timed]) * 1000
        )
        phases["append (each step's Ledger.commit)"] = statistics.median(appends[200:]) * 1000
        out.write_text(json.dumps({"calls": len(timed), "ms": phases}, indent=1) + "\n")

    atexit.register(dump)


def main() -> None:
    if sys.argv[1:2] == ["--wrap"]:
        _install(Path(os.environ["WARDEN_PHASES_OUT"]))
        sys.argv = ["warden", *sys.argv[2:]]
        runpy.run_module("warden", run_name="__main__", alter_sys=True)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import anyio
    import mcp_proxy as bench  # beside this file

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--src", type=Path, default=bench.ROOT / "src")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="warden-bench-phases-") as tmp:
        out = Path(tmp) / "phases.json"
        plain = bench.proxy_params

        def wrapped(data_dir: Path, src: Path) -> Any:
            params = plain(data_dir, src)
            assert params.args[:2] == ["-m", "warden"], params.args
            params.args = [str(Path(__file__).resolve()), "--wrap", *params.args[2:]]
            params.env = {**(params.env or {}), "WARDEN_PHASES_OUT": str(out)}
            return params

        bench.proxy_params = wrapped
        times = anyio.run(
            bench.run, ns.calls, 50, Path(tmp) / "warden", {"proxied": ns.src.resolve()}, 0
        )
        for _ in range(50):  # the proxy writes its figures as it exits
            if out.exists():
                break
            time.sleep(0.1)
        phases = json.loads(out.read_text())
    direct, proxied = times["direct"], times["proxied"]
    print(
        f"direct median {direct['median_ms']:.2f} ms, proxied {proxied['median_ms']:.2f} ms, "
        f"added {proxied['added_median_ms']:.2f} ms; inside the proxy ({phases['calls']} calls):"
    )
    for name, ms in phases["ms"].items():
        print(f"  {name:38} {ms:6.3f} ms")


if __name__ == "__main__":
    main()
