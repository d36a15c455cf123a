"""Framework integration benchmark (issue 18 "Measure"): Warden's overhead per tool call
through the OpenAI Agents SDK, LangChain (a ``create_agent`` graph) and Pydantic AI.

For each framework, one agent whose scripted model (the framework's own: ``ScriptedModel``,
``GenericFakeChatModel``, ``FunctionModel``) makes exactly one ``get_weather`` call per
run and then answers. Two variants, built once and run alternately so both see the same
machine state:

- plain: the framework's tool, no Warden;
- governed: the same tool behind the adapter (``warden.integrations.*``), one client
  session for all runs, against a local ``warden serve`` over loopback HTTP (a fresh data
  directory, SQLite ``FULL``, tests/integrations/bundle.yaml). Each governed call is two
  signed ACS steps (``toolCallRequest``, ``toolCallResult``), each committed before its
  answer.

Each run (a whole agent turn: model, tool, model) is timed; the overhead per tool call
is governed − plain (one call per run). Rounds interleave all six variants, so on a
shared machine they all see the same load; each round also times the two ACS steps
alone through a ``Client`` (no framework), the floor the adapters add to. Reported per
framework: median, p99 and mean in ms of both, and the added median and p99. Clients:
``AsyncClient`` for the async frameworks, ``Client`` for LangChain's synchronous
``invoke``.

    python bench/integrations_frameworks.py                 # 1000 runs of each
    python bench/integrations_frameworks.py --calls 200 --json bench/out/frameworks.json
    python bench/integrations_frameworks.py --in-process      # no HTTP: the adapters' cost
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from latency_stats import summary  # noqa: E402 - beside this file

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "tests" / "integrations" / "bundle.yaml"
AGENT = "bench-agent"


def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return f"Sunny in {city}"


# -- a local Warden --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_warden(data: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """`warden serve` on loopback with the test bundle; the agent registered with
    `warden agents add --key-out`. Returns the process, base URL and key file."""
    data.mkdir(parents=True)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "warden", "serve", "--port", str(port), "--data-dir", str(data)]
        + ["--policy", str(BUNDLE), "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    else:
        proc.kill()
        raise SystemExit("warden serve did not start")
    # Registered once the server has made the data directory's keys.
    key = data / "agent.key"
    subprocess.run(
        [sys.executable, "-m", "warden", "agents", "add", AGENT, "--owner", "bench@example.com"]
        + ["--key-out", str(key), "--data-dir", str(data)],
        check=True,
        capture_output=True,
    )
    return proc, url, key


# -- the three frameworks: (plain run, governed run), each one agent turn ---------------

Run = Callable[[], Awaitable[str]]


def openai_agents(client: Any) -> tuple[Run, Run]:
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from warden.integrations.openai_agents import governed

    config = RunConfig(tracing_disabled=True)
    tool = function_tool(get_weather)

    def variant(tools: list[Any]) -> Run:
        model = ScriptedModel()
        agent = Agent(name="bench", model=model, tools=tools)

        async def run() -> str:
            model.extend(
                [
                    [function_call("get_weather", {"city": "Oslo"}, call_id="c1")],
                    [assistant_message("done")],
                ]
            )
            result = await Runner.run(agent, "weather?", run_config=config)
            return str(result.new_items[1].output)

        return run

    return variant([tool]), variant(governed([tool], client))


def langchain(client: Any) -> tuple[Run, Run]:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool as lc_tool

    from warden.integrations.langchain import governed

    class ScriptedChat(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    call = {"name": "get_weather", "args": {"city": "Oslo"}, "id": "c1", "type": "tool_call"}
    tool = lc_tool(get_weather)

    def variant(tools: list[Any]) -> Run:
        turns = itertools.cycle([AIMessage(content="", tool_calls=[call]), AIMessage("done")])
        agent = create_agent(ScriptedChat(messages=turns), tools)

        async def run() -> str:  # the synchronous graph, as most LangChain apps call it
            state = agent.invoke({"messages": [("user", "weather?")]})
            return str(state["messages"][2].content)

        return run

    return variant([tool]), variant(governed([tool], client))


def pydantic_ai(client: Any) -> tuple[Run, Run]:
    from pydantic_ai import Agent, FunctionToolset
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from warden.integrations.pydantic_ai import WardenToolset

    def model(messages: list[Any], info: Any) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("get_weather", {"city": "Oslo"}, "c1")])
        return ModelResponse(parts=[TextPart("done")])

    tools = FunctionToolset([get_weather])

    def variant(toolset: Any) -> Run:
        agent = Agent(FunctionModel(model), toolsets=[toolset])

        async def run() -> str:
            result = await agent.run("weather?")
            return str(result.all_messages()[2].parts[0].content)

        return run

    return variant(tools), variant(WardenToolset(tools, client))


FRAMEWORKS: dict[str, Callable[[Any], tuple[Run, Run]]] = {
    "openai-agents": openai_agents,
    "langchain": langchain,
    "pydantic-ai": pydantic_ai,
}


async def measure(
    names: list[str], sync_client: Any, async_client: Any, calls: int, warmup: int
) -> dict[str, Any]:
    """Interleaved: each round runs every framework's plain and governed turn once (the
    order of the pair alternating), so every variant sees the same load on a shared
    machine. ``sync_client`` / ``async_client``: a warden.Client / AsyncClient."""
    try:
        variants = {
            name: FRAMEWORKS[name](sync_client if name == "langchain" else async_client)
            for name in names
        }
        for _ in range(warmup):
            for plain, governed in variants.values():
                assert await plain() == "Sunny in Oslo"
                assert await governed() == "Sunny in Oslo"
        times = {name: {"plain": [], "governed": []} for name in names}
        steps: list[float] = []  # the reference: the two ACS steps alone, no framework
        for i in range(calls):
            start = time.perf_counter()
            decision = sync_client.tool_call_request("get_weather", {"city": "Oslo"})
            sync_client.tool_call_result(decision, "Sunny in Oslo")
            steps.append(time.perf_counter() - start)
            for name, (plain, governed) in variants.items():
                order = [("plain", plain), ("governed", governed)]
                for label, run in order if i % 2 == 0 else order[::-1]:
                    start = time.perf_counter()
                    out = await run()
                    times[name][label].append(time.perf_counter() - start)
                    assert out == "Sunny in Oslo", (name, label, out)
    finally:
        sync_client.close()
        await async_client.aclose()
    results: dict[str, Any] = {"client_steps": {"calls": calls, **summary(steps)}}
    for name in names:
        plain_s, governed_s = summary(times[name]["plain"]), summary(times[name]["governed"])
        results[name] = {
            "calls": calls,
            "client": "Client" if name == "langchain" else "AsyncClient",
            "plain": plain_s,
            "governed": governed_s,
            "added_median_ms": governed_s["median_ms"] - plain_s["median_ms"],
            "added_p99_ms": governed_s["p99_ms"] - plain_s["p99_ms"],
            # Per round: governed − plain − the two client steps of that round, i.e. what
            # the adapter and the framework's handling of it add beyond Warden's round trips.
            "adapter_own_median_ms": statistics.median(
                g - p - c
                for g, p, c in zip(
                    times[name]["governed"], times[name]["plain"], steps, strict=True
                )
            )
            * 1000,
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="timed runs of each variant")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--only", choices=sorted(FRAMEWORKS), action="append")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="Warden in this process (Client.in_process, no HTTP): the adapters' own cost",
    )
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from warden.client import AsyncClient, Client

    tmp = Path(tempfile.mkdtemp(prefix="warden-bench-frameworks-"))
    proc: subprocess.Popen[bytes] | None = None
    runtime: Any = None
    if args.in_process:
        from warden.runtime import Runtime
        from warden.settings import Settings

        runtime = Runtime.start(Settings(data_dir=tmp / "data", policy=BUNDLE))
        assert runtime.agents is not None
        runtime.agents.add(AGENT, "bench@example.com")
        sync_client = Client.in_process(runtime, agent_id=AGENT)
        async_client: Any = AsyncClient.in_process(runtime, agent_id=AGENT)
    else:
        proc, url, key = start_warden(tmp / "data")
        sync_client = Client.from_key_file(url, key)
        async_client = AsyncClient.from_key_file(url, key)
    try:
        names = args.only or list(FRAMEWORKS)
        results = asyncio.run(measure(names, sync_client, async_client, args.calls, args.warmup))
        ref = results["client_steps"]
        print(
            f"{'client only':14} toolCallRequest + toolCallResult median "
            f"{ref['median_ms']:.2f} ms p99 {ref['p99_ms']:.2f}",
            flush=True,
        )
        for name, r in results.items():
            if name == "client_steps":
                continue
            print(
                f"{name:14} plain median {r['plain']['median_ms']:.2f} ms "
                f"p99 {r['plain']['p99_ms']:.2f} | governed median "
                f"{r['governed']['median_ms']:.2f} ms p99 {r['governed']['p99_ms']:.2f} | "
                f"added median {r['added_median_ms']:.2f} ms p99 {r['added_p99_ms']:.2f} | "
                f"beyond the client steps {r['adapter_own_median_ms']:.2f} ms",
                flush=True,
            )
    finally:
        if runtime is not None:
            runtime.close()
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
