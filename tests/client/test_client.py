"""``warden.Client`` / ``warden.AsyncClient`` against real Warden runtimes: in process
on a SQLite file, and over HTTP to a real ``warden serve``. Each test drives signed ACS
steps under the shipped default bundle and checks the Decision and the audit chain."""

from __future__ import annotations

import asyncio
import inspect
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import DEFAULT_POLICY, Server, agent_credential, free_port, start_server
from outage import hold_write_lock

import warden
from warden.approvals.tasks import ApprovalState
from warden.identity.api_keys import Role
from warden.runtime import Runtime


def entries(rt: Runtime, session_id: str) -> list[tuple[str, str]]:
    """(step_type, decision) of each audit entry of a session, in chain order."""
    return [
        (r["entry"]["step_type"], r["entry"]["verdict"]["decision"])
        for r in rt.store.iter_records(session_id)
        if r["kind"] == "entry"
    ]


@pytest.fixture
def client(runtime: Runtime) -> warden.Client:
    agent_credential(runtime, "coder")
    return warden.Client.in_process(runtime, agent_id="coder")


def test_allow_deny_modify_and_the_result_are_audited(
    runtime: Runtime, client: warden.Client
) -> None:
    allowed = client.tool_call_request("read_file", {"path": "/etc/hosts"})
    assert allowed.allowed and not allowed.denied and allowed.decision == "allow"
    assert allowed.rule_ids == ("tool-calls",) and allowed.chain_hash == client.chain_hash
    denied = client.tool_call_request("Bash", {"command": "rm -rf /"})
    assert denied.denied and not denied.allowed
    assert "destructive_shell_command_blocked" in denied.reason_codes
    assert "destructive-shell" in denied.rule_ids and denied.reasoning
    modified = client.tool_call_request("login", {"user": "bob", "password": "hunter2"})
    assert modified.decision == "modify" and modified.allowed
    assert modified.modified_args == {"user": "bob", "password": "[REDACTED]"}
    assert modified.args_for({"user": "bob", "password": "hunter2"})["password"] == "[REDACTED]"
    result = client.tool_call_result(allowed, "127.0.0.1 localhost")
    assert result.allowed
    assert entries(runtime, client.session_id) == [
        ("steps/toolCallRequest", "allow"),
        ("steps/toolCallRequest", "deny"),
        ("steps/toolCallRequest", "modify"),
        ("steps/toolCallResult", "allow"),
    ]
    # The result names its request.
    last = list(runtime.store.iter_records(client.session_id))[-2]
    assert last["kind"] == "entry"
    assert client.session.chain_hash == last["entry"]["entry_hash"]


def test_ask_then_approval_on_the_desk_allows_the_resubmitted_step(
    runtime: Runtime, client: warden.Client
) -> None:
    asked = client.tool_call_request("delete_file", {"path": "/srv/old"})
    assert asked.needs_approval and asked.decision == "ask"
    assert asked.task_id and asked.task_url and asked.task_url.endswith(asked.task_id)
    approver, _ = runtime.api_keys.create("alice", Role.APPROVER, ["operators"])

    def approve_soon() -> None:
        time.sleep(0.3)
        runtime.desk.approve(str(asked.task_id), approver, "checked")

    import threading

    t = threading.Thread(target=approve_soon)
    t.start()
    final = client.wait_for_approval(asked, timeout=20, poll=0.1)
    t.join()
    assert final.decision == "allow" and "approval_granted" in final.reason_codes
    task = runtime.desk.get(str(asked.task_id))
    assert task is not None and task.state is ApprovalState.CONSUMED
    steps = entries(runtime, client.session_id)
    assert steps[0] == ("steps/toolCallRequest", "ask") and steps[-1][1] == "allow"


def test_waiting_past_the_timeout_is_a_client_deny(client: warden.Client) -> None:
    asked = client.tool_call_request("delete_file", {"path": "/srv/x"})
    started = time.monotonic()
    final = client.wait_for_approval(asked, timeout=0.3, poll=0.1)
    assert time.monotonic() - started < 5
    assert final.denied and final.reason_codes == ("approval_wait_timeout",)
    assert final.raw == {} and asked.task_id in final.reasoning


