"""Integration overhead per tool call (issue 18 item 1, "Measure").

Against a local ``warden serve`` (a subprocess on loopback, fresh data directory,
SQLite ``FULL``, the shipped default bundle, the registered agent ``bench-agent``):

- ``client``: ``warden.Client`` over HTTP (one keep-alive connection). A governed tool
  call is ``tool_call_request`` → the tool → ``tool_call_result`` (two signed ACS steps,
  each committed before its answer); the baseline is the same tool alone. Governed and
  baseline calls alternate so both see the same machine state.
- ``sdk``: the Claude Agent SDK adapter's callbacks exactly as the SDK calls them
  (``PreToolUse`` hook, ``can_use_tool`` reusing its decision, ``PostToolUse`` hook) over
  ``warden.AsyncClient``; baseline: the tool alone. Without ``--sdk-e2e`` the CLI is not
  in the loop (its own per-turn cost is not Warden's).
- ``sdk-e2e`` (``--sdk-e2e N``): N tool calls (``Bash echo i``) through the SDK's
  ``query()`` driving its bundled Claude Code CLI against the scripted Claude of the tests
  (loopback), with and without Warden's guard, alternating, twice each; reported per
  tool call (total time / N, the CLI's own turn included).
- ``hook``: ``warden hook claude-code`` run as Claude Code runs it (one process per
  ``PreToolUse`` event); baseline: ``python -c pass`` (the interpreter's start alone).

    python bench/integrations.py                       # 1000 calls, client + sdk + hook
    python bench/integrations.py --sdk-e2e 100 --json bench/out/integrations.json
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from acs_decision import (
    AGENT_ID,
    AGENT_IKM,
    AGENT_KEY_ID,
    ROOT,
    _free_port,
    register_agent,
    start_serve,
    wait_ready,
    write_key,
)
from latency_stats import summary  # noqa: E402 - beside this file

import warden
from warden.identity.agents import AgentCredential

POLICY = ROOT / "examples" / "policies" / "default.yaml"
CREDENTIAL = AgentCredential(AGENT_ID, AGENT_KEY_ID, AGENT_IKM)


def compare(governed: list[float], baseline: list[float]) -> dict[str, Any]:
    g, b = summary(governed), summary(baseline)
    return {
        "governed": g,
        "baseline": b,
        "added_median_ms": g["median_ms"] - b["median_ms"],
        "added_p99_ms": g["p99_ms"] - b["p99_ms"],
    }


def tool(path: str) -> str:
    """The benchmark's tool: a little real work (hash a path 200 times)."""
    digest = path.encode()
    for _ in range(200):
        digest = hashlib.sha256(digest).digest()
    return digest.hex()


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_client(url: str, calls: int, warmup: int) -> dict[str, Any]:
    governed: list[float] = []
    baseline: list[float] = []
    request_only: list[float] = []
    with warden.Client.connect(url, CREDENTIAL) as client:

        def one(i: int) -> None:
            args = {"path": f"/srv/data/{i}.txt"}
            t0 = time.perf_counter()
            d = client.tool_call_request("read_file", args)
            t1 = time.perf_counter()
            assert d.allowed, d
            client.tool_call_result(d, tool(d.args_for(args)["path"]))
            if i >= warmup:
                request_only.append(t1 - t0)
                governed.append(time.perf_counter() - t0)

        for i in range(warmup + calls):
            one(i)
            t = timed(lambda i=i: tool(f"/srv/data/{i}.txt"))
            if i >= warmup:
                baseline.append(t)
    out = compare(governed, baseline)
    out["request_only"] = summary(request_only)
    return out


def bench_sdk_callbacks(url: str, calls: int, warmup: int) -> dict[str, Any]:
    from claude_agent_sdk import PermissionResultAllow, ToolPermissionContext

    from warden.integrations.claude_agent_sdk import WardenGuard

    async def run() -> tuple[list[float], list[float]]:
        governed: list[float] = []
        baseline: list[float] = []
        async with warden.AsyncClient.connect(url, CREDENTIAL) as client:
            guard = WardenGuard(client)
            for i in range(warmup + calls):
                tid = f"toolu_{i:06d}"
                args = {"file_path": f"/srv/data/{i}.txt"}
                pre = {
                    "hook_event_name": "PreToolUse",
                    "tool_name": "Read",
                    "tool_input": args,
                    "tool_use_id": tid,
                    "session_id": "s",
                    "transcript_path": "",
                    "cwd": "",
                }
                t0 = time.perf_counter()
                assert await guard.pre_tool_use(pre, tid, {"signal": None}) == {}  # type: ignore[arg-type]
                allowed = await guard.can_use_tool(
                    "Read", args, ToolPermissionContext(tool_use_id=tid)
                )
                assert isinstance(allowed, PermissionResultAllow)
                output = tool(args["file_path"])
                post = {**pre, "hook_event_name": "PostToolUse", "tool_response": output}
                assert await guard.post_tool_use(post, tid, {"signal": None}) == {}  # type: ignore[arg-type]
                t1 = time.perf_counter()
                b = timed(lambda a=args: tool(a["file_path"]))
                if i >= warmup:
                    governed.append(t1 - t0)
                    baseline.append(b)
        return governed, baseline  # fmt: skip

    return compare(*asyncio.run(run()))


