"""A condition that errors at evaluation is a signed, chained deny (evaluation_failed)
through the real ACS service; the operator detail goes to the ledger, not the wire."""

from __future__ import annotations

from collections.abc import Callable

from conftest import TEST_IKM, assert_valid_response, asset, service_client

from warden.core.guardian import FAIL_CLOSED_REASONING
from warden.ledger.verify import verify_records
from warden.runtime import Runtime


def test_condition_error_is_a_signed_deny(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(policy=asset("policy/bundle_eval_error.yaml"))
    client = service_client(rt)
    client.hello()
    assert client.call("steps/sessionStart", {})["result"]["decision"] == "allow"

    # AcsClient.send raises IntegrityError if a signed answer does not verify.
    failed = client.tool_call("send_money", {"to": "bob"})
    assert_valid_response(failed)
    result = failed["result"]
    assert result["decision"] == "deny"
    assert result["reason_codes"] == ["evaluation_failed"]
    assert result["reasoning"] == FAIL_CLOSED_REASONING
    assert "policy_references" not in result
    assert "transfer-limit" not in str(result), "operator detail must not reach the wire"
    assert result["signature"]["algorithm"] == "HMAC-SHA256"
    assert isinstance(result["chain_hash"], str) and len(result["chain_hash"]) == 64

    over = client.tool_call("send_money", {"to": "bob", "amount": 5000})["result"]
    under = client.tool_call("send_money", {"to": "bob", "amount": 5})["result"]
    assert (over["decision"], over["reason_codes"]) == ("deny", ["transfer_over_limit"])
    assert (under["decision"], "reason_codes" in under) == ("allow", False)

    entries = [r for r in rt.store.iter_records(client.session_id) if r["kind"] == "entry"]
    assert [e["entry"]["verdict"]["decision"] for e in entries] == [
        "allow",
        "deny",
        "deny",
        "allow",
    ]
    failure_entry = entries[1]["entry"]
    assert failure_entry["verdict"]["reason_codes"] == ["evaluation_failed"]
    assert failure_entry["entry_hash"] == result["chain_hash"]
    assert "rule transfer-limit" in failure_entry["failure"]
    assert "failure" not in entries[2]["entry"]
    report = verify_records(rt.store.iter_records(), ikm=TEST_IKM)
    assert (report.sessions, report.entries) == (1, 4)
