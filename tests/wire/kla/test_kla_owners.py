"""An execution is the pair (principal, execution_id) (fresh-user review M2, decisions
930-934): an agent that reuses another principal's execution_id starts its own execution,
whose records go on its own chain; neither export mixes the other's records, the plain
chain's head does not move, and approvers and admins name whose execution to export when
several principals used the execution_id. Before, the second agent's records were
appended to the first one's chain and exported in one bundle with them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from kla_wire_helpers import CREDIT, Caller, Reply, assert_error, key, load, write_evidence
from typer.testing import CliRunner

from warden.cli import app as cli_app
from warden.identity.api_keys import Role
from warden.kla import verify_bundle
from warden.kla.evidence import execution_session_id, owned_session_id
from warden.runtime import Runtime
from warden.server.app import create_app

EXECUTION = "exec_credit_review_demo_0001"
RID_A = "req_action_demo_0002"
RID_B = "req_bot2_0001"
DONE = {
    "tool_call": {"name": "credit.dispose", "params_digest": "sha256:" + "ab" * 32},
    "outcome": {"status": "succeeded"},
}
runner = CliRunner()


def _head(rt: Runtime, sid: str) -> str | None:
    session = rt.store.load_session(sid, fresh=True)
    return session.head_hash if session is not None else None


def _rids(data: dict[str, Any]) -> set[str]:
    """The action requests a bundle's records belong to."""
    out = set()
    for line in data["records"]:
        record = line["record"]
        rid = record.get("action_request_id") or record["action_request"]["action_request_id"]
        out.add(rid)
    return out


def _export(rt: Runtime, where: Path, *extra: str) -> Any:
    return runner.invoke(
        cli_app,
        ["export-evidence", EXECUTION, "--out", str(where), "--json",
         "--data-dir", str(rt.settings.data_dir), *extra],
    )  # fmt: skip


def _two_owners(rt: Runtime, client: TestClient) -> tuple[Caller, Caller, Caller, str]:
    """bot-1 submits the credit disposition; bot-2 the same with its own id and amount,
    approved by fay and completed. Returns both agents, fay and bot-1's plain head."""
    a = key(rt, client, "bot-1", Role.AGENT)
    b = key(rt, client, "bot-2", Role.AGENT)
    fay = key(rt, client, "fay", Role.APPROVER, "finance")
    r = a.submit(CREDIT)
    assert r.status == 200, r.body
    head_a = _head(rt, execution_session_id(EXECUTION))
    assert head_a is not None
    other = load(CREDIT)
    other["action_request_id"] = RID_B
    other["amount"]["value"] = "13000.00"
    r = b.submit(other)
    # The normal answer, with its own decision; nothing tells of bot-1's execution.
    assert r.status == 200, r.body
    assert r.data["decision"]["action_request_id"] == RID_B
    assert r.data["decision"]["decision"] == "require_approval"
    assert "replayed" not in r.body
    tid = r.data["task"]["id"]
    assert fay.call("POST", f"/v1/approvals/{tid}/approve", {"reason": "ok"}).status == 200
    assert b.outcome(RID_B, DONE).status == 200
    return a, b, fay, head_a


def test_a_reused_execution_id_is_a_separate_execution(
    runtime: Runtime, app_client: TestClient, tmp_path: Path
) -> None:
    a, b, _, head_a = _two_owners(runtime, app_client)
    # bot-1's chain did not move; bot-2's records are on bot-2's own chain.
    assert _head(runtime, execution_session_id(EXECUTION)) == head_a
    head_b = _head(runtime, owned_session_id("bot-2", EXECUTION))
    assert head_b is not None and head_b != head_a
    mine = a.call("GET", f"/v1/executions/{EXECUTION}/evidence")
    assert mine.status == 200, mine.body
    assert _rids(mine.data) == {RID_A} and len(mine.data["records"]) == 2
    assert mine.data["manifest"]["chain_head"] == head_a
    theirs = b.call("GET", f"/v1/executions/{EXECUTION}/evidence")
    assert theirs.status == 200, theirs.body
    assert _rids(theirs.data) == {RID_B}
    assert [line["kind"] for line in theirs.data["records"]] == [
        "action_request",
        "policy_decision",
        "approval_event",
        "audit_event",
    ]
    assert theirs.data["manifest"]["chain_head"] == head_b
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(a.call("GET", "/v1/keys").data))
    from warden.kla import KeyRegistry

    trusted = KeyRegistry.load(keys)
    for name, data in (("a", mine.data), ("b", theirs.data)):
        assert verify_bundle(write_evidence(data, tmp_path / name), trusted_keys=trusted).ok
    # warden verify: both chains and every row agree.
    out = runner.invoke(cli_app, ["verify", "--data-dir", str(runtime.settings.data_dir), "--json"])
    assert out.exit_code == 0, out.output


