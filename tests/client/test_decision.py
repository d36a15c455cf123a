"""How an ACS result becomes a ``warden.Decision`` (pure: no Warden needed)."""

from __future__ import annotations

from typing import Any

from warden.client.decision import Step, apply_modifications, decision_of

CALL = Step(
    "steps/toolCallRequest",
    {
        "tool": {"name": "login"},
        "arguments": {
            "user": {"value": "bob"},
            "password": {"value": "hunter2"},
            "opts": {"value": {"token": "t", "keep": 1}},
        },
    },  # fmt: skip
    {},
)


def result(decision: str, **kw: Any) -> dict[str, Any]:
    return {"type": "final", "request_id": "r", "decision": decision, **kw}


def test_modifications_become_the_arguments_to_run_with() -> None:
    mods = {
        "redactions": [
            {"path": "/arguments/password/value"},
            {"path": "/arguments/opts/value/token", "replacement": "***"},
            {"path": "/arguments/absent/value"},
        ],
        "parameter_overrides": {"user": "guest", "mode": ["ro"]},
    }
    d = decision_of(result("modify", modifications=mods, reasoning="secrets"), CALL)
    assert d.allowed and d.modified_args == {
        "user": "guest",
        "password": "[REDACTED]",
        "opts": {"token": "***", "keep": 1},
        "mode": ["ro"],
    }
    # The step as sent is untouched (it is resubmitted as is after approval).
    assert CALL.payload["arguments"]["password"] == {"value": "hunter2"}


def test_a_modify_the_client_cannot_apply_is_a_deny() -> None:
    for mods in ({"modified_content": "x"}, {"redactions": [{"path": "/tool/name"}]}):
        d = decision_of(result("modify", modifications=mods, reasoning="r"), CALL)
        assert d.denied and d.reason_codes == ("modification_not_applicable",)
        assert d.modified_args is None and not d.allowed


def test_whole_argument_redaction_and_unknown_decisions() -> None:
    assert (
        apply_modifications(CALL.payload, {"redactions": [{"path": "/arguments/user"}]})["user"]
        == "[REDACTED]"
    )
    odd = decision_of(result("maybe"), CALL)
    assert odd.denied and odd.reason_codes == ("bad_decision",)


def test_ask_and_defer_carry_the_task_and_rules() -> None:
    refs = [{"rule_id": "tool-calls"}, {"rule_id": "ask-before-delete"}, {"policy_id": "x"}]
    ask = decision_of(
        result("ask", reasoning="why", reason_codes=["approval_pending"], policy_references=refs,
               ask_details={"task_id": "task_1", "task_url": "http://w/desk/tasks/task_1"},
               chain_hash="a" * 64),
        CALL,
    )  # fmt: skip
    assert ask.needs_approval and not ask.allowed and not ask.denied
    assert (ask.task_id, ask.task_url) == ("task_1", "http://w/desk/tasks/task_1")
    assert ask.rule_ids == ("tool-calls", "ask-before-delete") and ask.chain_hash == "a" * 64
    defer = decision_of(result("defer", reasoning="w", defer_details={"task_id": "task_2"}), CALL)
    assert defer.needs_approval and defer.task_id == "task_2"
    assert defer.args_for({"a": 1}) == {"a": 1}
