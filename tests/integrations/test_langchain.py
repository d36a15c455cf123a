"""LangChain / LangGraph behind Warden (warden.integrations.langchain).

LangChain's own fake chat model (GenericFakeChatModel) emits real tool calls; the agent
graph of ``langchain.agents.create_agent`` (a LangGraph ToolNode) runs the governed
tools, in parallel threads for ``invoke`` and as coroutines for ``ainvoke``. Warden is an
in-process runtime on a SQLite file; no network, no API key.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Annotated, Any

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
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolArg, tool

from warden.client import AsyncClient, Client
from warden.integrations.langchain import GovernedTool, WardenToolRefused, governed
from warden.runtime import Runtime


class ScriptedChat(GenericFakeChatModel):
    """LangChain's fake chat model; binding tools is a no-op (its answers are scripted)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def scripted(calls: list[tuple[str, dict[str, Any], str]]) -> ScriptedChat:
    """One AI message with ``calls`` as tool calls, then a final answer."""
    turns = [
        AIMessage(
            content="",
            tool_calls=[
                {"name": n, "args": a, "id": cid, "type": "tool_call"} for n, a, cid in calls
            ],
        ),
        AIMessage(content="All done."),
    ]
    return ScriptedChat(messages=iter(turns))


def lc_tools(ran: Ran) -> list[BaseTool]:
    return [tool(f) for f in tool_functions(ran).values()]


def tool_messages(state: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}


@pytest.fixture
def rt(make_runtime: Any) -> Runtime:
    runtime: Runtime = make_runtime(BUNDLE)
    agent_credential(runtime, AGENT)
    return runtime


@pytest.fixture
def client(rt: Runtime) -> Iterator[Client]:
    with Client.in_process(rt, agent_id=AGENT) as c:
        yield c


def test_deny_ask_allow_through_a_langchain_agent(rt: Runtime, client: Client) -> None:
    ran = Ran()
    agent = create_agent(
        scripted(THREE_CALLS), governed(lc_tools(ran), client, approval_timeout=20)
    )
    with approving(runtime_approver(rt)):
        state = agent.invoke({"messages": [("user", "Do the errands.")]})

    seen = tool_messages(state)
    assert (seen["call_weather"].content, seen["call_weather"].status) == (
        "Sunny in Oslo",
        "success",
    )
    wipe = seen["call_wipe"]
    assert wipe.status == "error" and wipe.name == "wipe_disk"
    assert str(wipe.content).startswith("Warden denied the call to wipe_disk: Wiping a disk")
    assert (seen["call_pay"].content, seen["call_pay"].status) == ("Sent 40 to bob", "success")
    assert ran.names() == ["get_weather", "send_payment"]
    assert state["messages"][-1].content == "All done."  # the graph went on after the deny

    rows = audit(rt.store.iter_records(client.session_id))
    assert decisions_by_tool(rows) == {
        "get_weather": ["allow"],
        "wipe_disk": ["deny"],
        "send_payment": ["ask", "allow"],
    }
    results = sorted(t for step, t, d in rows if step == "steps/toolCallResult" and d == "allow")
    assert results == ["get_weather", "send_payment"]


def test_the_async_graph_with_an_async_client(rt: Runtime) -> None:
    """ainvoke: the ToolNode awaits GovernedTool.arun; an unanswered ask is refused."""
    ran = Ran()

    async def go() -> tuple[dict[str, Any], str]:
        async with AsyncClient.in_process(rt, agent_id=AGENT) as aclient:
            agent = create_agent(
                scripted(THREE_CALLS), governed(lc_tools(ran), aclient, approval_timeout=0.3)
            )
            state = await agent.ainvoke({"messages": [("user", "Do the errands.")]})
            return state, aclient.session_id

    state, session = asyncio.run(go())
    seen = tool_messages(state)
    assert seen["call_weather"].content == "Sunny in Oslo"
    assert seen["call_wipe"].status == "error"
    pay = seen["call_pay"]
    assert pay.status == "error" and "a human must approve it" in str(pay.content)
    assert ran.names() == ["get_weather"]
    by_tool = decisions_by_tool(audit(rt.store.iter_records(session)))
    asks = by_tool.pop("send_payment")  # the ask, and any resubmission while waiting
    assert asks and set(asks) == {"ask"}
    assert by_tool == {"get_weather": ["allow"], "wipe_disk": ["deny"]}