def test_approvers_and_the_cli_name_whose_execution(
    runtime: Runtime, app_client: TestClient, tmp_path: Path
) -> None:
    _, _, fay, head_a = _two_owners(runtime, app_client)
    admin = key(runtime, app_client, "root", Role.ADMIN)
    for caller in (fay, admin):
        refused = assert_error(
            caller.call("GET", f"/v1/executions/{EXECUTION}/evidence"),
            "input:several_owners",
            400,
            resolution="retry",
        )
        assert "?principal=" in refused["message"] and "'bot-2'" in refused["message"]
        named = caller.call("GET", f"/v1/executions/{EXECUTION}/evidence?principal=bot-1")
        assert named.status == 200 and _rids(named.data) == {RID_A}, named.body
        assert named.data["manifest"]["chain_head"] == head_a
        named = caller.call("GET", f"/v1/executions/{EXECUTION}/evidence?principal=bot-2")
        assert named.status == 200 and _rids(named.data) == {RID_B}, named.body
    # The offline export: exit 2 naming the option, nothing written.
    out = _export(runtime, tmp_path / "both")
    assert out.exit_code == 2 and "--principal" in out.stderr, out.output
    assert out.stdout == "" and not (tmp_path / "both").exists()
    for principal, rid, count in (("bot-1", RID_A, 2), ("bot-2", RID_B, 4)):
        out = _export(runtime, tmp_path / principal, "--principal", principal)
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["records"] == count
        lines = (tmp_path / principal / "records.jsonl").read_text().splitlines()
        assert _rids({"records": [json.loads(line) for line in lines]}) == {rid}
    out = _export(runtime, tmp_path / "nobody", "--principal", "nobody")
    assert out.exit_code == 1


def _same_answer(got: Reply, missing: Reply) -> None:
    assert (got.status, got.body) == (missing.status, missing.body)
    volatile = {"date", "x-request-id", "content-length"}
    assert {k: v for k, v in got.headers.items() if k not in volatile} == {
        k: v for k, v in missing.headers.items() if k not in volatile
    }


def test_another_principals_execution_reads_exactly_as_missing(
    runtime: Runtime, app_client: TestClient
) -> None:
    b = key(runtime, app_client, "bot-2", Role.AGENT)
    path = f"/v1/executions/{EXECUTION}/evidence"
    missing = b.call("GET", path)
    assert missing.status == 404
    missing_named = b.call("GET", path + "?principal=bot-1")
    _two_owners_a = key(runtime, app_client, "bot-1", Role.AGENT)
    assert _two_owners_a.submit(CREDIT).status == 200
    _same_answer(b.call("GET", path), missing)
    _same_answer(b.call("GET", path + "?principal=bot-1"), missing_named)
    # With an execution of its own under that id, naming bot-1 still reads as missing.
    other = load(CREDIT)
    other["action_request_id"] = RID_B
    assert b.submit(other).status == 200
    assert _rids(b.call("GET", path).data) == {RID_B}
    _same_answer(b.call("GET", path + "?principal=bot-1"), missing_named)