def test_lifecycle_steps_and_a_closed_session(runtime: Runtime, client: warden.Client) -> None:
    assert client.session_start().allowed
    assert client.user_prompt("tidy the repo").allowed
    assert client.session_end().allowed
    after = client.tool_call_request("read_file", {"path": "/a"})
    assert after.denied  # a sealed session refuses every later step
    kinds = [s for s, _ in entries(runtime, client.session_id)]
    assert kinds == ["steps/sessionStart", "steps/userMessage", "steps/sessionEnd"]


def test_a_second_process_joins_the_session_by_name(runtime: Runtime) -> None:
    cred = agent_credential(runtime, "coder")
    first = warden.Client.in_process(runtime, credential=cred, session_id="claude-abc")
    second = warden.Client.in_process(runtime, credential=cred, session_id="claude-abc")
    assert first.session_id == second.session_id  # a stable UUIDv5 of the name
    assert first.tool_call_request("read_file", {"path": "/a"}).allowed
    assert second.tool_call_request("read_file", {"path": "/b"}).allowed
    assert len(entries(runtime, first.session_id)) == 2


def test_another_agents_key_cannot_join_a_session(runtime: Runtime) -> None:
    a = warden.Client.in_process(runtime, credential=agent_credential(runtime, "a"), session_id="s")
    assert a.tool_call_request("read_file", {"path": "/a"}).allowed
    # The same name under another agent's key is another session (decision 1006) ...
    b = warden.Client.in_process(runtime, credential=agent_credential(runtime, "b"), session_id="s")
    assert b.session_id != a.session_id
    assert b.tool_call_request("read_file", {"path": "/a"}).allowed
    assert len(entries(runtime, a.session_id)) == 1
    # ... and a's id itself, named by b, reads as a session that does not exist.
    on_a = warden.Client.in_process(
        runtime, credential=agent_credential(runtime, "b"), session_id=a.session_id
    )
    with pytest.raises(warden.WardenProtocolError, match="no handshake/hello"):
        on_a.tool_call_request("read_file", {"path": "/a"})
    assert len(entries(runtime, a.session_id)) == 1


def test_a_named_session_id_is_the_agents_own_secret() -> None:
    """Decision 1006: a name maps to HMAC-SHA256(agent key, name) as a UUIDv4 — stable
    for one key, different for another, not the UUIDv5 of the name anyone computes."""
    import uuid

    from warden.client.session import SESSION_NAMESPACE, session_uuid
    from warden.crypto.agent_key import AgentCredential

    one = AgentCredential("a", "ak_1", bytes(32))
    other = AgentCredential("b", "ak_2", bytes([1]) * 32)
    sid = session_uuid("squat-test", one)
    assert sid == session_uuid("squat-test", one)
    assert sid == "d7ce15b6-7327-42be-b049-79cee86bf675"
    assert uuid.UUID(sid).version == 4
    assert sid != session_uuid("squat-test", other)
    assert sid != str(uuid.uuid5(SESSION_NAMESPACE, "squat-test"))
    assert session_uuid("7c6f3b5e-2f1a-4d4b-9a0e-2b1c3d4e5f60", other) == (
        "7c6f3b5e-2f1a-4d4b-9a0e-2b1c3d4e5f60"
    )


def test_bad_use_is_a_clear_error_before_anything_is_sent(
    runtime: Runtime, client: warden.Client
) -> None:
    with pytest.raises(warden.WardenClientError, match="tool_name"):
        client.tool_call_request("", {})
    with pytest.raises(warden.WardenClientError, match="no tool call request"):
        client.tool_call_result("5b0e7c8e-0d5e-4a36-9a42-4a3c7a3f0c11", "x")
    with pytest.raises(warden.WardenClientError, match="agent_id"):
        warden.Client.in_process(runtime)
    with pytest.raises(warden.WardenClientError, match="not registered"):
        warden.Client.in_process(runtime, agent_id="nobody")
    with pytest.raises(warden.WardenClientError, match="Runtime or Settings"):
        warden.Client.in_process(object())  # type: ignore[arg-type]
    with pytest.raises(warden.WardenClientError, match="http"):
        warden.Client.connect("127.0.0.1:8787", agent_credential(runtime, "coder"))
    assert entries(runtime, client.session_id) == []


