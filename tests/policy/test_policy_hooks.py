"""A rule's ``hooks`` must name methods Warden evaluates; reasoning must say something.

Known methods: the 19 ``steps/*`` hooks, ``protocols/MCP/<method>``, and globs of these.
A typo would make a rule that never fires, so a deny would silently not apply.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from warden.core.hooks import STEP_METHODS, is_evaluated_method
from warden.errors import ConfigError
from warden.policy import parse_bundle
from warden.wire.acs.methods import HOOKS

DETAILS: dict[str, dict[str, Any]] = {
    "deny": {},
    "modify": {"modify": {"parameter_overrides": {"limit": 10}}},
    "ask": {
        "ask": {"question": "ok?", "approver": {"type": "human", "id": "d"}, "timeout_seconds": 9}
    },
    "defer": {
        "defer": {
            "reason": "low_confidence",
            "resolution_method": "timeout",
            "resolution_timeout_ms": 9,
        }
    },
}


def load(rules: list[dict[str, Any]], **top: Any) -> Any:
    doc = {"warden_bundle": 1, "id": "t", "version": "1", **top, "rules": rules}
    return parse_bundle(yaml.safe_dump(doc, sort_keys=False), source="b.yaml")


def refusal(rules: list[dict[str, Any]], **top: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load(rules, **top)
    return info.value.message


def test_step_methods_match_the_wire_method_table() -> None:
    assert len(STEP_METHODS) == 19
    assert set(STEP_METHODS) == set(HOOKS)


@pytest.mark.parametrize(
    "hook",
    [
        *STEP_METHODS,
        "protocols/MCP/tools/call",
        "protocols/MCP/notifications/resources/list_changed",
        "protocols/MCP/vendor_x/do_thing",
        "steps/*",
        "steps/tool*",
        "*",
        "steps/[st]*",
        "protocols/MCP/*",
        "protocols/MCP/*/list",
        "protocols/MCP/notifications/*",
        "protocols/MCP/vendor_*",
        "protocols/*",
    ],
)
def test_known_hooks_and_globs_load(hook: str) -> None:
    bundle = load([{"id": "r", "hooks": [hook], "effect": "allow"}])
    assert bundle.rules[0].hooks == (hook,)


@pytest.mark.parametrize(
    ("hook", "why"),
    [
        ("steps/toolcallrequest", "unknown hook 'steps/toolcallrequest' (did you mean "
         "'steps/toolCallRequest'?)"),
        ("steps/toolCallRequst", "unknown hook 'steps/toolCallRequst' (did you mean "
         "'steps/toolCallRequest'?)"),
        ("protocols/mcp/tools/call", "unknown hook 'protocols/mcp/tools/call' (did you mean "
         "'protocols/MCP/tools/call'?)"),
        ("wrapped:mcp-2025-06-18/tools/call", "unknown hook 'wrapped:mcp-2025-06-18/tools/call'"),
        ("protocols/MCP/", "unknown hook 'protocols/MCP/'"),
        ("protocols/MCP/tools call", "unknown hook 'protocols/MCP/tools call'"),
        ("protocols/A2A/message/send", "unknown hook 'protocols/A2A/message/send'"),
        ("system/ping", "unknown hook 'system/ping'"),
        ("handshake/hello", "unknown hook 'handshake/hello'"),
        ("agbom/snapshot", "unknown hook 'agbom/snapshot'"),
        ("step/*", "hook glob 'step/*' matches no known method"),
        ("steps/Tool*", "hook glob 'steps/Tool*' matches no known method"),
        ("protocols/mcp/*", "hook glob 'protocols/mcp/*' matches no known method"),
        ("agbom/*", "hook glob 'agbom/*' matches no known method"),
    ],
)  # fmt: skip
def test_unknown_hook_refused_listing_valid_names(hook: str, why: str) -> None:
    message = refusal([{"id": "r", "hooks": ["steps/sessionStart", hook], "effect": "allow"}])
    assert message.startswith(f"b.yaml: rule r: hooks: Value error, {why}")
    assert "; valid hooks: steps/sessionStart, " in message
    for method in STEP_METHODS:
        assert method in message
    assert "protocols/MCP/<method>" in message
    assert message.count("\n") == 0  # one problem


def test_every_bad_hook_of_a_rule_is_named() -> None:
    message = refusal([{"id": "r", "hooks": ["steps/a", "steps/b*"], "effect": "allow"}])
    assert "unknown hook 'steps/a'; hook glob 'steps/b*' matches no known method;" in message


def test_hook_problems_reported_with_other_problems() -> None:
    rules = [
        {"id": "a", "hooks": ["steps/nope"], "effect": "allow"},
        {"id": "b", "tools": ["x"], "effect": "deny"},
    ]
    message = refusal(rules)
    assert "b.yaml: rule a: hooks: Value error, unknown hook 'steps/nope'" in message
    assert "b.yaml: rule b: Value error, effect deny requires `reasoning`" in message


def test_is_evaluated_method() -> None:
    assert is_evaluated_method("steps/memoryStore")
    assert is_evaluated_method("protocols/MCP/tools/call")
    assert not is_evaluated_method("protocols/MCP/tools//call")
    assert not is_evaluated_method("steps/memorystore")


@pytest.mark.parametrize("effect", sorted(DETAILS))
@pytest.mark.parametrize("reasoning", ["", "   ", "\n\t "], ids=["empty", "spaces", "mixed"])
def test_blank_reasoning_refused(effect: str, reasoning: str) -> None:
    rule = {"id": "r", "tools": ["x"], "effect": effect, "reasoning": reasoning, **DETAILS[effect]}
    message = refusal([rule])
    assert message == (
        f"b.yaml: rule r: Value error, effect {effect} requires `reasoning` "
        "(text, not only whitespace)"
    )


def test_blank_default_reasoning_refused() -> None:
    message = refusal([{"id": "r", "tools": ["x"], "effect": "allow"}], default_reasoning="  ")
    assert message == (
        "b.yaml: bundle: default_reasoning: Value error, must not be empty or only whitespace"
    )
