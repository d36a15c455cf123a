"""An approval grants the ask, not a way around the bundle's modifications (issue 14
item 3).

In the default bundle ``send_money`` with a ``token`` argument both asks
(``ask-before-payment``) and redacts (``redact-token``). After approval the
resubmission must answer ``modify`` with the redaction, exactly as the bundle's modify
rules answer a step nobody asks about; and the task (stored record, REST, the desk page,
the desk's audit chain) never carries the token. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import DEFAULT_POLICY, assert_valid_response, service_client
from fastapi.testclient import TestClient

from warden.approvals.desk import desk_session_id
from warden.approvals.redaction import shown_action
from warden.approvals.tasks import ApprovalState
from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.server.app import create_app
from warden.wire.acs.client import AcsClient

SECRET = "tok-9f3a1c-very-secret"
PAYMENT = {"to": "acct-42", "amount": 250, "token": SECRET}
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime(DEFAULT_POLICY)


@pytest.fixture
def agent(rt: Runtime) -> AcsClient:
    client = service_client(rt, agent_id="agent-7")
    client.hello()
    assert client.call("steps/sessionStart", {})["result"]["decision"] == "allow"
    return client


@pytest.fixture
def http(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(rt), follow_redirects=False) as c:
        yield c


def step(client: AcsClient, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    response = client.tool_call(tool, args)
    assert_valid_response(response)
    out: dict[str, Any] = response["result"]
    return out


def test_a_granted_ask_still_gets_the_bundles_redaction(rt: Runtime, agent: AcsClient) -> None:
    # What the bundle's modify rules answer when nobody is asked: the reference.
    plain = step(agent, "lookup_account", {"account": "acct-42", "token": SECRET})
    assert plain["decision"] == "modify"
    asked = step(agent, "send_money", PAYMENT)
    assert asked["decision"] == "ask", asked
    assert "modifications" not in asked
    tid = asked["ask_details"]["task_id"]
    finance, _ = rt.api_keys.create("fay", Role.APPROVER, ["finance"])
    assert rt.desk.approve(tid, finance, "ok").state is ApprovalState.APPROVED
    granted = step(agent, "send_money", PAYMENT)
    assert granted["decision"] == "modify", granted
    assert granted["modifications"] == plain["modifications"]
    assert granted["modifications"] == {"redactions": [{"path": "/arguments/token/value"}]}
    assert {"approval_granted", "redaction_applied"} <= set(granted["reason_codes"])
    assert granted["policy_data"]["approval"]["task_id"] == tid
    task = rt.desk.get(tid)
    assert task is not None and task.state is ApprovalState.CONSUMED
    # Single use still: the same step again asks again.
    assert step(agent, "send_money", PAYMENT)["decision"] == "ask"


def test_the_task_never_holds_the_redacted_value(
    rt: Runtime, agent: AcsClient, http: TestClient
) -> None:
    tid = step(agent, "send_money", PAYMENT)["ask_details"]["task_id"]
    task = rt.desk.get(tid)
    assert task is not None
    assert task.action["arguments"] == {"to": "acct-42", "amount": 250, "token": "[REDACTED]"}
    assert task.policy["modifications"] == {"redactions": [{"path": "/arguments/token/value"}]}
    assert SECRET not in json.dumps(task.to_dict())
    # The grant is still bound to the action as received (the hash covers the token):
    # another token is another action.
    other = step(agent, "send_money", {**PAYMENT, "token": "another-token-value"})
    assert other["decision"] == "ask" and other["ask_details"]["task_id"] != tid
    # The desk's audit chain.
    for record in rt.store.iter_records(desk_session_id()):
        assert SECRET not in json.dumps(record)
    # REST, for an approver and for the requesting agent.
    _, approver_token = rt.api_keys.create("fay", Role.APPROVER, ["finance"])
    for path in (f"/v1/approvals/{tid}", "/v1/approvals"):
        r = http.get(path, headers={"authorization": f"Bearer {approver_token}"})
        assert r.status_code == 200, r.text
        assert SECRET not in r.text and "[REDACTED]" in r.text
    # The desk pages.
    form = http.get("/desk/login")
    csrf = CSRF.search(form.text)
    assert csrf is not None
    r = http.post("/desk/login", data={"token": approver_token, "csrf_token": csrf.group(1)})
    assert r.status_code == 303
    for path in ("/desk", f"/desk/tasks/{tid}"):
        page = http.get(path)
        assert page.status_code == 200
        assert SECRET not in page.text and "[REDACTED]" in page.text


@pytest.mark.parametrize(
    ("path", "wrapped", "expected"),
    [
        ("/arguments/token/value", False, {"token": "[REDACTED]", "n": {"pin": "1"}}),
        ("/arguments/n/value/pin", False, {"token": "t", "n": {"pin": "[REDACTED]"}}),
        ("/arguments/n", False, {"token": "t", "n": "[REDACTED]"}),
        ("/arguments/token/provenance", False, {"token": "t", "n": {"pin": "1"}}),
        ("/arguments", False, {"token": "[REDACTED]", "n": "[REDACTED]"}),
        ("/params/arguments/n/pin", True, {"token": "t", "n": {"pin": "[REDACTED]"}}),
        ("/arguments/token/value", True, {"token": "t", "n": {"pin": "1"}}),
        ("/arguments/absent/value", False, {"token": "t", "n": {"pin": "1"}}),
    ],
)
def test_shown_action_maps_payload_pointers_onto_the_arguments(
    path: str, wrapped: bool, expected: dict[str, Any]
) -> None:
    action = {"method": "m", "name": "t", "arguments": {"token": "t", "n": {"pin": "1"}}}
    shown = shown_action(action, [{"path": path}], wrapped_mcp=wrapped)
    assert shown["arguments"] == expected
    assert action["arguments"] == {"token": "t", "n": {"pin": "1"}}  # not changed


def test_a_replacement_text_is_shown_and_raw_command_is_covered() -> None:
    action = {"method": "m", "name": "sh", "arguments": {}, "raw_command": "curl -H secret"}
    shown = shown_action(
        action, [{"path": "/raw_command", "replacement": "(hidden)"}], wrapped_mcp=False
    )
    assert shown["raw_command"] == "(hidden)"
