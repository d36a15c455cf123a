"""Evidence bundles of one execution: over REST and offline (``warden export-evidence``),
each checked with ``verify_bundle`` against the keys Warden publishes; a tampered one
fails; ``warden verify`` still verifies the whole database, the KLA chains included.
The last test runs the whole flow against a real ``warden serve`` over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import asset, ensure_agent, start_server
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient
from kla_wire_helpers import (
    BASIC,
    CREDIT,
    Caller,
    assert_error,
    key,
    load,
    record_digest,
    write_evidence,
)
from typer.testing import CliRunner

from warden.cli import app as cli_app
from warden.identity.api_keys import Role
from warden.kla import KeyRegistry, sign_digest, verify_bundle
from warden.kla.evidence import execution_session_id
from warden.kla.verify import VerifyStatus
from warden.runtime import Runtime

EXECUTION = "exec_credit_review_demo_0001"
TOOL = {"name": "credit.dispose", "params_digest": "sha256:" + "ab" * 32}
DONE = {"tool_call": TOOL, "outcome": {"status": "succeeded"}}
VECTORS = json.loads(asset("kla/rfc8032_vectors.json").read_text())
KEY1 = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(VECTORS["test1"]["secret_key"]))
runner = CliRunner()


@pytest.fixture
def runtime(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime(kla_keys=asset("kla/jwks_two_keys.json"))


def run_flow(rt: Runtime, client: TestClient) -> tuple[Caller, Caller]:
    """Both examples in one execution: the read (signed by the agent) allowed and done,
    the credit disposition approved by finance and done; plus one held record."""
    agent = key(rt, client, "bot-1", Role.AGENT)
    fay = key(rt, client, "fay", Role.APPROVER, "finance")
    digest = record_digest(load(BASIC))
    signed = agent.submit(BASIC, signature=sign_digest(KEY1, digest), kid="rfc8032-test1")
    assert signed.status == 200
    assert agent.outcome("req_action_demo_0001", DONE).status == 200
    tid = agent.submit(CREDIT).data["task"]["id"]
    assert fay.call("POST", f"/v1/approvals/{tid}/approve", {"reason": "ok"}).status == 200
    assert agent.outcome("req_action_demo_0002", DONE).status == 200
    held = load(CREDIT) | {"schema_version": "1.1.0", "action_request_id": "req_future"}
    assert agent.submit(held).status == 422
    return agent, fay


def published_keys(caller: Caller, where: Path) -> KeyRegistry:
    path = where / "warden-keys.json"
    path.write_text(json.dumps(caller.call("GET", "/v1/keys").data))
    return KeyRegistry.load(path)


def trusted(caller: Caller, where: Path) -> KeyRegistry:
    """What a verifier holds: Warden's published keys and the agent's registry."""
    warden = published_keys(caller, where)
    agents = KeyRegistry.load(asset("kla/jwks_two_keys.json"))
    return KeyRegistry(
        {
            **{k: warden.get_key(k) for k in warden},
            **{k: agents.get_key(k) for k in agents},
        }
    )


def test_the_rest_export_verifies_offline_and_a_tampered_one_fails(
    runtime: Runtime, app_client: TestClient, tmp_path: Path
) -> None:
    agent, fay = run_flow(runtime, app_client)
    r = agent.call("GET", f"/v1/executions/{EXECUTION}/evidence")
    assert r.status == 200, r.body
    data = r.data
    assert [line["kind"] for line in data["records"]] == [
        "action_request",
        "policy_decision",
        "audit_event",
        "action_request",
        "policy_decision",
        "approval_event",
        "audit_event",
    ]
    assert data["held_for_review"] == ["req_future"]
    assert data["manifest"]["execution_id"] == EXECUTION
    head = runtime.store.load_session(execution_session_id(EXECUTION), fresh=True)
    assert head is not None and data["manifest"]["chain_head"] == head.head_hash
    # The agent's public key is in the bundle beside Warden's.
    assert {k["kid"] for k in data["keys"]["keys"]} == {
        agent.call("GET", "/v1/keys").data["keys"][0]["kid"],
        "rfc8032-test1",
    }
    bundle = write_evidence(data, tmp_path / "bundle")
    outcome = verify_bundle(bundle, trusted_keys=trusted(agent, tmp_path))
    assert outcome.ok, outcome.problems
    # Warden's 5 records, the agent-signed request and the manifest (the credit request
    # was sent unsigned).
    assert outcome.manifest_signed and outcome.signatures_checked == 7
    # With the bundle's own keys too, and through the CLI.
    assert verify_bundle(bundle).ok
    result = runner.invoke(cli_app, ["verify-bundle", str(bundle)])
    assert result.exit_code == 0, result.output
    # An approver sees the same execution.
    assert fay.call("GET", f"/v1/executions/{EXECUTION}/evidence").status == 200
    # Tampering: one changed character in a record is a hash mismatch.
    lines = (bundle / "records.jsonl").read_text().splitlines()
    lines[3] = lines[3].replace("approve_credit_disposition", "approve_credit_dispositioN")
    (bundle / "records.jsonl").write_text("\n".join(lines) + "\n")
    bad = verify_bundle(bundle, trusted_keys=trusted(agent, tmp_path))
    assert bad.status is VerifyStatus.RECORD_HASH_MISMATCH
    result = runner.invoke(cli_app, ["verify-bundle", str(bundle)])
    assert result.exit_code == 4


def test_evidence_scoping_and_absence(runtime: Runtime, app_client: TestClient) -> None:
    agent, _ = run_flow(runtime, app_client)
    other = key(runtime, app_client, "bot-2", Role.AGENT)
    path = f"/v1/executions/{EXECUTION}/evidence"
    assert_error(other.call("GET", path), "record:not_found", 404, resolution="retry")
    assert_error(
        agent.call("GET", "/v1/executions/nope/evidence"), "record:not_found", 404,
        resolution="retry",
    )  # fmt: skip


def test_export_evidence_offline_and_warden_verify_the_database(
    runtime: Runtime, app_client: TestClient, tmp_path: Path
) -> None:
    agent, _ = run_flow(runtime, app_client)
    data_dir = runtime.settings.data_dir
    out = tmp_path / "offline"
    result = runner.invoke(
        cli_app,
        [
            "export-evidence", EXECUTION, "--out", str(out), "--data-dir", str(data_dir),
            "--kla-keys", str(asset("kla/jwks_two_keys.json")),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "7 records" in result.output and "req_future" in result.output
    outcome = verify_bundle(out, trusted_keys=trusted(agent, tmp_path))
    assert outcome.ok, outcome.problems
    assert outcome.chain_head is not None
    again = runner.invoke(
        cli_app, ["export-evidence", EXECUTION, "--out", str(out), "--data-dir", str(data_dir)]
    )
    assert again.exit_code == 2 and "already holds" in again.output
    missing = runner.invoke(
        cli_app,
        ["export-evidence", "nope", "--out", str(tmp_path / "x"), "--data-dir", str(data_dir)],
    )
    assert missing.exit_code == 1
    # --json: one summary document; nothing on stdout when there is nothing to write.
    as_json = runner.invoke(
        cli_app,
        ["export-evidence", EXECUTION, "--out", str(tmp_path / "j"), "--data-dir",
         str(data_dir), "--json"],
    )  # fmt: skip
    assert as_json.exit_code == 0, as_json.output
    doc = json.loads(as_json.stdout)
    assert doc == {
        "out": str(tmp_path / "j"), "execution_id": EXECUTION, "records": 7,
        "chain_head": outcome.chain_head, "kid": doc["kid"], "held_for_review": ["req_future"],
    }  # fmt: skip
    assert doc["kid"] and verify_bundle(tmp_path / "j", trusted_keys=trusted(agent, tmp_path)).ok
    missing = runner.invoke(
        cli_app,
        ["export-evidence", "nope", "--out", str(tmp_path / "y"), "--data-dir", str(data_dir),
         "--json"],
    )  # fmt: skip
    assert missing.exit_code == 1 and missing.stdout == ""
    # An --out it cannot write (a file where the directory goes): before, a traceback.
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    for extra in ([], ["--json"]):
        refused = runner.invoke(
            cli_app,
            ["export-evidence", EXECUTION, "--out", str(blocked / "b"), "--data-dir",
             str(data_dir), *extra],
        )  # fmt: skip
        assert refused.exit_code == 2, refused.output
        assert refused.exception is None or isinstance(refused.exception, SystemExit)
        assert refused.stdout == ""
        assert f"error: cannot write {blocked / 'b'}: Not a directory" in " ".join(
            refused.stderr.split()
        )
    # verify-record is registered on warden's CLI too.
    one = runner.invoke(cli_app, ["verify-record", str(BASIC)])
    assert one.exit_code == 0 and record_digest(load(BASIC)) in one.output
    # The whole database, the KLA execution chain (its held entry too) included.
    checked = runner.invoke(cli_app, ["verify", "--data-dir", str(data_dir), "--json"])
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["ok"] is True


def test_export_evidence_of_an_unknown_execution_is_an_error_line(
    runtime: Runtime, tmp_path: Path
) -> None:
    """It starts with ``error:`` as every other command's errors do; exit 1 (nothing found)."""
    data_dir = runtime.settings.data_dir
    for extra in ([], ["--json"]):
        missing = runner.invoke(
            cli_app,
            ["export-evidence", "nope", "--out", str(tmp_path / "x"), "--data-dir",
             str(data_dir), *extra],
        )  # fmt: skip
        assert missing.exit_code == 1 and missing.stdout == ""
        assert " ".join(missing.stderr.split()) == (
            "error: no processed action request in execution nope"
        )
        assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("blank", ["", "   "])
