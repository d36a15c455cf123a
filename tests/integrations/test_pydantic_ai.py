"""Pydantic AI behind Warden (warden.integrations.pydantic_ai).

Pydantic AI's FunctionModel emits real tool calls; the agent graph validates their
arguments and calls the tools through WardenToolset. Warden is an in-process runtime on
a SQLite file; no network, no API key.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import agent_credential
from harness import (
    AGENT,
    BUNDLE,
    THREE_CALLS,
    Ran,
    approving,
    audit,
    decisions_by_tool,
    runtime_approver,
    tool_functions,
)
from pydantic_ai import Agent, FunctionToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from warden.client import AsyncClient, Client
from warden.integrations.pydantic_ai import WardenToolset
from warden.runtime import Runtime


def scripted(calls: list[tuple[str, dict[str, Any], str]]) -> FunctionModel:
    """First turn: ``calls`` as tool calls; after the tools answered: a final text."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[ToolCallPart(n, a, tool_call_id=cid) for n, a, cid in calls]
            )
        return ModelResponse(parts=[TextPart("All done.")])

    return FunctionModel(model)


def returns(result: Any) -> dict[str, ToolReturnPart]:
    """The tool results the model was sent, by tool call id."""
    return {
        part.tool_call_id: part
        for message in result.all_messages()
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }


def toolset(ran: Ran) -> FunctionToolset[Any]:
    return FunctionToolset(list(tool_functions(ran).values()))


@pytest.fixture(autouse=True)
def close_run_sync_loop() -> Iterator[None]:
    """``Agent.run_sync`` leaves the event loop it made set on the thread, for reuse
    (``pydantic_ai._utils.get_event_loop``); close it after each test, or a later
    ``asyncio.run`` in this worker drops it unclosed (a ResourceWarning, an error here)."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop()
        except RuntimeError:
            return
    if not loop.is_running():
        loop.close()
    asyncio.set_event_loop(None)


@pytest.fixture
def rt(make_runtime: Any) -> Runtime:
    runtime: Runtime = make_runtime(BUNDLE)
    agent_credential(runtime, AGENT)
    return runtime


@pytest.fixture
def client(rt: Runtime) -> Iterator[Client]:
    with Client.in_process(rt, agent_id=AGENT) as c:
        yield c


def test_deny_ask_allow_through_a_pydantic_ai_agent(rt: Runtime) -> None:
    ran = Ran()

    async def go() -> tuple[Any, str]:
        async with AsyncClient.in_process(rt, agent_id=AGENT) as aclient:
            agent = Agent(
                scripted(THREE_CALLS),
                toolsets=[WardenToolset(toolset(ran), aclient, approval_timeout=20)],
            )
            result = await agent.run("Do the errands.")
            return result, aclient.session_id

    with approving(runtime_approver(rt)):
        result, session = asyncio.run(go())

    seen = returns(result)
    assert seen["call_weather"].content == "Sunny in Oslo"
    assert seen["call_weather"].outcome == "success"
    wipe = seen["call_wipe"]
    assert wipe.outcome == "failed"  # Pydantic AI's ToolFailed: the model reads the refusal
    assert str(wipe.content).startswith("Warden denied the call to wipe_disk: Wiping a disk")
    assert seen["call_pay"].content == "Sent 40 to bob"
    assert ran.names() == ["get_weather", "send_payment"]
    assert result.output == "All done."

    rows = audit(rt.store.iter_records(session))
    assert decisions_by_tool(rows) == {
        "get_weather": ["allow"],
        "wipe_disk": ["deny"],
        "send_payment": ["ask", "allow"],
    }
    results = sorted(t for step, t, d in rows if step == "steps/toolCallResult" and d == "allow")
    assert results == ["get_weather", "send_payment"]


def test_run_sync_with_a_sync_client_refuses_an_unanswered_ask(rt: Runtime, client: Client) -> None:
    ran = Ran()
    agent = Agent(
        scripted(THREE_CALLS),
        toolsets=[WardenToolset(toolset(ran), client, approval_timeout=0)],
    )
    seen = returns(agent.run_sync("Do the errands."))
    pay = seen["call_pay"]
    assert pay.outcome == "failed" and "a human must approve it" in str(pay.content)
    assert ran.names() == ["get_weather"]
    by_tool = decisions_by_tool(audit(rt.store.iter_records(client.session_id)))
    assert by_tool == {"get_weather": ["allow"], "wipe_disk": ["deny"], "send_payment": ["ask"]}


def test_modify_runs_the_tool_with_wardens_arguments(client: Client) -> None:
    ran = Ran()
    agent = Agent(
        scripted([("lookup_orders", {"customer": "c9", "limit": 500}, "call_o")]),
        toolsets=[WardenToolset(toolset(ran), client)],
    )
    seen = returns(agent.run_sync("Orders?"))
    assert ran.calls == [("lookup_orders", {"customer": "c9", "limit": 5})], seen
    assert seen["call_o"].content == "5 orders of c9"


def test_a_redacted_output_reaches_the_model_redacted(client: Client) -> None:
    ran = Ran()
    agent = Agent(
        scripted([("read_note", {"name": "deploy"}, "call_n")]),
        toolsets=[WardenToolset(toolset(ran), client)],
    )
    seen = returns(agent.run_sync("Note?"))
    assert ran.names() == ["read_note"], seen
    assert seen["call_n"].content == "[REDACTED]"


def test_a_toolset_needs_a_client() -> None:
    with pytest.raises(TypeError, match="needs a warden.Client"):
        WardenToolset(toolset(Ran()), None)
