"""Policy test files: strict parsing with errors naming file and case; each kind of
expectation can fail; JUnit XML; the Warden-wire requests match the wires' own."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path
from textwrap import dedent

import pytest
from conftest import DEFAULT_POLICY
from typer.testing import CliRunner

from warden.cli import app
from warden.errors import ConfigError
from warden.identity.api_keys import Identity, Role
from warden.policy import load_bundle, parse_bundle
from warden.policytools import PolicyTester, junit_xml, parse_tests
from warden.policytools.cases import Case
from warden.policytools.run import _principal, _wire_request

runner = CliRunner()
DEFAULT = load_bundle(DEFAULT_POLICY)


def refused(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_tests(text, source="t.yaml")
    return info.value.message


def run(text: str, bundle=DEFAULT):  # type: ignore[no-untyped-def]
    return PolicyTester(bundle).run([parse_tests(text, source="t.yaml")])


HEAD = "warden_policy_tests: 1\ncases:\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("  - {name: a, tool: x, expect: {decision: allow}, colour: red}\n",
         "t.yaml: case 'a': colour: Extra inputs are not permitted"),
        ("  - {name: a, tool: x, expect: {decision: maybe}}\n",
         "t.yaml: case 'a': expect.decision: Input should be"),
        ("  - {name: a, tool: x}\n", "t.yaml: case 'a': expect: Field required"),
        ("  - {name: a, expect: {decision: allow}}\n",
         "t.yaml: case 'a': a request needs `tool` (shorthand) or `hook` and `payload`"),
        ("  - {name: a, tool: x, hook: steps/userMessage, payload: {},\n"
         "     expect: {decision: allow}}\n",
         "t.yaml: case 'a': give `hook` + `payload` or the shorthand, not both (tool)"),
        ("  - {name: a, tool: x, hook: steps/userMessage, expect: {decision: allow}}\n",
         "t.yaml: case 'a': the `tool` shorthand builds"),
        ("  - {name: a, tool: x, args: {}, provenance: {y: {origin: user_input}},"
         " expect: {decision: allow}}\n",
         "t.yaml: case 'a': `provenance` names arguments not in `args`: ['y']"),
        ("  - {name: a, tool: x, expect: {decision: allow, error: invalid_params}}\n",
         "t.yaml: case 'a': expect: `expect` needs exactly one of `decision` and `error`"),
        ("  - {name: a, tool: x, expect: {decision: allow}}\n"
         "  - {name: a, tool: y, expect: {decision: deny}}\n",
         "t.yaml: file: duplicate case name 'a'"),
        ("  - {tool: x, expect: {decision: allow}}\n", "t.yaml: case #1: name: Field required"),
        ("  - {name: a, tool: x, session: {step_count: 0, history: [{tool: y}]},"
         " expect: {decision: allow}}\n",
         "t.yaml: case 'a': session: step_count 0 is less than the 1 history steps"),
    ],
    ids=["unknown-key", "bad-decision", "no-expect", "no-request", "both-forms",
         "tool-on-other-hook", "provenance-arg", "decision-and-error", "duplicate-name",
         "no-name", "step-count"],
)  # fmt: skip
def test_strict_parse_names_file_and_case(body: str, expected: str) -> None:
    assert expected in refused(HEAD + body)


def test_every_problem_reported_at_once() -> None:
    msg = refused(
        HEAD + "  - {name: a, tool: x, expect: {decision: maybe}}\n"
        "  - {name: b, tool: y, expect: {decision: allow}, extra: 1}\n"
    )
    assert "case 'a'" in msg and "case 'b'" in msg and len(msg.splitlines()) == 2


def test_duplicate_names_reported_beside_the_other_problems() -> None:
    msg = refused(
        HEAD + "  - {name: a, tool: x, expect: {decision: maybe}}\n"
        "  - {name: a, tool: y, expect: {decision: allow}, extra: 1}\n"
        "  - {name: b, tool: z, expect: {decision: allow}}\n"
        "  - {name: a, tool: z, expect: {decision: allow}}\n"
    )
    lines = msg.splitlines()
    assert "t.yaml: case 'a': expect.decision: Input should be" in lines[0]
    assert "t.yaml: case 'a': extra: Extra inputs are not permitted" in lines
    assert "t.yaml: file: duplicate case name 'a' (cases #1 and #2)" in lines
    assert "t.yaml: file: duplicate case name 'a' (cases #1 and #4)" in lines
    assert len(lines) == 4


def test_expected_error_names_are_known_codes() -> None:
    msg = refused(HEAD + "  - {name: a, tool: x, expect: {error: not_a_code}}\n")
    assert msg.startswith("t.yaml: case 'a': expect.error: unknown error 'not_a_code'; one of ")
    assert "invalid_params" in msg
    parse_tests(HEAD + "  - {name: a, tool: x, expect: {error: invalid_params}}\n")


def test_expected_rules_must_be_the_bundles() -> None:
    with pytest.raises(ConfigError) as info:
        run(
            HEAD + "  - {name: a, tool: delete_file, expect: {decision: ask, rules: [nope]}}\n"
            "  - {name: b, tool: x, expect: {decision: allow, rules: [tool-calls, x1, x2]}}\n"
            "  - {name: c, tool: x, expect: {decision: allow, rules: ['builtin:fides']}}\n"
        )
    lines = info.value.message.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("t.yaml: case 'a': expect.rules: 'nope' is not a rule of bundle "
                               "'warden-default' (nor a built-in gate: builtin:fides")  # fmt: skip
    assert lines[1].startswith("t.yaml: case 'b': expect.rules: 'x1', 'x2' are not rules")


def test_cli_reports_parse_and_bundle_problems_of_every_file_at_once(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(HEAD + "  - {name: a, tool: x, expect: {error: nope}}\n")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(HEAD + "  - {name: w, tool: x, expect: {decision: deny, rules: [nope]}}\n")
    res = runner.invoke(app, ["policy", "test", str(DEFAULT_POLICY), str(broken), str(wrong)])
    assert res.exit_code == 2, res.output
    out = res.output.replace("\n", "")
    assert f"{broken}: case 'a': expect.error: unknown error 'nope'" in out
    assert f"{wrong}: case 'w': expect.rules: 'nope' is not a rule" in out


def test_repeated_key_and_bad_top_level_refused() -> None:
    assert "found duplicate key 'tool'" in refused(
        HEAD + "  - name: a\n    tool: x\n    tool: y\n    expect: {decision: allow}\n"
    )
    assert refused("- 1\n") == "t.yaml: top level: must be a mapping"
    assert "warden_policy_tests" in refused("cases: []\n")
    assert "cases: List should have at least 1 item" in refused(
        "warden_policy_tests: 1\ncases: []\n"
    )


def test_each_expectation_can_fail() -> None:
    report = run(
        HEAD
        + dedent("""\
          - {name: decision, tool: delete_file, args: {}, expect: {decision: allow}}
          - name: rules
            tool: delete_file
            expect: {decision: ask, rules: [tool-calls]}
          - {name: codes, tool: delete_file, expect: {decision: ask, reason_codes: [x]}}
          - {name: group, tool: delete_file, expect: {decision: ask, approver_group: finance}}
          - name: mods
            tool: login
            args: {password: p}
            expect: {decision: modify, modifications: null}
          - {name: warn, tool: read_file, args: {}, expect: {decision: allow, warn: true}}
          - {name: error, tool: read_file, args: {}, expect: {error: invalid_params}}
          - name: passes
            tool: delete_file
            expect:
              decision: ask
              rules: [ask-before-delete, tool-calls]
              reason_codes: [destructive_action_requires_approval]
              approver_group: operators
              warn: false
        """)
    )
    got = {r.name: r.failures for r in report.results}
    assert got["decision"] == (
        "decision: expected allow, got ask (rules: tool-calls, ask-before-delete)",
    )
    assert got["rules"] == (
        "rules: expected ['tool-calls'], got ['ask-before-delete', 'tool-calls']",
    )
    assert got["codes"] == (
        "reason_codes: expected ['x'], got ['destructive_action_requires_approval']",
    )
    assert got["group"] == ("approver_group: expected finance, got operators",)
    assert got["mods"] == (
        "modifications: expected None, got {'redactions': [{'path': '/arguments/password/value'}]}",
    )
    assert got["warn"] == ("warn: expected True, got False",)
    assert got["error"] == ("expected the server to reject it (invalid_params), got allow",)
    assert got["passes"] == ()
    assert not report.passed


def test_shorthand_and_full_form_decide_alike_and_agent_facts_reach_cel() -> None:
    bundle = parse_bundle(
        "warden_bundle: 1\nid: a\nversion: '1'\nrules:\n"
        "  - {id: ops-only, tools: [deploy], when: \"'ops' in agent.groups && agent.verified\","
        " effect: allow}\n"
        "  - {id: count, tools: [deploy], when: 'session.step_count >= 2', effect: deny,"
        " reasoning: too late}\n"
    )
    report = run(
        HEAD
        + dedent("""\
          - {name: unverified, tool: deploy, args: {}, expect: {decision: deny, rules: []}}
          - {name: ops, tool: deploy, agent: {id: a1, groups: [ops]}, expect: {decision: allow}}
          - name: full
            hook: steps/toolCallRequest
            agent: {id: a1, groups: [ops]}
            payload: {tool: {name: deploy}, arguments: {}}
            expect: {decision: allow, rules: [ops-only]}
          - name: later
            tool: deploy
            agent: {id: a1, groups: [ops]}
            session: {history: [{tool: x, result: 1}, {tool: x, result: 2}]}
            expect: {decision: deny, rules: [ops-only, count]}
          - name: counted
            tool: deploy
            agent: {id: a1, groups: [ops]}
            session: {step_count: 5}
            expect: {decision: deny}
        """),
        bundle,
    )
    assert [(r.name, r.failures) for r in report.results if not r.passed] == []


def test_history_decision_override_changes_what_entered() -> None:
    # Issue 8's bundle (session-wide taint): any untrusted output that entered taints.
    bundle = load_bundle(
        Path(__file__).resolve().parents[1] / "replay" / "agentdojo-provenance-strict.yaml"
    )
    base = (
        HEAD + "  - name: c\n    agent: {id: a}\n    session:\n      history:\n"
        "        - {tool: read_channel_messages, result: 'evil text'%s}\n"
        "    tool: send_channel_message\n    args: {channel: general, body: hi}\n"
        "    expect: {decision: %s}\n"
    )
    assert run(base % ("", "ask"), bundle).passed  # the tainted output entered
    # Recorded as denied, the output never reached the agent: no taint.
    assert run(base % (", decision: deny", "allow"), bundle).passed


def test_bundle_id_mismatch_refused() -> None:
    with pytest.raises(ConfigError, match="the cases are for bundle 'other', not 'warden-default'"):
        run("warden_policy_tests: 1\nbundle: other\ncases:\n"
            "  - {name: a, tool: x, expect: {decision: allow}}\n")  # fmt: skip


def test_junit_xml_counts_failures_and_coverage() -> None:
    report = run(
        HEAD + "  - {name: ok <1>, tool: read_file, args: {}, expect: {decision: allow}}\n"
        "  - {name: bad & wrong, tool: delete_file, args: {}, expect: {decision: allow}}\n"
    )
    root = ET.fromstring(junit_xml(report))
    assert (root.tag, root.get("tests"), root.get("failures")) == ("testsuites", "2", "1")
    suite = root.find("testsuite[@name='t.yaml']")
    assert suite is not None and suite.get("failures") == "1"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["ok <1>", "bad & wrong"]
    assert cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure is not None and failure.get("message", "").startswith(
        "decision: expected allow, got ask"
    )
    coverage = root.find("testsuite[@name='coverage']")
    assert coverage is not None
    props = {p.get("name"): p.get("value") for p in coverage.iter("property")}
    assert props["rule:tool-calls"] == "2" and props["rule:destructive-shell"] == "0"
    assert "destructive-shell" in (coverage.findtext("system-out") or "")


def test_cli_junit_file_exit_codes_and_messages(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(HEAD + "  - {name: a, tool: read_file, args: {}, expect: {decision: allow}}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(HEAD + "  - {name: a, tool: read_file, args: {}, expect: {decision: deny}}\n")
    junit = tmp_path / "out" / "junit.xml"
    junit.parent.mkdir()
    res = runner.invoke(
        app, ["policy", "test", str(DEFAULT_POLICY), str(good), "--junit", str(junit)]
    )
    assert res.exit_code == 0, res.output
    assert "1 passed, 0 failed" in res.output and "coverage: 1 of 18 rules" in res.output
    assert ET.parse(junit).getroot().get("failures") == "0"
    res = runner.invoke(app, ["policy", "test", str(DEFAULT_POLICY), str(bad)])
    assert res.exit_code == 1
    assert "FAIL" in res.output and "decision: expected deny, got allow" in res.output
    broken = tmp_path / "broken.yaml"
    broken.write_text(HEAD + "  - {name: a, tool: x}\n")
    res = runner.invoke(app, ["policy", "test", str(DEFAULT_POLICY), str(broken)])
    assert res.exit_code == 2 and f"{broken}: case 'a': expect: Field required" in res.output
    lonely = tmp_path / "lonely.yaml"
    lonely.write_text(DEFAULT_POLICY.read_text())
    res = runner.invoke(app, ["policy", "test", str(lonely)])
    assert res.exit_code == 2 and "no test files for" in res.output


def test_wire_requests_match_the_wires_own() -> None:
    """The spend-quote and KLA requests the tester builds are the ones those wires build."""
    from warden.kla.asks import action_request
    from warden.spend.asks import quote_request

    who = Identity("k1", "agent-7", Role.AGENT, ("ops",), owner="alice", budgets=("b1",))
    principal = _principal(None)
    assert principal is None
    args = {"budgetId": "b1", "amount": "12.50", "currency": "USD", "action": "buy"}
    case = Case.model_validate(
        {"name": "q", "hook": "spend/quote", "tool": "buy", "args": args,
         "expect": {"decision": "allow"}}
    )  # fmt: skip
    ours = _wire_request(case, who.as_principal())
    real = quote_request(who, args, "b1", Decimal("12.50"), "USD", "buy")
    for attr in ("method", "tool", "args", "session", "raw_command"):
        assert getattr(ours, attr) == getattr(real, attr), attr
    record = {
        "action": "refund",
        "purpose": "p",
        "resource": {"type": "order", "id": "o-1"},
        "data_boundary_ref": "eu",
        "environment": "prod",
        "correlation": {"execution_id": "exec-1"},
        "action_request_id": "r",
    }
    kla_args = {"purpose": "p", "resource_type": "order", "resource_id": "o-1",
                "data_boundary_ref": "eu", "environment": "prod"}  # fmt: skip
    case = Case.model_validate(
        {"name": "k", "hook": "kla/action", "tool": "refund", "args": kla_args,
         "expect": {"decision": "allow"}}
    )  # fmt: skip
    ours = _wire_request(case, who.as_principal(), "exec-1")
    real = action_request(record, who)
    for attr in ("method", "tool", "args", "session", "raw_command"):
        assert getattr(ours, attr) == getattr(real, attr), attr


def test_cases_that_cannot_be_set_up_are_refused_naming_the_case() -> None:
    with pytest.raises(ConfigError) as info:
        run(HEAD + "  - {name: ping, hook: system/ping, payload: {}, expect: {decision: allow}}\n")
    assert info.value.message == (
        "t.yaml: case 'ping': system/ping is answered by the protocol layer; policy does not see it"
    )
    with pytest.raises(ConfigError) as info:
        run(
            HEAD
            + dedent("""\
              - name: h
                session: {history: [{hook: steps/userMessage, payload: {content: []}}]}
                tool: x
                expect: {decision: allow}
            """)
        )
    assert info.value.message.startswith(
        "t.yaml: case 'h': history step #1 would be rejected by the server (invalid_params): "
        "steps/userMessage payload invalid at /content"
    )
