"""Issue 14 item 4: tool names match caselessly unless a rule asks for exact case.

``DELETE_FILE``, ``Delete_File``, ``SEND_MONEY`` and ``dElEtE_file`` skipped every ask of
the default bundle; now names and patterns are compared folded (NFKC + casefold), a rule
may opt into exact case with ``case_sensitive: true``, and ``policy explain`` prints the
folded name. The service test runs on both store backends (an ask files a desk task).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import DEFAULT_POLICY, ROOT, assert_valid_response, asset, service_client
from test_policy_engine import mcp_call, tool_call

from warden.core.types import Effect
from warden.errors import ConfigError
from warden.policy import PolicyEngine, load_bundle, parse_bundle
from warden.provenance.config import ProvenanceSpec
from warden.runtime import Runtime

DEFAULT = PolicyEngine(load_bundle(DEFAULT_POLICY))
SPELLINGS = ["DELETE_FILE", "Delete_File", "SEND_MONEY", "dElEtE_file"]
CODES = {
    "DELETE_FILE": "destructive_action_requires_approval",
    "Delete_File": "destructive_action_requires_approval",
    "dElEtE_file": "destructive_action_requires_approval",
    "SEND_MONEY": "payment_requires_approval",
}


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


def test_the_reported_spellings_ask_through_the_service(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    client = service_client(rt)
    client.hello()
    for name in SPELLINGS:
        response = client.tool_call(name, {"path": "/tmp/x"})
        assert_valid_response(response)
        result = response["result"]
        assert result["decision"] == "ask", name
        assert result["reason_codes"][0] == CODES[name], name  # then approval_pending
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": {}},
        }
        wrapped = client.call("protocols/MCP/tools/call", message)["result"]
        assert (wrapped["decision"], wrapped["reason_codes"][0]) == ("ask", CODES[name]), name
    entries = [r for r in rt.store.iter_records(client.session_id) if r["kind"] == "entry"]
    assert [e["entry"]["verdict"]["decision"] for e in entries] == ["ask"] * 8


@pytest.mark.parametrize(
    "name",
    [
        *SPELLINGS,
        "ＤＥＬＥＴＥ_FILE",  # full-width letters: NFKC folds them to ASCII
        "REMOVE_USER",
        "DROPTABLE",
        "Purge_Queue",
        "TRANSFER_FUNDS",
        "CREATE_PAYMENT",
        "PAY_INVOICE",
        "PAYINVOICE",
        "PayBill",
        "repayLoan",
        "ISSUE_REFUND",
        "SENDMONEY",
        # Hyphens and dots separate words in many MCP tool names (fresh-user review).
        "SEND-MONEY",
        "send.money",
        "PAY-INVOICE",
        "payments.pay",
        "bill-pay",
    ],
)
def test_case_variants_ask_in_the_default_bundle(name: str) -> None:
    for request in (tool_call(name), mcp_call(name)):
        assert DEFAULT.evaluate(request).effect is Effect.ASK, name


@pytest.mark.parametrize(
    "name",
    ["read_file", "READ_FILE", "displayName", "get_payload", "PAYLOAD", "payload-viewer"],
)
def test_ordinary_names_in_any_case_stay_allowed(name: str) -> None:
    assert DEFAULT.evaluate(tool_call(name, path="/tmp/x")).effect is Effect.ALLOW


def _bundle(rules: str) -> PolicyEngine:
    text = textwrap.dedent(
        """\
        warden_bundle: 1
        id: case-test
        version: "1"
        rules:
        """
    )
    return PolicyEngine(parse_bundle(text + textwrap.indent(textwrap.dedent(rules), "  ")))


EXACT = """\
- id: any-tool
  tools: ["*"]
  effect: allow
- id: exact-delete
  tools: [delete_file]
  case_sensitive: true
  effect: deny
  reasoning: Exactly delete_file.
- id: caseless-wipe
  tools: [wipe_disk]
  effect: deny
  reasoning: Any spelling of wipe_disk.
