"""A revoked agent key is told ``key_revoked`` only when the request proves it holds
that key (decision 1039). Before, ``callers.forget`` made a revoked key look unknown, so
the agent (and the MCP proxy signing as it) got ``signature_invalid``; a caller without
the key still gets exactly what it gets for a key id that never existed."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from warden.runtime import Runtime
from warden.wire.acs.client import AcsClient
from warden.wire.mcp.gateway import Gateway


def _without_ids(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k != "id"}


def _with_agent(make_runtime: Callable[..., Runtime], agent_id: str) -> tuple[Runtime, Any]:
    """A runtime and the credential of ``agent_id``, registered to alice."""
    rt = make_runtime()
    assert rt.agents is not None
    _, cred = rt.agents.add(agent_id, "alice")
    return rt, cred


def test_the_holder_of_a_revoked_key_is_told_and_nobody_else(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt, cred = _with_agent(make_runtime, "bot-r")
    agent = AcsClient.for_agent(rt.acs.handle, cred)
    assert "result" in agent.hello()
    rt.agents.revoke("bot-r")
    for answer in (
        agent.call("steps/sessionStart", {}),
        AcsClient.for_agent(rt.acs.handle, cred).hello(),  # a new session too
    ):
        error = answer["error"]
        assert error["code"] == -32004 and error["data"]["reason"] == "key_revoked", answer
        assert cred.key_id in error["message"]
        assert "signature" not in error  # unauthenticated: unsigned
    # Someone naming the revoked key without holding it, and someone naming a key id
    # that never existed: the same answer, which says nothing about the key.
    session = agent.session_id
    forged = AcsClient(rt.acs.handle, os.urandom(32), agent_id="bot-r", key_id=cred.key_id)
    never = AcsClient(
        rt.acs.handle, os.urandom(32), agent_id="bot-r", key_id="agk_" + os.urandom(8).hex()
    )
    answers = []
    for client in (forged, never):
        client.session_id = session
        answer = client.call("steps/sessionStart", {})
        assert answer["error"]["data"]["reason"] == "signature_invalid", answer
        answers.append(_without_ids(answer))
    assert answers[0] == answers[1]


def test_the_mcp_proxy_gateway_of_a_revoked_agent_says_key_revoked(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt, cred = _with_agent(make_runtime, "bot-m")
    gateway = Gateway.for_agent(rt.acs.handle, cred, in_process=True)
    gateway.open()
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    assert gateway.check(listing).decision == "allow"
    rt.agents.revoke("bot-m")
    for rid in (2, 3):  # the first and every later one
        ruling = gateway.check(listing | {"id": rid})
        assert ruling.decision == "deny" and ruling.reason_codes == ["key_revoked"], ruling
