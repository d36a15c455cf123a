"""The OpenAI Agents SDK behind Warden (warden.integrations.openai_agents).

The SDK's own ScriptedModel (agents.testing) emits real function calls; the SDK's runner
runs the tool input/output guardrails and the tools. The end-to-end test runs against a
real `warden serve` over loopback with an approver on the REST desk; the others use an
in-process runtime. No network beyond loopback, no API key.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    FunctionTool,
    RunConfig,
    Runner,
    ToolInputGuardrailTripwireTriggered,
    function_tool,
)
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call
from conftest import Server, agent_credential, start_server
from harness import (
    AGENT,
    BUNDLE,
    THREE_CALLS,
    Ran,
    approving,
    audit,
    decisions_by_tool,
    http_approver,
    runtime_approver,
    tool_functions,
)

from warden.client import AsyncClient, Client
from warden.integrations.openai_agents import WardenGuardrails, governed
from warden.runtime import Runtime
from warden.store import open_store

NO_TRACING = RunConfig(tracing_disabled=True)


def sdk_tools(ran: Ran) -> list[FunctionTool]:
    return [function_tool(f) for f in tool_functions(ran).values()]


def scripted(calls: list[tuple[str, dict[str, Any], str]]) -> ScriptedModel:
    """One turn that makes ``calls`` (in parallel, as a model may), then a final answer."""
    return ScriptedModel(
        [
            [function_call(name, args, call_id=cid) for name, args, cid in calls],
            [assistant_message("All done.")],
        ]
    )


def outputs(result: Any) -> dict[str, str]:
    """What the model was given for each tool call id."""
    return {
        item.raw_item["call_id"]: str(item.output)
        for item in result.new_items
        if isinstance(item, ToolCallOutputItem)
    }


def run(agent: Agent[Any], prompt: str = "Do the errands.") -> Any:
    return asyncio.run(Runner.run(agent, prompt, run_config=NO_TRACING))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "srv", BUNDLE)
    yield srv
    srv.stop()


def approver_token(data_dir: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "warden", "keys", "create", "--principal", "fiona"]
        + ["--role", "approver", "--group", "finance", "--json", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["token"])


def test_deny_ask_allow_through_the_sdk_runner_against_warden_serve(served: Server) -> None:
    ran = Ran()
    token = approver_token(served.data_dir)
    credential = agent_credential(served.database_url, AGENT)
    model = scripted(THREE_CALLS)

    async def go() -> tuple[Any, str]:
        async with AsyncClient.connect(served.url, credential) as client:
            agent = Agent(
                name="errands",
                model=model,
                tools=governed(sdk_tools(ran), client, approval_timeout=20),
            )
            result = await Runner.run(agent, "Do the errands.", run_config=NO_TRACING)
            return result, client.session_id

    with approving(http_approver(served.url, token)):
        result, session_id = asyncio.run(go())

    seen = outputs(result)
    assert seen["call_weather"] == "Sunny in Oslo"  # allow: ran as asked
    assert seen["call_wipe"].startswith("Warden denied the call to wipe_disk: Wiping a disk")
    assert seen["call_pay"] == "Sent 40 to bob"  # ask: approved on the desk, then ran
    assert ran.names() == ["get_weather", "send_payment"]  # wipe_disk never ran
    # The model's second turn was given exactly these outputs.
    given = {
        i["call_id"]: i["output"]
        for i in model.calls[-1].input
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    }
    assert given == seen
    # The SDK recorded Warden's guardrail verdicts.
    verdicts = [r.output.behavior["type"] for r in result.tool_input_guardrail_results]
    assert sorted(verdicts) == ["allow", "allow", "reject_content"]

    store = open_store(served.database_url, migrate=False)
    try:
        rows = audit(store.iter_records(session_id))
    finally:
        store.close()
    assert decisions_by_tool(rows) == {
        "get_weather": ["allow"],
        "wipe_disk": ["deny"],
        "send_payment": ["ask", "allow"],  # the ask, then the approved resubmission
    }
    results = sorted(t for step, t, d in rows if step == "steps/toolCallResult" and d == "allow")
    assert results == ["get_weather", "send_payment"]


@pytest.fixture
def rt(make_runtime: Any) -> Runtime:
    runtime: Runtime = make_runtime(BUNDLE)
    agent_credential(runtime, AGENT)
    return runtime


def test_an_unanswered_ask_is_refused_after_the_timeout_and_the_tool_never_runs(
    rt: Runtime,
) -> None:
    ran = Ran()
    with Client.in_process(rt, agent_id=AGENT) as client:
        agent = Agent(
            name="pay",
            model=scripted([THREE_CALLS[2]]),
            tools=governed(sdk_tools(ran), client, approval_timeout=0.3),
        )
        seen = outputs(run(agent))
        session = client.session_id
    assert seen["call_pay"].startswith("Warden did not run send_payment: a human must approve")
    assert "approval_wait_timeout" in seen["call_pay"]
    assert ran.calls == []
    rows = audit(rt.store.iter_records(session))
    asks = decisions_by_tool(rows)["send_payment"]  # the ask and any resubmission
    assert asks and set(asks) == {"ask"}


def test_an_approved_ask_runs_with_an_in_process_desk(rt: Runtime) -> None:
    ran = Ran()
    with Client.in_process(rt, agent_id=AGENT) as client:
        agent = Agent(
            name="pay",
            model=scripted([THREE_CALLS[2]]),
            tools=governed(sdk_tools(ran), client, approval_timeout=20),
        )
        with approving(runtime_approver(rt)):
            seen = outputs(run(agent))
    assert seen["call_pay"] == "Sent 40 to bob"
    assert ran.calls == [("send_payment", {"to": "bob", "amount": 40})]


def test_modify_runs_the_tool_with_wardens_arguments(rt: Runtime) -> None:
    ran = Ran()
    with Client.in_process(rt, agent_id=AGENT) as client:
        agent = Agent(
            name="orders",
            model=scripted([("lookup_orders", {"customer": "c9", "limit": 500}, "call_o")]),
            tools=governed(sdk_tools(ran), client),
        )
        seen = outputs(run(agent))
    assert ran.calls == [("lookup_orders", {"customer": "c9", "limit": 5})], seen
    assert seen["call_o"] == "5 orders of c9"


def test_a_redacted_output_reaches_the_model_redacted(rt: Runtime) -> None:
    ran = Ran()
    with Client.in_process(rt, agent_id=AGENT) as client:
        agent = Agent(
            name="notes",
            model=scripted([("read_note", {"name": "deploy"}, "call_n")]),
            tools=governed(sdk_tools(ran), client),
        )
        seen = outputs(run(agent))
    assert ran.names() == ["read_note"], seen
    assert seen["call_n"] == "[REDACTED]"


def test_on_deny_raise_halts_the_run(rt: Runtime) -> None:
    ran = Ran()
    with Client.in_process(rt, agent_id=AGENT) as client:
        agent = Agent(
            name="wipe",
            model=scripted([THREE_CALLS[1]]),
            tools=governed(sdk_tools(ran), client, on_deny="raise"),
        )
        with pytest.raises(ToolInputGuardrailTripwireTriggered):
            run(agent)
    assert ran.calls == []


def test_a_bare_guardrail_refuses_a_modify_it_cannot_apply(rt: Runtime) -> None:
    """Without governed(), the SDK would run the model's arguments: refuse instead."""
    ran = Ran()
    with Client.in_process(rt, agent_id=AGENT) as client:
        guard = WardenGuardrails(client)
        tool = function_tool(
            tool_functions(ran)["lookup_orders"],
            tool_input_guardrails=[guard.input_guardrail],
            tool_output_guardrails=[guard.output_guardrail],
        )
        agent = Agent(
            name="orders",
            model=scripted([("lookup_orders", {"customer": "c9", "limit": 500}, "call_o")]),
            tools=[tool],
        )
        seen = outputs(run(agent))
    assert ran.calls == []
    assert "cannot pass changed arguments" in seen["call_o"]


def test_warden_unreachable_refuses_the_call(tmp_path: Path, rt: Runtime) -> None:
    """Fail closed: nothing listens on the URL, so no tool runs."""
    from conftest import free_port

    ran = Ran()
    credential = agent_credential(rt, AGENT)

    async def go() -> Any:
        async with AsyncClient.connect(f"http://127.0.0.1:{free_port()}", credential) as client:
            agent = Agent(
                name="weather",
                model=scripted([THREE_CALLS[0]]),
                tools=governed(sdk_tools(ran), client),
            )
            return await Runner.run(agent, "Weather?", run_config=NO_TRACING)

    seen = outputs(asyncio.run(go()))
    assert ran.calls == []
    assert "warden_unreachable" in seen["call_weather"]