def test_export_evidence_of_a_blank_execution_id_is_bad_input(
    runtime: Runtime, tmp_path: Path, blank: str
) -> None:
    """No execution has a blank id: exit 2 with one line naming it (as `warden export
    --session ''`), not "no processed action request in execution " (exit 1)."""
    done = runner.invoke(
        cli_app,
        ["export-evidence", blank, "--out", str(tmp_path / "x"), "--data-dir",
         str(runtime.settings.data_dir)],
    )  # fmt: skip
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr.strip() == f"error: the execution_id is empty ({blank!r})"
    assert not (tmp_path / "x").exists()


def test_the_flow_over_real_http(tmp_path: Path) -> None:
    data = tmp_path / "srv"
    srv = start_server(data)
    try:

        def make_key(principal: str, role: str, *groups: str) -> str:
            ensure_agent(data, principal, role)
            args = [sys.executable, "-m", "warden", "keys", "create", "--principal", principal]
            args += ["--role", role, "--json", "--data-dir", str(data)]
            for g in groups:
                args += ["--group", g]
            proc = subprocess.run(args, capture_output=True, text=True, check=True, cwd=data)
            token: Any = json.loads(proc.stdout)["token"]
            return str(token)

        with httpx.Client(base_url=srv.url, timeout=60) as http:
            agent = Caller(http, make_key("bot-1", "agent"))
            fay = Caller(http, make_key("fay", "approver", "finance"))
            first = agent.submit(CREDIT)
            assert first.status == 200 and first.data["decision"]["decision"] == "require_approval"
            tid = first.data["task"]["id"]
            assert_error(
                agent.call("POST", f"/v1/approvals/{tid}/approve", {}), "auth:forbidden", 403,
                resolution="authenticate",
            )  # fmt: skip
            assert fay.call("POST", f"/v1/approvals/{tid}/approve", {"reason": "ok"}).status == 200
            assert agent.outcome("req_action_demo_0002", DONE).status == 200
            evidence = agent.call("GET", f"/v1/executions/{EXECUTION}/evidence").data
            bundle = write_evidence(evidence, tmp_path / "bundle")
            outcome = verify_bundle(bundle, trusted_keys=published_keys(agent, tmp_path))
            assert outcome.ok, outcome.problems
    finally:
        srv.stop()
    proc = subprocess.run(
        [sys.executable, "-m", "warden", "export-evidence", EXECUTION, "--out",
         str(tmp_path / "offline"), "--data-dir", str(data)],
        capture_output=True, text=True, cwd=data,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "warden", "verify-bundle", str(tmp_path / "offline")],
        capture_output=True, text=True, cwd=data,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "warden", "verify", "--data-dir", str(data)],
        capture_output=True, text=True, cwd=data,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_records_the_chain_does_not_vouch_for_are_never_exported(
    runtime: Runtime, app_client: TestClient, tmp_path: Path
) -> None:
    agent, _ = run_flow(runtime, app_client)
    # Someone with database access deletes the approval and audit events.
    with runtime.store.engine.begin() as conn:
        conn.exec_driver_sql(
            "DELETE FROM kla_records WHERE kind IN ('approval_event', 'audit_event')"
        )
    refused = agent.call("GET", f"/v1/executions/{EXECUTION}/evidence")
    assert refused.status == 500 and refused.body["blockedBy"] == "evidence:integrity_failed"
    assert "audit chain" in refused.body["message"]
    offline = runner.invoke(
        cli_app,
        [
            "export-evidence", EXECUTION, "--out", str(tmp_path / "x"),
            "--data-dir", str(runtime.settings.data_dir),
        ],
    )  # fmt: skip
    assert offline.exit_code == 1, offline.output
    assert not (tmp_path / "x").exists()
