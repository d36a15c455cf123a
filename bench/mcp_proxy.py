"""MCP gateway benchmark (issue 6 item 6): added latency per ``tools/call``.

One process, two MCP client sessions made with the official SDK's client over stdio:

- direct: to ``python -m mcp_server_time``;
- proxied: to ``python -m warden mcp-proxy --policy examples/policies/mcp.yaml --
  python -m mcp_server_time`` (a fresh data directory, SQLite ``FULL``).

Each session first makes ``--warmup`` calls, then ``--calls`` timed
``get_current_time`` calls, one per session in a freshly shuffled order each time, so
all see the same machine state. Through the proxy each call is two chained ACS steps (the wrapped
request, then the wrapped response), each committed to SQLite before the answer.
Reported: median, p99 and mean in ms for both, the added median and p99, and the
ratio of the medians; and, on Linux, each proxy process's CPU time (user + system, all its
threads, from ``/proc``) per timed call, which a loaded machine inflates far less than
latency.

The proxy runs this checkout's Warden (``--src``). ``--compare-src OTHER/src`` adds a
second proxied session through that checkout (``before``; this one is ``after``) to
the same shuffles, and reports after ÷ before of the added median and p99.

    python bench/mcp_proxy.py                 # 1000 calls each
    python bench/mcp_proxy.py --calls 200 --json bench/out/mcp.json
    python bench/mcp_proxy.py --compare-src ../wt-before/src
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from latency_stats import summary  # noqa: E402 - beside this file
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parent.parent
TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


def prepare_data_dir(data_dir: Path, src: Path) -> Path:
    """A fresh data directory with a master IKM and a registered agent ``bench-agent``,
    made by checkout ``src``'s own CLI (its migrations); returns the agent's key file.
    ``mcp-proxy`` runs as a registered agent and reads its key before it starts."""
    agents = data_dir / "agents"
    agents.mkdir(parents=True)
    key = data_dir / "ikm.key"
    key.write_text(os.urandom(32).hex())
    key.chmod(0o600)
    agent_key = agents / "bench-agent.key"
    env = {**os.environ, "PYTHONPATH": str(src)}
    warden = [sys.executable, "-m", "warden"]
    for command in (
        ["db", "upgrade", "--data-dir", str(data_dir)],
        ["agents", "add", "bench-agent", "--owner", "bench", "--key-out", str(agent_key),
         "--data-dir", str(data_dir), "--json"],
    ):  # fmt: skip
        done = subprocess.run([*warden, *command], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"warden {' '.join(command)} failed:\n{done.stderr}")
    return agent_key


def proxy_cpu_s(data_dir: Path) -> float | None:
    """CPU seconds (user + system) used so far by the ``mcp-proxy`` process serving
    ``data_dir`` (found by its command line), or None where ``/proc`` cannot tell."""
    needle = str(data_dir).encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
            if b"mcp-proxy" not in cmdline or needle not in cmdline:
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime and stime: fields 14 and 15 of stat(5), counted after the ")".
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return None


def proxy_params(data_dir: Path, src: Path) -> StdioServerParameters:
    """``warden mcp-proxy`` of checkout ``src`` (``PYTHONPATH``; the SDK passes the child
    only a few variables, so without it the venv's installed Warden would run) in front
    of the time server, with a fresh data directory and agent."""
    agent_key = prepare_data_dir(data_dir, src)
    return StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "warden",
            "mcp-proxy",
            "--data-dir",
            str(data_dir),
            "--policy",
            str(ROOT / "examples" / "policies" / "mcp.yaml"),
            "--agent-key",
            str(agent_key),
            "--",
            *TIME_SERVER,
        ],
        cwd=str(ROOT),
        env={"PYTHONPATH": str(src)},
    )


async def run(
    calls: int, warmup: int, data_dir: Path, proxies: dict[str, Path], seed: int
) -> dict[str, Any]:
    """Time ``calls`` calls on the direct session and on one proxied session per entry of
    ``proxies`` (name → a checkout's src), visiting them in a shuffled order each time."""
    rng = random.Random(seed)
    direct_params = StdioServerParameters(command=TIME_SERVER[0], args=TIME_SERVER[1:])
    args = {"timezone": "Europe/Paris"}
    names = ["direct", *proxies]
    times: dict[str, list[float]] = {name: [] for name in names}
    async with AsyncExitStack() as stack:
        sessions: dict[str, ClientSession] = {}
        for name in names:
            params = (
                direct_params if name == "direct" else proxy_params(data_dir / name, proxies[name])
            )
            read, write = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            sessions[name] = session
        for _ in range(warmup):
            for session in sessions.values():
                await session.call_tool("get_current_time", args)
        cpu_before = {name: proxy_cpu_s(data_dir / name) for name in proxies}
        order = list(names)
        for _ in range(calls):
            # A fresh order each time: a proxy's work after its answer (a checkpoint, the
            # next commit) must not always fall on the same next session, as it would in
            # a fixed rotation of three.
            rng.shuffle(order)
            for name in order:
                started = time.perf_counter()
                result = await sessions[name].call_tool("get_current_time", args)
                times[name].append(time.perf_counter() - started)
                if result.is_error:
                    raise SystemExit(f"{name} call failed: {result.content}")
        cpu_after = {name: proxy_cpu_s(data_dir / name) for name in proxies}
    out: dict[str, Any] = {"calls": calls, "direct": summary(times["direct"])}
    direct_s = out["direct"]
    for name in proxies:
        proxied_s = summary(times[name])
        out[name] = {
            "src": str(proxies[name]),
            **proxied_s,
            "added_median_ms": proxied_s["median_ms"] - direct_s["median_ms"],
            "added_p99_ms": proxied_s["p99_ms"] - direct_s["p99_ms"],
            "ratio_median": proxied_s["median_ms"] / direct_s["median_ms"],
        }
        before, after = cpu_before[name], cpu_after[name]
        if before is not None and after is not None:
            out[name]["proxy_cpu_ms_per_call"] = (after - before) * 1000 / calls
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument(
        "--src", type=Path, default=ROOT / "src", help="the proxied checkout's src folder"
    )
    parser.add_argument(
        "--compare-src",
        type=Path,
        help="also proxy through this checkout (labelled before; --src is after) in the "
        "same run, and report after ÷ before",
    )
    parser.add_argument("--seed", type=int, default=0, help="for the order of the sessions")
    parser.add_argument("--json", type=Path, help="write the results here too")
    ns = parser.parse_args()
    proxies = {"proxied": ns.src.resolve()}
    if ns.compare_src is not None:
        proxies = {"before": ns.compare_src.resolve(), "after": ns.src.resolve()}
    with tempfile.TemporaryDirectory(prefix="warden-bench-mcp-") as tmp:
        out = anyio.run(run, ns.calls, ns.warmup, Path(tmp) / "warden", proxies, ns.seed)
    for name in ("direct", *proxies):
        s = out[name]
        print(
            f"{name:8} median {s['median_ms']:.2f} ms  p99 {s['p99_ms']:.2f} ms  "
            f"mean {s['mean_ms']:.2f} ms"
        )
    if ns.compare_src is None:
        s = out["proxied"]
        # The issue 6 document: the added figures at the top level too.
        for key in ("added_median_ms", "added_p99_ms", "ratio_median"):
            out[key] = s[key]
        print(
            f"added    median {s['added_median_ms']:.2f} ms  p99 {s['added_p99_ms']:.2f} ms  "
            f"ratio of medians {s['ratio_median']:.1f}x ({out['calls']} calls each)"
        )
    for name in proxies if ns.compare_src is not None else ():
        s = out[name]
        print(
            f"added ({name}) median {s['added_median_ms']:.2f} ms  p99 {s['added_p99_ms']:.2f} ms"
            f"  ratio of medians {s['ratio_median']:.1f}x ({out['calls']} calls each)"
        )
    for name in proxies:
        if "proxy_cpu_ms_per_call" in out[name]:
            label = name if ns.compare_src is not None else "proxy"
            print(f"CPU ({label}) {out[name]['proxy_cpu_ms_per_call']:.2f} ms per call")
    if ns.compare_src is not None:
        before, after = out["before"], out["after"]
        out["after_over_before"] = {
            "added_median": after["added_median_ms"] / before["added_median_ms"],
            "added_p99": after["added_p99_ms"] / before["added_p99_ms"],
        }
        r = out["after_over_before"]
        print(
            f"after ÷ before: added median {r['added_median']:.2f}, added p99 {r['added_p99']:.2f}"
        )
    if ns.json is not None:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