def test_an_unreachable_warden_raises_and_decides_nothing(runtime: Runtime) -> None:
    cred = agent_credential(runtime, "coder")
    url = f"http://127.0.0.1:{free_port()}"
    with warden.Client.connect(url, cred, timeout=2) as c, pytest.raises(warden.WardenUnavailable):
        c.tool_call_request("read_file", {"path": "/a"})


def test_the_default_timeout_outlasts_the_servers_default_lock_waits() -> None:
    """A client must wait longer than the server waits for a locked store, or it gives up
    before the server's signed ``store_unavailable`` deny arrives (decision 1155)."""
    from warden.client.sync import DEFAULT_TIMEOUT_S
    from warden.store.sql import DEFAULT_LOCK_TIMEOUT_MS

    longest_s = max(DEFAULT_LOCK_TIMEOUT_MS.values()) / 1000
    assert longest_s + 10 <= DEFAULT_TIMEOUT_S
    for connect in (warden.Client.connect, warden.AsyncClient.connect):
        assert inspect.signature(connect).parameters["timeout"].default == DEFAULT_TIMEOUT_S


def test_a_default_client_gets_the_signed_deny_from_a_locked_store(tmp_path: Path) -> None:
    srv: Server = start_server(
        tmp_path / "srv", DEFAULT_POLICY, "--database-lock-timeout-ms", "200"
    )
    try:
        key = tmp_path / "agent.key"
        agent_credential(srv.database_url, "locked-out").write(key)
        with warden.Client.from_key_file(srv.url, key, session_id="locked") as c:
            assert c.tool_call_request("read_file", {"path": "/a"}).allowed
            with hold_write_lock(srv.database_url):
                d = c.tool_call_request("read_file", {"path": "/b"})
        assert d.denied and d.reason_codes == ("store_unavailable",)
    finally:
        srv.stop()


def test_a_forged_answer_is_an_integrity_error(runtime: Runtime) -> None:
    cred = agent_credential(runtime, "coder")

    def tampering(body: bytes) -> Any:
        response = runtime.acs.handle(body)
        if "decision" in response.get("result", {}):
            response["result"]["decision"] = "allow"
        return response

    c = warden.Client(tampering, cred)
    with pytest.raises(warden.IntegrityError):
        c.tool_call_request("Bash", {"command": "rm -rf /"})


def test_a_revoked_key_is_a_protocol_error(runtime: Runtime) -> None:
    client = warden.Client.in_process(runtime, credential=agent_credential(runtime, "gone"))
    assert client.tool_call_request("read_file", {"path": "/a"}).allowed
    assert runtime.agents is not None
    runtime.agents.revoke("gone")
    with pytest.raises(warden.WardenProtocolError) as err:
        client.tool_call_request("read_file", {"path": "/a"})
    assert err.value.code == -32004


def test_async_client_over_real_http(tmp_path: Path) -> None:
    srv: Server = start_server(tmp_path / "srv")
    try:
        cred = agent_credential(srv.database_url, "async-agent")

        async def run() -> list[str]:
            async with warden.AsyncClient.connect(srv.url, cred) as c:
                got = [
                    await c.tool_call_request("read_file", {"path": "/a"}),
                    await c.tool_call_request("Bash", {"command": "rm -rf /"}),
                    await c.tool_call_request("delete_file", {"path": "/b"}),
                ]
                timed_out = await c.wait_for_approval(got[2], timeout=0.2, poll=0.05)
                await c.tool_call_result(got[0], {"ok": True})
                return [d.decision for d in got] + [timed_out.decision]

        assert asyncio.run(run()) == ["allow", "deny", "ask", "deny"]
    finally:
        srv.stop()


def test_async_in_process_from_settings_owns_its_runtime(tmp_path: Path) -> None:
    from conftest import DEFAULT_POLICY, write_key

    from warden.settings import Settings

    data = tmp_path / "d"
    settings = Settings(data_dir=data, policy=DEFAULT_POLICY, key_file=write_key(data / "ikm.key"))
    rt = Runtime.start(settings)
    cred = agent_credential(rt, "coder")
    rt.close()

    async def run() -> str:
        async with warden.AsyncClient.in_process(settings, credential=cred) as c:
            return (await c.tool_call_request("read_file", {"path": "/a"})).decision

    assert asyncio.run(run()) == "allow"
