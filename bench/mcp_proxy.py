"""MCP gateway benchmark (issue 6 item 6): added latency per ``tools/call``.

One process, two MCP client sessions made with the official SDK's client over stdio:

- direct: to ``python -m mcp_server_time``;
- proxied: to ``python -m warden mcp-proxy --policy examples/policies/mcp.yaml --
  python -m mcp_server_time`` (a fresh data directory, SQLite ``FULL``).

Each session first makes ``--warmup`` calls, then ``--calls`` timed
``get_current_time`` calls, alternating direct and proxied so both see the same
machine state. Through the proxy each call is two chained ACS steps (the wrapped
request, then the wrapped response), each committed to SQLite before the answer.
Reported: median, p99 and mean in ms for both, the added median and p99, and the
ratio of the medians.

    python bench/mcp_proxy.py                 # 1000 calls each
    python bench/mcp_proxy.py --calls 200 --json bench/out/mcp.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parent.parent
TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "median_ms": statistics.median(samples) * 1000,
        "p99_ms": quantile(samples, 0.99) * 1000,
        "mean_ms": statistics.fmean(samples) * 1000,
    }


async def run(calls: int, warmup: int, data_dir: Path) -> dict[str, Any]:
    direct_params = StdioServerParameters(command=TIME_SERVER[0], args=TIME_SERVER[1:])
    proxy_params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "warden",
            "mcp-proxy",
            "--data-dir",
            str(data_dir),
            "--policy",
            str(ROOT / "examples" / "policies" / "mcp.yaml"),
            "--",
            *TIME_SERVER,
        ],
        cwd=str(ROOT),
    )
    args = {"timezone": "Europe/Paris"}
    times: dict[str, list[float]] = {"direct": [], "proxied": []}
    async with (
        stdio_client(direct_params) as (dr, dw),
        ClientSession(dr, dw) as direct,
        stdio_client(proxy_params) as (pr, pw),
        ClientSession(pr, pw) as proxied,
    ):
        await direct.initialize()
        await proxied.initialize()
        sessions = {"direct": direct, "proxied": proxied}
        for _ in range(warmup):
            for session in sessions.values():
                await session.call_tool("get_current_time", args)
        for _ in range(calls):
            for name, session in sessions.items():
                started = time.perf_counter()
                result = await session.call_tool("get_current_time", args)
                times[name].append(time.perf_counter() - started)
                if result.is_error:
                    raise SystemExit(f"{name} call failed: {result.content}")
    direct_s, proxied_s = summary(times["direct"]), summary(times["proxied"])
    return {
        "calls": calls,
        "direct": direct_s,
        "proxied": proxied_s,
        "added_median_ms": proxied_s["median_ms"] - direct_s["median_ms"],
        "added_p99_ms": proxied_s["p99_ms"] - direct_s["p99_ms"],
        "ratio_median": proxied_s["median_ms"] / direct_s["median_ms"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--json", type=Path, help="write the results here too")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="warden-bench-mcp-") as tmp:
        out = anyio.run(run, ns.calls, ns.warmup, Path(tmp) / "warden")
    for name in ("direct", "proxied"):
        s = out[name]
        print(
            f"{name:8} median {s['median_ms']:.2f} ms  p99 {s['p99_ms']:.2f} ms  "
            f"mean {s['mean_ms']:.2f} ms"
        )
    print(
        f"added    median {out['added_median_ms']:.2f} ms  p99 {out['added_p99_ms']:.2f} ms  "
        f"ratio of medians {out['ratio_median']:.1f}x ({out['calls']} calls each)"
    )
    if ns.json is not None:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