def test_verify_catches_an_edited_record_on_an_owned_chain(
    runtime: Runtime, app_client: TestClient, tmp_path: Path
) -> None:
    _two_owners(runtime, app_client)
    with runtime.store.engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE kla_records SET record = replace(record, '13000.00', '1.00') "
            f"WHERE record_id = '{RID_B}'"
        )
    out = runner.invoke(cli_app, ["verify", "--data-dir", str(runtime.settings.data_dir), "--json"])
    assert out.exit_code == 1, out.output
    failure = json.loads(out.stdout)["failure"]
    assert failure["reason"] == "state_mismatch"
    assert failure["message"].startswith(f"kla_records row {RID_B}: digest of record is ")
    # Tampering is named before the ambiguity: the export without --principal says so.
    out = _export(runtime, tmp_path / "ev")
    assert out.exit_code == 1 and RID_B in out.stderr, out.output
    out = _export(runtime, tmp_path / "ev", "--principal", "bot-2")
    assert out.exit_code == 1 and RID_B in out.stderr, out.output
    out = _export(runtime, tmp_path / "ev", "--principal", "bot-1")
    assert out.exit_code == 0, out.output


def test_each_principal_keeps_to_its_chain_on_both_backends(
    make_backend_runtime: Callable[..., Runtime],
) -> None:
    """SQLite and PostgreSQL (where the chain is chosen by a read sent with BEGIN): later
    requests of each principal go on the chain its first ones went on."""
    rt = make_backend_runtime()
    with TestClient(create_app(rt)) as client:
        a, b, fay, head_a = _two_owners(rt, client)
        plain, owned = execution_session_id(EXECUTION), owned_session_id("bot-2", EXECUTION)
        head_b = _head(rt, owned)
        assert head_b is not None and _head(rt, plain) == head_a
        again = load(CREDIT)
        again["action_request_id"] = "req_bot2_0002"
        assert b.submit(again).status == 200
        assert _head(rt, plain) == head_a and _head(rt, owned) != head_b
        head_b = _head(rt, owned)
        again["action_request_id"] = "req_bot1_0002"
        assert a.submit(again).status == 200
        assert _head(rt, owned) == head_b and _head(rt, plain) != head_a
        path = f"/v1/executions/{EXECUTION}/evidence"
        assert _rids(a.call("GET", path).data) == {RID_A, "req_bot1_0002"}
        assert _rids(b.call("GET", path).data) == {RID_B, "req_bot2_0002"}
        assert fay.call("GET", path).status == 400
        named = fay.call("GET", path + "?principal=bot-2")
        assert named.status == 200 and named.data["manifest"]["chain_head"] == _head(rt, owned)


def test_a_plain_chain_with_two_principals_exports_each_ones_own(
    runtime: Runtime, app_client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An execution chained before decision 930 (or two first requests racing on
    PostgreSQL) holds both principals' records on the plain chain: each one's later
    records stay there, and each export and `warden verify` take only its own entries."""
    from warden.kla import evidence

    a = key(runtime, app_client, "bot-1", Role.AGENT)
    b = key(runtime, app_client, "bot-2", Role.AGENT)
    assert a.submit(CREDIT).status == 200
    other = load(CREDIT)
    other["action_request_id"] = RID_B
    with monkeypatch.context() as m:  # as the code before 930 chained it
        m.setattr(
            evidence.Placing,
            "placement",
            lambda self, tx: evidence.Placement(self.principal, self.execution_id),
        )
        assert b.submit(other).status == 200
    other["action_request_id"] = "req_bot2_0002"
    assert b.submit(other).status == 200
    assert _head(runtime, owned_session_id("bot-2", EXECUTION)) is None  # still the plain chain
    path = f"/v1/executions/{EXECUTION}/evidence"
    mine, theirs = a.call("GET", path), b.call("GET", path)
    assert mine.status == 200 and _rids(mine.data) == {RID_A}, mine.body
    assert theirs.status == 200 and _rids(theirs.data) == {RID_B, "req_bot2_0002"}
    plain = _head(runtime, execution_session_id(EXECUTION))
    assert mine.data["manifest"]["chain_head"] == theirs.data["manifest"]["chain_head"] == plain
    out = runner.invoke(cli_app, ["verify", "--data-dir", str(runtime.settings.data_dir), "--json"])
    assert out.exit_code == 0, out.output
    out = _export(runtime, tmp_path / "a", "--principal", "bot-1")
    assert out.exit_code == 0 and json.loads(out.stdout)["records"] == 2, out.output
