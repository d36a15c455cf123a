"""``re_find`` is linear-time RE2 and ``to_json`` renders any CEL value as compact JSON.

A pattern RE2 cannot compile fails the evaluation closed; when it is visible at load (a
literal ``re_find`` pattern, or an entry of a ``data`` key ending in ``_patterns``) the
bundle is refused instead.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
import yaml
from conftest import DEFAULT_POLICY, asset

from warden.core.types import ActionRequest, Effect
from warden.errors import ConfigError, CouldNotDecide
from warden.policy import PolicyEngine, load_bundle, parse_bundle
from warden.policy.conditions import (
    PatternError,
    compile_pattern,
    literal_arguments,
    re_find,
    to_json,
)
from warden.wire.acs.methods import route
from warden.wire.acs.parse import action_request

MB = 1_000_000


def bundle(rules: list[dict[str, Any]], **top: Any) -> str:
    doc = {"warden_bundle": 1, "id": "t", "version": "1", "default": "allow", **top}
    return yaml.safe_dump({**doc, "rules": rules}, sort_keys=False)


def shell_call(raw_command: str = "", **args: Any) -> ActionRequest:
    params = {
        "acs_version": "0.1.0",
        "request_id": str(uuid.uuid4()),
        "timestamp": "2026-11-29T12:00:00Z",
        "metadata": {"agent_id": "agent-a", "session_id": str(uuid.uuid4())},
        "payload": {
            "tool": {"name": "shell"},
            "arguments": {k: {"value": v} for k, v in args.items()},
            **({"raw_command": raw_command} if raw_command else {}),
        },
    }
    return action_request(route("steps/toolCallRequest"), params, None)


# -- RE2 ----------------------------------------------------------------------------------


def test_re_find_compiles_with_re2_and_caches() -> None:
    assert type(compile_pattern(r"a+b")).__module__.startswith("re2")
    assert compile_pattern(r"a+b") is compile_pattern(r"a+b")
    assert re_find("xxaab", r"a+b") and not re_find("xxb", r"a+b")


@pytest.mark.parametrize(
    "pattern",
    [r"(\w+) \1", r"foo(?=bar)", r"(?<!x)y", r"a++", r"end\Z"],
    ids=["backreference", "lookahead", "lookbehind", "possessive", "backslash-Z"],
)
def test_pattern_re2_cannot_compile_raises(pattern: str) -> None:
    with pytest.raises(PatternError, match="RE2 cannot compile pattern"):
        re_find("text", pattern)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("placement", ["argument", "nested", "raw_command"])
def test_one_megabyte_argument_against_every_default_pattern_decides(placement: str) -> None:
    """Backtracking ``re`` needs minutes (quadratic) on these; RE2 is linear.

    Each text opens with the prefix of one default pattern and then never completes
    it, the worst case for a backtracking matcher; the engine must still decide."""
    engine = PolicyEngine(load_bundle(DEFAULT_POLICY))
    prefixes = ["dd if=", "dd ", "rm ", "rm -r", "rm -f", "find ", "chmod -R ", ":()", "mkf"]
    for prefix in prefixes:
        text = prefix + " " * MB
        if placement == "argument":
            request = shell_call(cmd=text)
        elif placement == "nested":
            request = shell_call(opts={"argv": [prefix, {"deep": text}]})
        else:
            request = shell_call(raw_command=text)
        ev = engine.evaluate(request)
        assert ev.effect is Effect.ALLOW, prefix
        assert [r.rule_id for r in ev.references] == ["tool-calls"]
    # and a 1 MB argument that does hold a destructive command is still found
    ev = engine.evaluate(shell_call(cmd=" " * MB + "dd if=/dev/zero of=/dev/sda"))
    assert ev.effect is Effect.DENY


def test_pattern_re2_cannot_compile_fails_closed_at_evaluation() -> None:
    path = asset("policy/bundle_eval_regex_not_re2.yaml")
    engine = PolicyEngine(load_bundle(path))  # valid at load: the list is not *_patterns
    with pytest.raises(CouldNotDecide) as info:
        engine.evaluate(shell_call(raw_command="echo echo"))
    assert info.value.reason == "evaluation_failed"
    assert info.value.data["rule_id"] == "repeated-word"
    assert "RE2 cannot compile pattern" in info.value.message


@pytest.mark.parametrize(
    "when",
    [
        r"re_find(raw_command, '(a)\\1')",
        r"re_find(raw_command, r'(a)\1')",
        r'raw_command.re_find("x(?=y)")',
        r"has(args.x) && re_find(string(args.x), 'ok') || re_find(raw_command, 'b(?<=a)')",
    ],
    ids=["quoted", "raw-string", "method-call", "second-call"],
)
def test_literal_re_find_pattern_refused_at_load(when: str) -> None:
    text = bundle([{"id": "r", "tools": ["*"], "when": when, "effect": "deny", "reasoning": "x"}])
    with pytest.raises(ConfigError) as info:
        parse_bundle(text, source="b.yaml")
    assert info.value.message.startswith("b.yaml: rule r: when: re_find: RE2 cannot compile")


def test_literal_arguments_best_effort() -> None:
    source = (
        "data.p.exists(p, re_find(raw_command, p)) || re_find(f(a, ')'), \"x,(y)\")"
        " || args.s.re_find('z') || re_find(a, 'q' + 'r') || re_find(a, b'bytes')"
    )
    assert literal_arguments(source, "re_find", 1) == ["x,(y)", "z"]


def test_data_patterns_checked_at_load_naming_the_key() -> None:
    rules = [{"id": "r", "tools": ["*"], "effect": "allow"}]
    data = {
        "ok_patterns": ["a+", "b"],
        "nested": {"secret_patterns": ["ok", "(x)\\1"]},
        "one_patterns": "(?=z)",
        "typed_patterns": [1],
        "other": ["(x)\\1"],  # not named *_patterns: not a pattern list, not checked
    }
    with pytest.raises(ConfigError) as info:
        parse_bundle(bundle(rules, data=data), source="b.yaml")
    lines = info.value.message.splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("b.yaml: bundle: data.nested.secret_patterns[1]: RE2 cannot")
    assert lines[1].startswith("b.yaml: bundle: data.one_patterns: RE2 cannot compile")
    assert lines[2] == (
        "b.yaml: bundle: data.typed_patterns[0]: "
        "a `_patterns` entry must be a string (an RE2 pattern)"
    )


def test_data_patterns_reported_with_schema_errors() -> None:
    text = bundle([{"id": "r", "tools": ["*"], "effect": "deny"}], data={"x_patterns": ["("]})
    with pytest.raises(ConfigError) as info:
        parse_bundle(text, source="b.yaml")
    message = info.value.message
    assert "b.yaml: rule r: Value error, effect deny requires `reasoning`" in message
    assert "b.yaml: bundle: data.x_patterns[0]: RE2 cannot compile pattern `(`" in message


# -- to_json ------------------------------------------------------------------------------


def test_to_json_compact_sorted_utf8() -> None:
    value = {"b": [1, 2.5, None, True, {"z": "é\t"}], "a": "x", 3: False}
    assert to_json(value) == '{"3":false,"a":"x","b":[1,2.5,null,true,{"z":"é\\t"}]}'
    assert to_json("s") == '"s"'
    assert to_json(b"\x00\xff") == '"AP8="'
    when = datetime.datetime(2026, 11, 29, 12, tzinfo=datetime.UTC)
    assert to_json([when, datetime.timedelta(seconds=1.5)]) == '["2026-11-29T12:00:00Z","1.5s"]'


def test_to_json_in_a_condition_sees_every_argument() -> None:
    rule = {
        "id": "r",
        "tools": ["shell"],
        "when": """to_json(args) == '{"a":{"b":["c",1]},"d":"e"}' """
        """&& to_json(1) == '1' && to_json(null) == 'null' && re_find(to_json(args), '"c",1')""",
        "effect": "deny",
        "reasoning": "matched",
    }
    engine = PolicyEngine(parse_bundle(bundle([rule])))
    assert engine.evaluate(shell_call(a={"b": ["c", 1]}, d="e")).effect is Effect.DENY
    assert engine.evaluate(shell_call(a={"b": ["c", 2]}, d="e")).effect is Effect.ALLOW