def test_modify_runs_the_tool_with_wardens_arguments(client: Client) -> None:
    ran = Ran()
    agent = create_agent(
        scripted([("lookup_orders", {"customer": "c9", "limit": 500}, "call_o")]),
        governed(lc_tools(ran), client),
    )
    state = agent.invoke({"messages": [("user", "Orders?")]})
    assert ran.calls == [("lookup_orders", {"customer": "c9", "limit": 5})], state
    assert tool_messages(state)["call_o"].content == "5 orders of c9"


def test_a_redacted_output_reaches_the_model_redacted(client: Client) -> None:
    ran = Ran()
    agent = create_agent(
        scripted([("read_note", {"name": "deploy"}, "call_n")]), governed(lc_tools(ran), client)
    )
    state = agent.invoke({"messages": [("user", "Note?")]})
    assert ran.names() == ["read_note"], state
    assert tool_messages(state)["call_n"].content == "[REDACTED]"


def test_direct_invoke_returns_the_refusal_or_raises(client: Client) -> None:
    ran = Ran()
    wipe = governed(tool(tool_functions(ran)["wipe_disk"]), client)
    assert isinstance(wipe, GovernedTool) and wipe.name == "wipe_disk"
    assert wipe.tool_call_schema.model_json_schema()["properties"].keys() == {"device"}
    text = wipe.invoke({"device": "/dev/sda"})
    assert text.startswith("Warden denied the call to wipe_disk")
    strict = governed(tool(tool_functions(ran)["wipe_disk"]), client, on_deny="raise")
    with pytest.raises(WardenToolRefused, match="Wiping a disk is never allowed"):
        strict.invoke({"device": "/dev/sda"})
    assert ran.calls == []
    weather = governed(tool(tool_functions(ran)["get_weather"]), client)
    assert weather.invoke({"city": "Rome"}) == "Sunny in Rome"


def test_an_async_client_on_a_sync_path_is_a_clear_error(rt: Runtime) -> None:
    ran = Ran()
    aclient = AsyncClient.in_process(rt, agent_id=AGENT)
    weather = governed(tool(tool_functions(ran)["get_weather"]), aclient)
    with pytest.raises(TypeError, match="give it a warden.Client"):
        weather.invoke({"city": "Rome"})
    assert ran.calls == []
    asyncio.run(aclient.aclose())


def test_governed_refuses_what_is_not_a_tool(client: Client) -> None:
    with pytest.raises(TypeError, match="takes LangChain tools"):
        governed([lambda city: city], client)  # type: ignore[list-item]


def test_injected_arguments_stay_in_the_process(rt: Runtime, client: Client) -> None:
    """Warden sees the model's arguments only; an injected one reaches the tool unchanged."""
    got: list[tuple[str, str]] = []

    @tool
    def get_weather(city: str, user_id: Annotated[str, InjectedToolArg]) -> str:
        """Today's weather in a city."""
        got.append((city, user_id))
        return f"Sunny in {city}"

    weather = governed(get_weather, client)
    assert weather.invoke({"city": "Oslo", "user_id": "u-secret"}) == "Sunny in Oslo"
    assert got == [("Oslo", "u-secret")]
    sent = [
        json.loads(r["request"])["payload"]["arguments"]
        for r in rt.store.iter_records(client.session_id)
        if r["kind"] == "entry" and r["entry"]["step_type"] == "steps/toolCallRequest"
    ]
    assert sent == [{"city": {"value": "Oslo"}}]
