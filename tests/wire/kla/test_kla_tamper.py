"""A KLA record edited in the database (issue 16 fresh-user review, decisions 910-912):
``warden verify`` names it, ``warden export-evidence`` and the REST export refuse to
sign it, and the record routes refuse to serve it, whether or not the ``digest`` column
was edited with it. Each check here passed the edited record before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_sql, verify_json
from fastapi.testclient import TestClient
from kla_wire_helpers import BASIC, CREDIT, Caller, key
from typer.testing import CliRunner

from warden.cli import app as cli_app
from warden.identity.api_keys import Role
from warden.runtime import Runtime

EXECUTION = "exec_credit_review_demo_0001"
RID = "req_action_demo_0002"
runner = CliRunner()


@pytest.fixture
def submitted(runtime: Runtime, app_client: TestClient) -> tuple[Caller, str]:
    """The credit disposition submitted by an agent: require_approval. Returns the agent
    and the policy decision's id."""
    agent = key(runtime, app_client, "bot-1", Role.AGENT)
    r = agent.submit(CREDIT)
    assert r.status == 200 and r.data["decision"]["decision"] == "require_approval", r.body
    return agent, str(r.data["decision"]["policy_decision_id"])


def _export(rt: Runtime, where: Path) -> Any:
    return runner.invoke(
        cli_app,
        ["export-evidence", EXECUTION, "--out", str(where), "--json",
         "--data-dir", str(rt.settings.data_dir)],
    )  # fmt: skip


def _allow_instead(rt: Runtime, *, digest_too: bool) -> None:
    """The decision edited from require_approval to allow (and its digest column set to
    the edited record's digest when ``digest_too``)."""
    run_sql(
        rt,
        "UPDATE kla_records SET record = replace(record, 'require_approval', 'allow') "
        "WHERE kind = 'policy_decision'",
    )
    if digest_too:
        with rt.store.transaction() as tx:
            (row,) = [r for r in tx.kla.for_request(RID) if r.kind == "policy_decision"]
        forged = row.recomputed_digest()
        run_sql(rt, f"UPDATE kla_records SET digest = '{forged}' WHERE kind = 'policy_decision'")


def _outcome_is_refused(agent: Caller) -> None:
    """The credit disposition's outcome fails closed: nothing is decided on a changed record."""
    done = {
        "tool_call": {"name": "credit.dispose", "params_digest": "sha256:" + "ab" * 32},
        "outcome": {"status": "succeeded"},
    }
    r = agent.outcome(RID, done)
    assert r.status == 500 and r.body["blockedBy"] == "evidence:integrity_failed", r.body


def test_the_untouched_records_verify_and_export(
    runtime: Runtime, submitted: tuple[Caller, str], tmp_path: Path
) -> None:
    code, doc = verify_json(runtime)
    assert code == 0 and doc["ok"], doc
    assert doc["log"]["state_rows"]["kla_records"] == 2
    out = _export(runtime, tmp_path / "ev")
    assert out.exit_code == 0, out.output
    agent, pd = submitted
    assert agent.call("GET", f"/v1/kla-records/{pd}").status == 200


