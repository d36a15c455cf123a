"""An action request is the pair (principal, action_request_id) (decisions 970-972): a
principal that sends an id another principal already used is decided as if the id were
fresh, on its own desk task, and reads only its own; approvers and admins name whose
request they read when several principals used the id. Before, the second principal
was refused ``409 record:conflict`` and so learned that the id existed. Both backends:
migration 0015 keys ``kla_records`` per principal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from kla_wire_helpers import CREDIT, Reply, assert_error, key, load
from typer.testing import CliRunner

from warden.cli import app as cli_app
from warden.identity.api_keys import Role
from warden.runtime import Runtime

RID = "req_action_demo_0002"  # credit-disposition.json's id
DONE = {
    "tool_call": {"name": "credit.dispose", "params_digest": "sha256:" + "ab" * 32},
    "outcome": {"status": "succeeded"},
}
_VOLATILE = ("policy_decision_id", "decided_at", "task_id")


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


def _same_answer(got: Reply, missing: Reply) -> None:
    assert (got.status, got.body) == (missing.status, missing.body)
    volatile = {"date", "x-request-id", "content-length"}
    assert {k: v for k, v in got.headers.items() if k not in volatile} == {
        k: v for k, v in missing.headers.items() if k not in volatile
    }


def _state(rt: Runtime, task_id: str) -> str:
    task = rt.desk.get(task_id)
    assert task is not None
    return task.state.value


def _decision(reply: Reply) -> dict[str, Any]:
    return {k: v for k, v in reply.data["decision"].items() if k not in _VOLATILE}


def test_a_used_id_is_fresh_to_another_principal(runtime: Runtime, app_client: TestClient) -> None:
    a = key(runtime, app_client, "bot-1", Role.AGENT)
    b = key(runtime, app_client, "bot-2", Role.AGENT)
    fay = key(runtime, app_client, "fay", Role.APPROVER, "finance")
    before = {
        path: b.call("GET", path)
        for path in (f"/v1/action-requests/{RID}", f"/v1/kla-records/{RID}")
    }
    named_before = b.call("GET", f"/v1/action-requests/{RID}?principal=bot-1")
    first = a.submit(CREDIT)
    assert first.status == 200, first.body
    # bot-2 sends the very same record (same id, execution and digest).
    theirs = b.submit(CREDIT)
    assert theirs.status == 200, theirs.body
    assert "replayed" not in theirs.body
    assert set(theirs.body) == set(first.body) and set(theirs.data) == set(first.data)
    assert _decision(theirs) == _decision(first)  # decided as a fresh request
    assert theirs.data["task"]["state"] == "pending"
    a_task, b_task = first.data["task"]["id"], theirs.data["task"]["id"]
    assert a_task != b_task  # its own task: bot-1's is neither shown nor shared
    # bot-2 reads its own request and record; naming bot-1 reads as missing.
    for path, missing in before.items():
        assert missing.status == 404
        own = b.call("GET", path)
        assert own.status == 200, own.body
    shown = b.show(RID)
    assert shown.data["decision"]["record"] == theirs.data["decision"]
    _same_answer(b.call("GET", f"/v1/action-requests/{RID}?principal=bot-1"), named_before)
    # bot-1's approval is bot-1's: bot-2 cannot use it.
    assert fay.call("POST", f"/v1/approvals/{a_task}/approve", {"reason": "ok"}).status == 200
    assert_error(b.outcome(RID, DONE), "record:not_authorized", 409, resolution="human_approval")
    assert _state(runtime, a_task) == "approved"  # not consumed by bot-2's outcome
    assert a.outcome(RID, DONE).status == 200
    assert _state(runtime, b_task) == "pending"
    assert a.show(RID).data["status"] == "completed"
    assert b.show(RID).data["status"] == "awaiting_approval"


def test_approvers_name_whose_request_when_several_used_the_id(
    runtime: Runtime, app_client: TestClient
) -> None:
    a = key(runtime, app_client, "bot-1", Role.AGENT)
    b = key(runtime, app_client, "bot-2", Role.AGENT)
    fay = key(runtime, app_client, "fay", Role.APPROVER, "finance")
    admin = key(runtime, app_client, "root", Role.ADMIN)
    ra = a.submit(CREDIT)
    # One principal's: read as before, without naming it.
    assert fay.show(RID).status == 200
    other = load(CREDIT)
    other["amount"]["value"] = "13000.00"
    rb = b.submit(other)
    assert rb.status == 200, rb.body
    for caller in (fay, admin):
        for path in (f"/v1/action-requests/{RID}", f"/v1/kla-records/{RID}"):
            refused = assert_error(
                caller.call("GET", path), "input:several_owners", 400, resolution="retry"
            )
            assert "?principal=" in refused["message"] and "'bot-2'" in refused["message"]
        for who, reply in (("bot-1", ra), ("bot-2", rb)):
            named = caller.call("GET", f"/v1/action-requests/{RID}?principal={who}")
            assert named.status == 200, named.body
            assert named.data["decision"]["record"] == reply.data["decision"]
            rec = caller.call("GET", f"/v1/kla-records/{RID}?principal={who}")
            assert rec.status == 200, rec.body
            assert rec.data["record"]["digest"] == reply.data["action_request"]["digest"]
        nobody = caller.call("GET", f"/v1/action-requests/{RID}?principal=nobody")
        assert_error(nobody, "record:not_found", 404, resolution="retry")
    # Two rows share the record_id; `warden verify` matches each to its own entry.
    out = CliRunner().invoke(
        cli_app,
        ["verify", "--data-dir", str(runtime.settings.data_dir), "--json"]
        + ["--database-url", runtime.settings.database_url],
    )
    assert out.exit_code == 0, out.output
