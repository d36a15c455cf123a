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
    assert (under["decision"], under["reason_codes"]) == ("allow", ["default_allow"])

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
    # The session, and the agent's registration chain (one entry).
    assert (report.sessions, report.entries) == (2, 5)


def test_default_allow_names_itself_and_the_bundle(
    make_runtime: Callable[..., Runtime],
) -> None:
    """Issue 14 item 9: a bundle's `default: allow` answers with reason code
    `default_allow` and the bundle's id, version and digest, as a default deny does."""
    rt = make_runtime(policy=asset("policy/bundle_eval_error.yaml"))
    ref = rt.guardian.engine.bundle.ref
    client = service_client(rt)
    client.hello()
    response = client.tool_call("lookup_weather", {"city": "Oslo"})
    assert_valid_response(response)
    result = response["result"]
    assert result["decision"] == "allow"
    assert result["reason_codes"] == ["default_allow"]
    assert result["policy_data"]["bundle"] == {
        "id": "eval-error",
        "version": "1",
        "digest": ref.digest,
    }
    assert ref.digest.startswith("sha256:")
    assert "policy_references" not in result
    entries = [r for r in rt.store.iter_records(client.session_id) if r["kind"] == "entry"]
    verdict = entries[-1]["entry"]["verdict"]
    assert verdict["reason_codes"] == ["default_allow"]
    assert verdict["bundle"] == ref.to_wire()


def test_default_deny_names_the_bundle_too(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()  # the shipped default bundle: default deny
    client = service_client(rt)
    client.hello()
    # No rule of the default bundle covers MCP completion requests.
    message = {"jsonrpc": "2.0", "id": 1, "method": "completion/complete", "params": {}}
    response = client.call("protocols/MCP/completion/complete", message)
    assert_valid_response(response)
    result = response["result"]
    assert (result["decision"], result["reason_codes"]) == ("deny", ["no_rule_matched"])
    assert result["policy_data"]["bundle"] == rt.guardian.engine.bundle.ref.to_wire()