"""


def test_an_exact_case_rule_matches_only_its_spelling() -> None:
    eng = _bundle(EXACT)
    assert eng.evaluate(tool_call("delete_file")).effect is Effect.DENY
    for other in ("DELETE_FILE", "Delete_File", "dElEtE_file"):
        ev = eng.evaluate(tool_call(other))
        assert (ev.effect, [r.id for r in ev.fired]) == (Effect.ALLOW, ["any-tool"]), other
    for spelling in ("wipe_disk", "WIPE_DISK", "Wipe_Disk"):
        assert eng.evaluate(tool_call(spelling)).effect is Effect.DENY, spelling


def test_cel_sees_the_name_as_sent_and_the_folded_name() -> None:
    eng = _bundle(
        """\
        - id: any-tool
          tools: ["*"]
          effect: allow
        - id: folded
          hooks: [steps/toolCallRequest]
          when: tool.normalized_name == "delete_file" && tool.name == "DELETE_FILE"
          effect: deny
          reasoning: Seen both ways.
        """
    )
    assert eng.evaluate(tool_call("DELETE_FILE")).effect is Effect.DENY
    assert eng.evaluate(tool_call("delete_file")).effect is Effect.ALLOW


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ('"yes"', "case_sensitive: Input should be a valid boolean"),
        ("1", "case_sensitive: Input should be a valid boolean"),
        ("null", "case_sensitive: Input should be a valid boolean"),
    ],
)
def test_strict_validation_refuses_a_bad_case_sensitive(value: str, why: str) -> None:
    rules = f"""\
    - id: exact
      tools: [x]
      case_sensitive: {value}
      effect: allow
    """
    with pytest.raises(ConfigError) as err:
        _bundle(rules)
    assert f"rule exact: {why}" in str(err.value)


def test_case_sensitive_needs_tools() -> None:
    with pytest.raises(ConfigError) as err:
        _bundle(
            """\
            - id: lifecycle
              hooks: [steps/sessionStart]
              case_sensitive: true
              effect: allow
            """
        )
    assert "rule lifecycle: Value error, `case_sensitive` applies to `tools`" in str(err.value)


def test_charges_match_caselessly_and_refuse_keys_that_fold_alike() -> None:
    text = """\
warden_bundle: 1
id: spend-case
version: "1"
rules: [{id: all, tools: ["*"], effect: allow}]
spend:
  - id: priced
    prices: {search: "0.01", Send_Money: "5"}
    currency: USD
    budget: acme
"""
    charge = parse_bundle(text).charges[0]
    assert charge.matches_tool("SEARCH") and charge.matches_tool("send_money")
    assert str(charge.price_for("SEND_MONEY")) == "5"
    assert not charge.matches_tool("searcher")
    bad = text.replace('search: "0.01"', 'search: "0.01", SEARCH: "0.02"')
    with pytest.raises(ConfigError) as err:
        parse_bundle(bad)
    assert "prices: 'SEARCH' and 'search' name the same tool" in str(err.value)


def test_provenance_tightening_globs_are_caseless_and_trust_is_exact() -> None:
    spec = ProvenanceSpec.model_validate(
        {
            "consequential_tools": ["send_money"],
            "external_sinks": ["send_email"],
            "trusted_sources": ["get_iban"],
            "confidential_sources": ["read_file"],
        }
    )
    assert spec.is_consequential("SEND_MONEY") and spec.is_external_sink("Send_Email")
    assert spec.is_confidential_source("READ_FILE")
    assert spec.is_trusted_source("get_iban") and not spec.is_trusted_source("GET_IBAN")


def test_fold_is_nfkc_then_casefold() -> None:
    from warden.core.tool_names import fold

    assert fold("dElEtE_FiLe") == "delete_file"
    assert fold("ＤＥＬＥＴＥ") == "delete"
    assert fold("Straße") == "strasse"


def _explain(bundle: Path, name: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    body = asset("policy/request_delete_file.json").read_text().replace("delete_file", name)
    request = tmp_path / f"request-{name}.json"
    request.write_text(body)
    return subprocess.run(
        [sys.executable, "-m", "warden", "policy", "explain", str(bundle), str(request)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def test_explain_shows_the_folded_name(tmp_path: Path) -> None:
    proc = _explain(DEFAULT_POLICY, "DELETE_FILE", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "tool DELETE_FILE (matched as delete_file):" in proc.stdout
    assert "verdict: ask" in proc.stdout
    plain = _explain(DEFAULT_POLICY, "delete_file", tmp_path)
    assert "tool delete_file: " in plain.stdout and "matched as" not in plain.stdout