def bench_sdk_e2e(url: str, calls: int, workdir: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests" / "integrations"))
    from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query
    from scripted_claude import Script, offline_env, scripted_claude

    from warden.integrations.claude_agent_sdk import WardenGuard

    async def run(guarded: bool) -> float:
        script = Script(
            tool_uses=[
                ("Bash", {"command": f"echo {i}", "description": "count"}) for i in range(calls)
            ]
        )
        with scripted_claude(script) as base_url:
            common: dict[str, Any] = {
                "cwd": str(workdir), "env": offline_env(base_url, workdir / "home"),
                "setting_sources": [], "model": "claude-sonnet-4-5", "max_turns": calls + 5,
            }  # fmt: skip
            t0 = time.perf_counter()
            if guarded:
                async with warden.AsyncClient.connect(url, CREDENTIAL) as client:
                    options = WardenGuard(client).options(**common)
                    async for m in query(prompt="read it", options=options):
                        assert not isinstance(m, ResultMessage) or not m.is_error, m
            else:
                options = ClaudeAgentOptions(**common)
                async for m in query(prompt="read it", options=options):
                    assert not isinstance(m, ResultMessage) or not m.is_error, m
            return (time.perf_counter() - t0) / calls

    # Alternate the variants (twice each) so both see the same machine state.
    runs: dict[bool, list[float]] = {False: [], True: []}
    for guarded in (False, True, False, True):
        runs[guarded].append(asyncio.run(run(guarded)))
    governed, baseline = statistics.fmean(runs[True]), statistics.fmean(runs[False])
    return {
        "calls": calls,
        "governed_per_call_ms": governed * 1000,
        "baseline_per_call_ms": baseline * 1000,
        "added_per_call_ms": (governed - baseline) * 1000,
        "runs_ms": {
            k: [v * 1000 for v in vs]
            for k, vs in (("governed", runs[True]), ("baseline", runs[False]))
        },
    }


def bench_hook(url: str, key_file: Path, runs: int) -> dict[str, Any]:
    env = {**os.environ, "WARDEN_URL": url, "WARDEN_AGENT_KEY": str(key_file)}
    session = "8d3b9f7e-3f43-4c2e-9a55-6d1c0c6f0a01"
    governed: list[float] = []
    baseline: list[float] = []
    for i in range(runs):
        event = json.dumps({
            "session_id": session, "transcript_path": "", "cwd": "/", "permission_mode": "default",
            "hook_event_name": "PreToolUse", "tool_name": "Read",
            "tool_input": {"file_path": f"/srv/{i}"}, "tool_use_id": f"toolu_{i:06d}",
        })  # fmt: skip
        t0 = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "warden", "hook", "claude-code"],
            input=event, capture_output=True, text=True, env=env, check=True,
        )  # fmt: skip
        governed.append(time.perf_counter() - t0)
        assert "permissionDecision" not in json.loads(out.stdout)["hookSpecificOutput"]
        baseline.append(timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True)))
    return compare(governed, baseline)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--hook-runs", type=int, default=20)
    parser.add_argument("--sdk-e2e", type=int, default=0, help="tool calls through the CLI")
    parser.add_argument("--skip", nargs="*", default=[], choices=["client", "sdk", "hook"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"calls": args.calls}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = work / "data"
        write_key(data / "ikm.key")
        register_agent(f"sqlite:///{data / 'warden.db'}")
        key_file = work / "bench-agent.key"
        CREDENTIAL.write(key_file)
        port = _free_port()
        proc = start_serve(port, data, POLICY, work / "serve.log")
        try:
            wait_ready(port)
            url = f"http://127.0.0.1:{port}"
            if "client" not in args.skip:
                results["client"] = bench_client(url, args.calls, args.warmup)
                print("client", json.dumps(results["client"], indent=1), flush=True)
            if "sdk" not in args.skip:
                results["sdk"] = bench_sdk_callbacks(url, args.calls, args.warmup)
                print("sdk", json.dumps(results["sdk"], indent=1), flush=True)
            if args.sdk_e2e:
                results["sdk_e2e"] = bench_sdk_e2e(url, args.sdk_e2e, work)
                print("sdk_e2e", json.dumps(results["sdk_e2e"], indent=1), flush=True)
            if "hook" not in args.skip:
                results["hook"] = bench_hook(url, key_file, args.hook_runs)
                print("hook", json.dumps(results["hook"], indent=1), flush=True)
        finally:
            proc.terminate()
            proc.wait(10)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
