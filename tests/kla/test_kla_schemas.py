"""The KLA record schemas: shape, formats, versions, and the verifier's schema step."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, asset
from jsonschema import Draft202012Validator

from warden.core.types import Effect
from warden.errors import InvalidParams
from warden.kla import KlaDecision, RecordKind, VerifyStatus, kla_decision, seal, verify_record
from warden.kla.records import detect_kind, kla_schemas
from warden.kla.verify import verify_record_value

KLA = ROOT / "src" / "warden" / "schemas" / "kla"
EXAMPLES = KLA / "examples"
SCHEMA_FILES = sorted(p.name for p in KLA.glob("*.json"))


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _records() -> dict[RecordKind, dict[str, Any]]:
    return {
        RecordKind.ACTION_REQUEST: _load(EXAMPLES / "credit-disposition.json"),
        RecordKind.POLICY_DECISION: _load(asset("kla/decision_require_approval.json")),
        RecordKind.APPROVAL_EVENT: _load(asset("kla/approval_approve.json")),
        RecordKind.AUDIT_EVENT: _load(asset("kla/audit_succeeded.json")),
    }


def test_schema_set_loads_every_schema_and_no_example() -> None:
    schemas = kla_schemas()
    assert sorted(schemas.docs) == SCHEMA_FILES
    assert len(SCHEMA_FILES) == 6
    for name in SCHEMA_FILES:
        doc = schemas.docs[name]
        assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert doc["$id"] == f"https://warden.dev/schemas/kla/v1/{name}"
        Draft202012Validator.check_schema(doc)


def test_shared_defs_are_identical_in_every_schema() -> None:
    """Each schema is self-contained; the copies of the shared $defs must not drift."""
    docs = [_load(KLA / name) for name in SCHEMA_FILES if not name.startswith("evidence")]
    for key in ("id", "timestamp", "correlation", "digest"):
        copies = [d["$defs"][key] for d in docs if key in d["$defs"]]
        assert len(copies) >= 2 and all(c == copies[0] for c in copies), key


@pytest.mark.parametrize("name", ["basic-read.json", "credit-disposition.json"])
def test_examples_validate(name: str) -> None:
    raw = (EXAMPLES / name).read_bytes()
    outcome = verify_record(raw)
    assert outcome.status is VerifyStatus.OK, outcome
    assert outcome.kind is RecordKind.ACTION_REQUEST and outcome.schema_version == "1.0.0"
    # and with an independent validator (python-jsonschema; no date-time checker installed)
    assert not list(
        Draft202012Validator(_load(KLA / "action-request.json")).iter_errors(_load(EXAMPLES / name))
    )


def test_credit_example_carries_amount_and_trace_context() -> None:
    doc = _load(EXAMPLES / "credit-disposition.json")
    assert doc["amount"] == {"value": "12500.00", "currency": "EUR"}
    assert set(doc["correlation"]) == {
        "correlation_id",
        "execution_id",
        "trace_id",
        "span_id",
        "parent_event_id",
    }


@pytest.mark.parametrize("kind", list(RecordKind))
def test_every_kind_has_a_valid_record(kind: RecordKind) -> None:
    record = _records()[kind]
    assert detect_kind(record) is kind
    outcome = verify_record(json.dumps(record))
    assert outcome.status is VerifyStatus.OK, outcome
    assert outcome.kind is kind and outcome.record_id == record[kind.id_field]
    independent = Draft202012Validator(_load(KLA / kind.schema_path))
    assert not list(independent.iter_errors(record))


HOSTILE = [
    ("request_trace_id_all_zero.json", "/correlation/trace_id"),
    ("request_span_id_all_zero.json", "/correlation/span_id"),
    ("request_trace_id_uppercase.json", "/correlation/trace_id"),
    ("request_currency_lowercase.json", "/amount/currency"),
    ("request_amount_float.json", "/amount/value"),
    ("request_amount_leading_zero.json", "/amount/value"),
    ("request_amount_without_currency.json", "/amount"),
    ("request_missing_purpose.json", ""),
    ("request_requested_at_not_rfc3339.json", "/requested_at"),
    ("request_raw_prompt.json", ""),
]


@pytest.mark.parametrize(("name", "pointer"), HOSTILE)
def test_hostile_request_is_schema_invalid(name: str, pointer: str) -> None:
    outcome = verify_record(asset(f"kla/{name}").read_bytes())
    assert outcome.status is VerifyStatus.SCHEMA_INVALID, outcome
    assert outcome.pointer == pointer, outcome


def test_messages_name_the_problem() -> None:
    missing = verify_record(asset("kla/request_missing_purpose.json").read_bytes())
    assert "purpose" in missing.message
    date = verify_record(asset("kla/request_requested_at_not_rfc3339.json").read_bytes())
    assert "date-time" in date.message
    extra = verify_record(asset("kla/request_raw_prompt.json").read_bytes())
    assert "prompt" in extra.message


@pytest.mark.parametrize(
    "value",
    [
        "2026-07-21",  # a date, not a date-time
        "2026-07-21T09:14:29",  # no offset
        "2026-02-30T09:14:29Z",  # no such day
        "2026-07-21T25:14:29Z",
        "21/07/2026 09:14",
        "",
    ],
)
def test_requested_at_must_be_rfc3339(value: str) -> None:
    doc = _load(EXAMPLES / "basic-read.json")
    doc["requested_at"] = value
    outcome = verify_record_value(doc)
    assert outcome.status is VerifyStatus.SCHEMA_INVALID and outcome.pointer == "/requested_at"


@pytest.mark.parametrize("value", ["2026-07-21T09:14:29Z", "2026-07-21T11:14:29.5+02:00"])
def test_rfc3339_offsets_are_accepted(value: str) -> None:
    doc = _load(EXAMPLES / "basic-read.json")
    doc["requested_at"] = value
    assert verify_record_value(doc).ok


@pytest.mark.parametrize("value", ["0", "0.5", "12500", "12500.00", "99999999999999999999.0001"])
def test_decimal_strings_are_accepted(value: str) -> None:
    doc = _load(EXAMPLES / "credit-disposition.json")
    doc["amount"]["value"] = value
    assert verify_record_value(doc).ok


@pytest.mark.parametrize("value", ["-1", "1e3", "1.", ".5", "1,000", " 1", "NaN", "+1"])
def test_malformed_decimal_strings_are_refused(value: str) -> None:
    doc = _load(EXAMPLES / "credit-disposition.json")
    doc["amount"]["value"] = value
    outcome = verify_record_value(doc)
    assert outcome.status is VerifyStatus.SCHEMA_INVALID and outcome.pointer == "/amount/value"


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("action_request_id", ""),
        ("action_request_id", "x" * 257),
        ("action", 5),
        ("environment", ""),
        ("resource", {"type": "credit_case"}),
        ("resource", {"type": "credit_case", "id": "c", "contents": "raw"}),
        ("correlation", {"correlation_id": "c"}),
    ],
)
def test_field_constraints(member: str, value: Any) -> None:
    doc = _load(EXAMPLES / "basic-read.json")
    doc[member] = value
    assert verify_record_value(doc).status is VerifyStatus.SCHEMA_INVALID


def test_unknown_schema_version_is_reported_not_processed() -> None:
    outcome = verify_record(asset("kla/request_schema_version_2.json").read_bytes())
    assert outcome.status is VerifyStatus.UNSUPPORTED_SCHEMA_VERSION
    assert outcome.schema_version == "2.0.0"
    assert outcome.digest is not None and outcome.digest.startswith("sha256:")  # kept for review
    assert "not processed" in outcome.message
    # not processed: an otherwise invalid record with an unknown version is not schema-checked
    doc = _load(asset("kla/request_schema_version_2.json"))
    doc["unknown_v2_member"] = {"anything": 1}
    assert verify_record_value(doc).status is VerifyStatus.UNSUPPORTED_SCHEMA_VERSION


@pytest.mark.parametrize("version", [None, 1, "1.0", "1.0.0 ", "1.0.1"])
def test_schema_version_must_be_exactly_known(version: Any) -> None:
    doc = _load(EXAMPLES / "basic-read.json")
    if version is None:
        del doc["schema_version"]
    else:
        doc["schema_version"] = version
    outcome = verify_record_value(doc)
    expected = (
        VerifyStatus.UNSUPPORTED_SCHEMA_VERSION
        if isinstance(version, str)
        else VerifyStatus.SCHEMA_INVALID
    )
    assert outcome.status is expected


@pytest.mark.parametrize("value", [[], "text", 1, None])
def test_a_record_is_an_object(value: Any) -> None:
    assert verify_record(json.dumps(value)).status is VerifyStatus.SCHEMA_INVALID


def test_verification_never_modifies_the_record() -> None:
    for kind, record in _records().items():
        before = copy.deepcopy(record)
        verify_record_value(record, kind=kind)
        seal(kind, record)
        assert record == before


# --- the records that follow the request --------------------------------------------------


def _mutated(kind: RecordKind, change: Any) -> dict[str, Any]:
    record = _records()[kind]
    change(record)
    return record


def test_checker_must_not_be_the_maker() -> None:
    def same(r: dict[str, Any]) -> None:
        r["checker"]["principal"] = r["maker"]["principal"]

    outcome = verify_record_value(_mutated(RecordKind.APPROVAL_EVENT, same))
    assert outcome.status is VerifyStatus.SCHEMA_INVALID
    assert outcome.pointer == "/checker/principal"


def test_re_route_names_where_it_goes_and_only_then() -> None:
    def re_route(r: dict[str, Any]) -> None:
        r["outcome"] = "re_route"

    assert verify_record_value(_mutated(RecordKind.APPROVAL_EVENT, re_route)).status is (
        VerifyStatus.SCHEMA_INVALID
    )

    def routed(r: dict[str, Any]) -> None:
        r["outcome"] = "re_route"
        r["routed_to"] = "group:senior-credit-reviewers"

    assert verify_record_value(_mutated(RecordKind.APPROVAL_EVENT, routed)).ok

    def approve_routed(r: dict[str, Any]) -> None:
        r["routed_to"] = "group:senior-credit-reviewers"

    assert not verify_record_value(_mutated(RecordKind.APPROVAL_EVENT, approve_routed)).ok


@pytest.mark.parametrize("decision", ["allow", "warn", "require_approval", "block"])
def test_decision_vocabulary(decision: str) -> None:
    def set_decision(r: dict[str, Any]) -> None:
        r["decision"] = decision

    assert verify_record_value(_mutated(RecordKind.POLICY_DECISION, set_decision)).ok


@pytest.mark.parametrize("decision", ["deny", "ask", "ALLOW", "approved"])
def test_decision_outside_the_vocabulary_is_refused(decision: str) -> None:
    def set_decision(r: dict[str, Any]) -> None:
        r["decision"] = decision

    outcome = verify_record_value(_mutated(RecordKind.POLICY_DECISION, set_decision))
    assert outcome.status is VerifyStatus.SCHEMA_INVALID and outcome.pointer == "/decision"


def _audit_block(r: dict[str, Any]) -> None:
    r["policy_decision"]["decision"] = "block"


def _audit_block_no_tool(r: dict[str, Any]) -> None:
    r["policy_decision"]["decision"] = "block"
    del r["approval_event"], r["tool_call"]
    r["outcome"] = {"status": "blocked"}


def _audit_no_approval(r: dict[str, Any]) -> None:
    del r["approval_event"]


def _audit_denied_but_ran(r: dict[str, Any]) -> None:
    r["approval_event"]["outcome"] = "deny"


def _audit_denied(r: dict[str, Any]) -> None:
    r["approval_event"]["outcome"] = "deny"
    del r["tool_call"]
    r["outcome"] = {"status": "denied"}


def _audit_succeeded_without_tool(r: dict[str, Any]) -> None:
    del r["tool_call"]


def _audit_raw_result(r: dict[str, Any]) -> None:
    r["outcome"]["result"] = {"approved": True}


@pytest.mark.parametrize(
    ("change", "ok"),
    [
        (_audit_block, False),
        (_audit_block_no_tool, True),
        (_audit_no_approval, False),
        (_audit_denied_but_ran, False),
        (_audit_denied, True),
        (_audit_succeeded_without_tool, False),
        (_audit_raw_result, False),
    ],
)
def test_audit_event_control_invariants(change: Any, ok: bool) -> None:
    outcome = verify_record_value(_mutated(RecordKind.AUDIT_EVENT, change))
    assert outcome.ok is ok, outcome


@pytest.mark.parametrize(
    ("effect", "warn", "expected"),
    [
        (Effect.ALLOW, False, KlaDecision.ALLOW),
        (Effect.ALLOW, True, KlaDecision.WARN),
        (Effect.MODIFY, False, KlaDecision.WARN),
        (Effect.ASK, False, KlaDecision.REQUIRE_APPROVAL),
        (Effect.DEFER, False, KlaDecision.REQUIRE_APPROVAL),
        (Effect.DENY, False, KlaDecision.BLOCK),
    ],
)
def test_verdicts_map_to_kla_decisions(effect: Effect, warn: bool, expected: KlaDecision) -> None:
    assert kla_decision(effect, warn=warn) is expected


def test_decision_strength_orders_block_strongest() -> None:
    ordered = sorted(KlaDecision, key=lambda d: d.strength)
    assert ordered == [
        KlaDecision.ALLOW,
        KlaDecision.WARN,
        KlaDecision.REQUIRE_APPROVAL,
        KlaDecision.BLOCK,
    ]


def test_seal_refuses_an_invalid_record() -> None:
    doc = _load(asset("kla/request_currency_lowercase.json"))
    with pytest.raises(InvalidParams) as info:
        seal(RecordKind.ACTION_REQUEST, doc)
    assert info.value.reason == "schema_invalid"
    assert info.value.data["pointer"] == "/amount/currency"
