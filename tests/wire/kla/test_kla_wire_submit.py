"""POST /v1/action-requests: validate, digest, check a signature, decide, store, chain.

Every answer is checked against the seed ``003_…`` envelope (kla_wire_helpers.Caller).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import asset
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient
from kla_wire_helpers import (
    BASIC,
    CREDIT,
    Caller,
    assert_error,
    db_rows,
    key,
    load,
    record_digest,
)

from warden.crypto.canonical import canonical_bytes
from warden.identity.api_keys import Role
from warden.kla import sign_digest, verify_record_value, verify_signature
from warden.kla.evidence import execution_session_id
from warden.kla.keys import KeyRegistry
from warden.runtime import Runtime
from warden.server.app import create_app

VECTORS = json.loads(asset("kla/rfc8032_vectors.json").read_text())
KEY1 = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(VECTORS["test1"]["secret_key"]))
KEY2 = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(VECTORS["test2"]["secret_key"]))
EXECUTION = "exec_credit_review_demo_0001"


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    """Every test here runs on SQLite and on PostgreSQL."""
    return make_backend_runtime


@pytest.fixture
def runtime(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime(kla_keys=asset("kla/jwks_two_keys.json"))


@pytest.fixture
def agent(runtime: Runtime, app_client: TestClient) -> Caller:
    return key(runtime, app_client, "bot-1", Role.AGENT)


def rows(rt: Runtime) -> list[Any]:
    return db_rows(rt, "SELECT record_id, kind, status, principal FROM kla_records")


def chain_types(rt: Runtime, execution: str = EXECUTION) -> list[str]:
    sid = execution_session_id(execution)
    return [
        r[0]
        for r in db_rows(
            rt, f"SELECT step_type FROM entries WHERE session_id = '{sid}' ORDER BY seq"
        )
    ]


def test_the_seed_example_is_allowed_and_stored_with_its_digest(
    runtime: Runtime, agent: Caller
) -> None:
    r = agent.submit(BASIC)
    assert r.status == 200, r.body
    record = load(BASIC)
    digest = record_digest(record)
    assert digest == "sha256:14942f584b73733068adc207e1916abdb39523a4607574d4ba31c9ade7e0ff01"
    assert r.data["action_request"] == {
        "id": "req_action_demo_0001",
        "digest": digest,
        "status": "processed",
    }
    decision = r.data["decision"]
    assert decision["decision"] == "allow"
    assert decision["action_request_digest"] == digest
    assert decision["correlation"] == record["correlation"]
    assert [x["rule_id"] for x in decision["rules"]] == ["kla-actions"]
    assert decision["policy"]["bundle_id"] == "warden-default"
    assert decision["policy"]["version"] == "1.4.1"
    assert "task" not in r.data and "task_id" not in decision
    # The decision validates, and Warden's signature verifies with the published key.
    assert verify_record_value(decision, expected_digest=r.data["decision_digest"]).ok
    jwks = agent.call("GET", "/v1/keys")
    # The Ed25519 key that signed, then the ML-DSA-65 key (issue 21) beside it.
    assert jwks.status == 200 and [k["kty"] for k in jwks.data["keys"]] == ["OKP", "AKP"]
    assert jwks.data["keys"][0]["kid"] == r.data["kid"]
    registry = KeyRegistry.load(_jwks_file(jwks.data, runtime))
    assert verify_signature(
        registry.get_key(r.data["kid"]), r.data["decision_digest"], r.data["decision_signature"]
    )
    # Stored: the request as received (canonical text) with its digest, and the decision.
    stored = db_rows(
        runtime, "SELECT record_id, kind, digest, record, status, execution_id FROM kla_records"
    )
    by_kind = {s[1]: s for s in stored}
    assert by_kind["action_request"][:3] == ("req_action_demo_0001", "action_request", digest)
    assert by_kind["action_request"][3] == canonical_bytes(record).decode()
    assert by_kind["action_request"][4:] == ("processed", EXECUTION)
    assert by_kind["policy_decision"][2] == r.data["decision_digest"]
    # Both chained on the execution's Warden chain, in one transaction.
    assert chain_types(runtime) == ["warden/kla.action_request", "warden/kla.policy_decision"]
    shown = agent.show("req_action_demo_0001")
    assert shown.status == 200 and shown.data["status"] == "allowed"
    assert shown.data["action_request"]["record"] == record


def _jwks_file(jwks: dict[str, Any], rt: Runtime) -> Path:
    path = rt.settings.data_dir / "published.json"
    path.write_text(json.dumps(jwks))
    return path


def test_the_financial_example_needs_approval_and_files_a_task(
    runtime: Runtime, agent: Caller
) -> None:
    r = agent.submit(CREDIT)
    assert r.status == 200, r.body
    decision = r.data["decision"]
    assert decision["decision"] == "require_approval"
    assert decision["reasons"] == ["large_amount_requires_approval"]
    task = r.data["task"]
    assert decision["task_id"] == task["id"] and task["state"] == "pending"
    assert task["url"].endswith(f"/desk/tasks/{task['id']}")
    filed = runtime.desk.get(task["id"])
    assert filed is not None and filed.kind.value == "action_request"
    assert filed.approver_group == "finance" and filed.scope == f"kla:{EXECUTION}"
    # The makers: the agent and its registered owner (issue 15).
    assert filed.requester.names() == {"bot-1", "bot-1.owner"}
    assert filed.detail["amount"] == "12500.00" and filed.detail["currency"] == "EUR"
    assert filed.action["arguments"]["action_request_digest"] == r.data["action_request"]["digest"]
    # The agent polls its own task on the spend wire's task route too.
    polled = agent.call("GET", f"/v1/tasks/{task['id']}")
    assert polled.status == 200 and polled.data["task"]["kind"] == "action_request"
    assert agent.show("req_action_demo_0002").data["status"] == "awaiting_approval"


def test_a_production_delete_is_blocked_but_processed(runtime: Runtime, agent: Caller) -> None:
    record = load(BASIC) | {
        "action_request_id": "req_delete_1",
        "action": "delete_case",
        "environment": "production",
    }
    r = agent.submit(record)
    assert r.status == 200, r.body
    assert r.data["decision"]["decision"] == "block"
    assert r.data["decision"]["reasons"] == ["production_delete_blocked"]
    assert any("Do not carry out" in step for step in r.body["nextActions"])
    # The same action in staging is allowed.
    staging = agent.submit(record | {"action_request_id": "req_delete_2", "environment": "staging"})
    assert staging.data["decision"]["decision"] == "allow"
    assert agent.show("req_delete_1").data["status"] == "blocked"


@pytest.mark.parametrize(
    ("name", "pointer"),
    [
        ("request_trace_id_all_zero.json", "/correlation/trace_id"),
        ("request_currency_lowercase.json", "/amount/currency"),
        ("request_amount_float.json", "/amount/value"),
        ("request_missing_purpose.json", "/"),
        ("request_requested_at_not_rfc3339.json", "/requested_at"),
    ],
)
def test_schema_invalid_requests_are_refused_and_nothing_is_stored(
    runtime: Runtime, agent: Caller, name: str, pointer: str
) -> None:
    r = agent.submit(asset(f"kla/{name}"))
    body = assert_error(r, "record:schema_invalid", 400, resolution="retry")
    assert f"at {pointer}" in body["message"] and "nothing was stored" in body["message"]
    assert body["resolution"]["note"] == f"pointer {pointer}"
    assert rows(runtime) == [] and chain_types(runtime) == []


@pytest.mark.parametrize(
    ("content", "gate"),
    [
        (asset("kla/request_duplicate_key.json").read_bytes(), "input:invalid_json"),
        (b"[1, 2]", "record:schema_invalid"),
        (b'{"schema_version": 1}', "record:schema_invalid"),
        (b"", "record:schema_invalid"),
        (b"{nope", "input:invalid_json"),
    ],
)
def test_malformed_bodies_are_refused(
    runtime: Runtime, agent: Caller, content: bytes, gate: str
) -> None:
    assert_error(agent.submit(content), gate, 400, resolution="retry")
    assert rows(runtime) == []


@pytest.mark.parametrize("number", [b"1e400", b"-1e400", b"2e308"])
def test_a_number_beyond_ieee_754_is_named_as_such_not_as_null(
    runtime: Runtime, agent: Caller, number: bytes
) -> None:
    """1e400 parses as infinity, which a schema message rendered as ``null``; it is
    refused as outside RFC 8785 before the schema sees it (a fresh user's finding)."""
    text = BASIC.read_bytes()
    record = load(BASIC)
    assert isinstance(record.get("purpose"), str)
    needle = b'"purpose":'
    start = text.index(needle) + len(needle)
    rest = text[start:].lstrip()
    end = start + (len(text[start:]) - len(rest)) + rest.index(b'"', 1) + 1
    body = assert_error(
        agent.submit(text[:start] + number + text[end:]),
        "input:invalid_json",
        400,
        resolution="retry",
    )
    assert "RFC 8785" in body["message"] and "null" not in body["message"]
    assert rows(runtime) == [] and chain_types(runtime) == []


def test_an_unknown_schema_version_is_held_for_review_and_not_decided(
    runtime: Runtime, agent: Caller
) -> None:
    held = asset("kla/request_schema_version_2.json")
    r = agent.submit(held)
    body = assert_error(r, "record:unsupported_schema_version", 422, resolution="retry")
    digest = record_digest(load(held))
    assert "stored for review as req_action_demo_0001" in body["message"]
    assert digest in body["message"] and "not processed" in body["message"]
    assert rows(runtime) == [("req_action_demo_0001", "action_request", "held_for_review", "bot-1")]
    assert chain_types(runtime) == ["warden/kla.held"]
    # The same record again: the same answer, nothing new stored.
    assert_error(agent.submit(held), "record:unsupported_schema_version", 422, resolution="retry")
    assert len(rows(runtime)) == 1 and chain_types(runtime) == ["warden/kla.held"]
    # Readable for review; no decision, no outcome, no evidence.
    shown = agent.show("req_action_demo_0001")
    assert shown.data["status"] == "held_for_review" and "decision" not in shown.data
    assert shown.data["action_request"]["status"] == "held_for_review"
    assert_error(
        agent.outcome("req_action_demo_0001", {"outcome": {"status": "cancelled"}}),
        "record:not_authorized",
        409,
    )
    assert_error(
        agent.call("GET", f"/v1/executions/{EXECUTION}/evidence"), "record:not_found", 404,
        resolution="retry",
    )  # fmt: skip
    # Its id is taken: the v1 record with the same id is a conflict.
    assert_error(agent.submit(BASIC), "record:conflict", 409, resolution="retry")


def test_a_held_record_without_usable_ids_goes_to_the_review_chain(
    runtime: Runtime, agent: Caller
) -> None:
    r = agent.submit({"schema_version": "9.9.9", "note": 1.5})
    body = assert_error(r, "record:unsupported_schema_version", 422, resolution="retry")
    digest = record_digest({"schema_version": "9.9.9", "note": 1.5})
    rid = "held_" + digest[7:39]
    assert rid in body["message"]
    assert rows(runtime) == [(rid, "action_request", "held_for_review", "bot-1")]
    assert chain_types(runtime, "") == ["warden/kla.held"]


def test_duplicates_conflict_unless_identical_which_replays(
    runtime: Runtime, agent: Caller
) -> None:
    first = agent.submit(CREDIT)
    assert first.status == 200
    # Different formatting, same canonical bytes: a replay of the stored answer.
    again = agent.submit(json.dumps(load(CREDIT)).encode())
    assert again.status == 200 and again.body["replayed"] is True
    assert again.data == first.data
    assert len(rows(runtime)) == 2 and len(runtime.desk.list(states=())) == 1
    # Same id, different content: 409, nothing stored.
    changed = load(CREDIT)
    changed["amount"]["value"] = "12500.01"
    assert_error(agent.submit(changed), "record:conflict", 409, resolution="retry")
    # Another agent's request with that id is its own (decision 970): it is decided as a
    # fresh one (its own decision and task), neither refused nor a replay of the first.
    other = key(runtime, agent.client, "bot-2", Role.AGENT)
    theirs = other.submit(CREDIT)
    assert theirs.status == 200 and "replayed" not in theirs.body, theirs.body
    mine = first.data["decision"]["policy_decision_id"]
    assert theirs.data["decision"]["policy_decision_id"] != mine
    assert theirs.data["task"]["id"] != first.data["task"]["id"]
    assert sorted(r[3] for r in rows(runtime)) == ["bot-1", "bot-1", "bot-2", "bot-2"]


def test_another_agents_records_read_as_absent(runtime: Runtime, agent: Caller) -> None:
    r = agent.submit(BASIC)
    decision_id = r.data["decision"]["policy_decision_id"]
    other = key(runtime, agent.client, "bot-2", Role.AGENT)
    for path in (
        "/v1/action-requests/req_action_demo_0001",
        f"/v1/kla-records/{decision_id}",
        f"/v1/executions/{EXECUTION}/evidence",
    ):
        assert_error(other.call("GET", path), "record:not_found", 404, resolution="retry")
        assert agent.call("GET", path).status == 200
    assert_error(
        other.outcome("req_action_demo_0001", {"outcome": {"status": "cancelled"}}),
        "record:not_found",
        404,
        resolution="retry",
    )
    # Approvers and admins read everything.
    fay = key(runtime, agent.client, "fay", Role.APPROVER, "finance")
    one = fay.call("GET", f"/v1/kla-records/{decision_id}")
    assert one.status == 200 and one.data["record"]["kind"] == "policy_decision"
    assert one.data["record"]["record"] == r.data["decision"]
    # An approver cannot submit.
    assert_error(fay.submit(CREDIT), "auth:forbidden", 403, resolution="authenticate")
    assert_error(
        Caller(agent.client, "nope").submit(BASIC), "auth:required", 401, resolution="authenticate"
    )


# -- detached signatures ------------------------------------------------------------------


def test_a_valid_signature_is_accepted_and_kept(runtime: Runtime, agent: Caller) -> None:
    digest = record_digest(load(BASIC))
    r = agent.submit(BASIC, signature=sign_digest(KEY1, digest), kid="rfc8032-test1")
    assert r.status == 200, r.body
    stored = agent.call("GET", "/v1/kla-records/req_action_demo_0001").data["record"]
    assert stored["kid"] == "rfc8032-test1" and stored["signature"] == sign_digest(KEY1, digest)


def _flip(signature: str) -> str:
    first = "B" if signature[0] == "A" else "A"
    return first + signature[1:]


@pytest.mark.parametrize(
    ("make", "kid", "why"),
    [
        (lambda d: sign_digest(KEY2, d), "rfc8032-test1", "does not verify"),
        (lambda d: _flip(sign_digest(KEY1, d)), "rfc8032-test1", "does not verify"),
        (lambda d: sign_digest(KEY1, d), "rfc8032-test9", "not in Warden's key registry"),
        (lambda d: sign_digest(KEY1, d), None, "needs its X-Warden-Key-Id"),
        (lambda d: sign_digest(KEY1, d) + "=", "rfc8032-test1", "does not verify"),
        (lambda d: None, "rfc8032-test1", "without X-Warden-Signature"),
    ],
)
def test_a_bad_signature_is_refused_and_nothing_is_stored(
    runtime: Runtime,
    agent: Caller,
    make: Callable[[str], str | None],
    kid: str | None,
    why: str,
) -> None:
    signature = make(record_digest(load(BASIC)))
    r = agent.submit(BASIC, signature=signature, kid=kid)
    body = assert_error(r, "record:signature_invalid", 400, resolution="retry")
    assert why in body["message"], body
    assert rows(runtime) == []


@pytest.mark.parametrize("twice", ["X-Warden-Signature", "X-Warden-Key-Id"])
def test_a_repeated_signature_header_is_refused_and_nothing_is_stored(
    runtime: Runtime, agent: Caller, twice: str
) -> None:
    # Which of two would be checked is ambiguous, even when both say the same.
    signature = sign_digest(KEY1, record_digest(load(BASIC)))
    sent = {"X-Warden-Signature": signature, "X-Warden-Key-Id": "rfc8032-test1"}
    headers = [*sent.items(), (twice, sent[twice])]
    r = agent.call("POST", "/v1/action-requests", content=BASIC.read_bytes(), headers=headers)
    body = assert_error(r, "input:invalid", 400, resolution="retry")
    assert f"send one {twice} header" in body["message"], body
    assert rows(runtime) == [] and chain_types(runtime) == []
    assert agent.submit(BASIC, signature=signature, kid="rfc8032-test1").status == 200


def test_a_signature_without_a_key_registry_is_refused(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    with TestClient(create_app(rt)) as client:
        agent = key(rt, client, "bot-1", Role.AGENT)
        digest = record_digest(load(BASIC))
        r = agent.submit(BASIC, signature=sign_digest(KEY1, digest), kid="rfc8032-test1")
        body = assert_error(r, "record:signature_invalid", 400, resolution="retry")
        assert "--kla-keys" in body["message"]
        assert rows(rt) == []
        assert agent.submit(BASIC).status == 200  # unsigned is fine


def test_an_oversized_chunked_body_is_413_not_500(
    runtime: Runtime, app_client: TestClient, agent: Caller
) -> None:
    limit = runtime.settings.max_body_bytes

    def chunks() -> Iterator[bytes]:
        # No content-length: the cap must stop the read itself.
        yield b'{"purpose":"'
        for _ in range(limit // 65536 + 2):
            yield b"x" * 65536
        yield b'"}'

    r = app_client.post(
        "/v1/action-requests",
        content=chunks(),
        headers={"Authorization": f"Bearer {agent.token}", "content-type": "application/json"},
    )
    assert r.status_code == 413, r.text
    assert r.json()["blockedBy"] == "input:body_too_large"
    assert rows(runtime) == []


@pytest.mark.parametrize("media", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_not_sent_as_json_is_refused_and_nothing_is_stored(
    runtime: Runtime, agent: Caller, media: str | None
) -> None:
    """Decision 993: as the rest of /v1 refuses it, not read as JSON whatever it says."""
    headers = {"Authorization": f"Bearer {agent.token}"}
    if media is not None:
        headers["Content-Type"] = media
    r = agent.client.post("/v1/action-requests", content=BASIC.read_bytes(), headers=headers)
    assert r.status_code == 400, r.text
    body = r.json()
    shown = f"Content-Type {media}" if media else "no Content-Type"
    assert body["message"] == (
        f"the body must be sent as Content-Type: application/json, not {shown}; nothing was stored"
    )
    assert body["blockedBy"] == "input:invalid"
    assert rows(runtime) == [] and chain_types(runtime) == []
    for other in ("utf-16", '"UTF-16LE"', "latin-1", ""):
        r3 = agent.call(
            "POST",
            "/v1/action-requests",
            content=BASIC.read_bytes(),
            headers=[("Content-Type", f"application/json; charset={other}")],
        )
        assert r3.status == 400
        assert r3.body["message"] == (
            f"the body must be UTF-8 JSON, not charset {other.strip(chr(34)).lower() or '(empty)'}"
            "; nothing was stored"
        )
    assert rows(runtime) == [] and chain_types(runtime) == []
    charset = [("Content-Type", "Application/JSON; charset=utf-8")]
    r2 = agent.call("POST", "/v1/action-requests", content=BASIC.read_bytes(), headers=charset)
    assert r2.status == 200