@pytest.mark.parametrize("digest_too", [False, True], ids=["record", "record_and_digest"])
def test_an_edited_decision_is_caught_everywhere(
    runtime: Runtime, submitted: tuple[Caller, str], tmp_path: Path, digest_too: bool
) -> None:
    agent, pd = submitted
    _allow_instead(runtime, digest_too=digest_too)
    # warden verify names the row (it said OK before)
    code, doc = verify_json(runtime)
    assert code == 1 and not doc["ok"], doc
    failure = doc["failure"]
    assert failure["reason"] == "state_mismatch"
    assert failure["message"].startswith(f"kla_records row {pd}: digest of record is ")
    assert [r["row"] for r in failure["rows"]] == [pd]
    # the offline export refuses (it signed a manifest before) and writes nothing
    out = _export(runtime, tmp_path / "ev")
    assert out.exit_code == 1, out.output
    assert out.stdout == ""
    assert pd in out.stderr and "warden verify" in out.stderr
    assert not (tmp_path / "ev").exists()
    # the REST export refuses too
    r = agent.call("GET", f"/v1/executions/{EXECUTION}/evidence")
    assert r.status == 500 and r.body["blockedBy"] == "evidence:integrity_failed", r.body
    if digest_too:
        return  # the row is self-consistent: only the chain tells (verify, the exports)
    # the record is not served with its old digest, nor its trail, nor decided on
    for path in (f"/v1/kla-records/{pd}", f"/v1/action-requests/{RID}"):
        r = agent.call("GET", path)
        assert r.status == 500 and r.body["blockedBy"] == "evidence:integrity_failed", r.body
        assert "does not hash to its stored digest" in r.body["message"]
    _outcome_is_refused(agent)


@pytest.mark.parametrize(
    ("column", "value"),
    [("status", "held_for_review"), ("principal", "someone-else"), ("kind", "audit_event")],
)
def test_an_edited_column_is_caught_by_verify_and_the_export(
    runtime: Runtime, submitted: tuple[Caller, str], tmp_path: Path, column: str, value: str
) -> None:
    _, pd = submitted
    run_sql(runtime, f"UPDATE kla_records SET {column} = '{value}' WHERE record_id = '{pd}'")
    code, doc = verify_json(runtime)
    assert code == 1 and doc["failure"]["reason"] == "state_mismatch", doc
    assert doc["failure"]["message"].startswith(f"kla_records row {pd}: {column} is ")
    out = _export(runtime, tmp_path / "ev")
    assert out.exit_code == 1 and not (tmp_path / "ev").exists(), out.output


def test_a_deleted_record_is_caught_by_verify(
    runtime: Runtime, submitted: tuple[Caller, str]
) -> None:
    _, pd = submitted
    run_sql(runtime, f"DELETE FROM kla_records WHERE record_id = '{pd}'")
    code, doc = verify_json(runtime)
    assert code == 1 and doc["failure"]["reason"] == "state_mismatch", doc
    assert doc["failure"]["message"].startswith(f"kla_records row {pd}: is gone")


def test_a_decision_filed_under_another_request_is_caught_everywhere(
    runtime: Runtime, submitted: tuple[Caller, str], tmp_path: Path
) -> None:
    """The second fresh-user review's bypass: the records and digests untouched, only the
    ``action_request_id`` column swapped, so the credit disposition's lookup found the
    basic read's ``allow`` and its outcome was accepted without approval (decision 916)."""
    agent, pd = submitted
    r = agent.submit(BASIC)
    assert r.status == 200 and r.data["decision"]["decision"] == "allow", r.body
    allow = str(r.data["decision"]["policy_decision_id"])
    other = str(json.loads(BASIC.read_text())["action_request_id"])
    run_sql(
        runtime, f"UPDATE kla_records SET action_request_id = 'req_gone' WHERE record_id = '{pd}'"
    )
    run_sql(
        runtime, f"UPDATE kla_records SET action_request_id = '{RID}' WHERE record_id = '{allow}'"
    )
    assert other != RID
    code, doc = verify_json(runtime)
    assert code == 1 and doc["failure"]["reason"] == "state_mismatch", doc
    assert {r["row"] for r in doc["failure"]["rows"]} == {pd, allow}
    assert "action_request_id is " in doc["failure"]["message"]
    out = _export(runtime, tmp_path / "ev")
    assert out.exit_code == 1 and not (tmp_path / "ev").exists(), out.output
    r = agent.call("GET", f"/v1/action-requests/{RID}")
    assert r.status == 500 and r.body["blockedBy"] == "evidence:integrity_failed", r.body
    assert "is filed under action request" in r.body["message"]
    _outcome_is_refused(agent)
