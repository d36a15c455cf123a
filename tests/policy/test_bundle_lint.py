"""Bundle lint (``warden policy check``): planted problems are found, near misses are not."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from warden.cli import app
from warden.errors import ConfigError
from warden.policy import parse_bundle
from warden.policytools.lint import lint, load_tool_list, read_tool_list

runner = CliRunner()
HEAD = "warden_bundle: 1\nid: lint\nversion: '1'\n"


def findings(rules: str, **kw: object) -> list[tuple[str, str]]:
    bundle = parse_bundle(HEAD + rules)
    return [(f.code, f.id) for f in lint(bundle, **kw)]  # type: ignore[arg-type]


def test_planted_shadowed_rule_is_found() -> None:
    rules = (
        "rules:\n"
        "  - {id: no-shell, tools: ['shell*'], effect: deny, reasoning: never}\n"
        "  - {id: shell-ls, tools: [shell_ls], when: 'args.cmd == \"ls\"', effect: allow}\n"
        "  - {id: redact, tools: [shell], effect: modify, reasoning: r,"
        " modify: {redactions: [{path: /arguments/x/value}]}}\n"
    )
    assert findings(rules) == [("shadowed", "shell-ls"), ("shadowed", "redact")]
    bundle = parse_bundle(HEAD + rules)
    msg = lint(bundle)[0].message
    assert "rule shell-ls (allow) never decides: rule no-shell (deny, no condition)" in msg


@pytest.mark.parametrize(
    "outer",
    [
        # A condition: not always true.
        "{id: o, tools: ['*'], when: 'args.x == 1', effect: deny, reasoning: r}",
        # A narrower target.
        "{id: o, tools: [read_*], effect: deny, reasoning: r}",
        # Narrower hooks: only the native tool hook, not wrapped MCP.
        "{id: o, hooks: [steps/toolCallRequest], tools: ['*'], effect: deny, reasoning: r}",
        # Case-sensitive outer does not cover a caseless inner.
        "{id: o, tools: ['*'], case_sensitive: true, effect: deny, reasoning: r}",
        # Weaker.
        "{id: o, tools: ['*'], effect: allow}",
    ],
    ids=["condition", "target", "hooks", "case", "weaker"],
)
def test_near_misses_are_not_shadowing(outer: str) -> None:
    ask = "ask: {question: q, approver: {type: human, id: ops}, timeout_seconds: 60}"
    inner = f"{{id: inner, tools: [shell], effect: ask, reasoning: r, {ask}}}"
    rules = f"rules:\n  - {outer}\n  - {inner}\n"
    assert findings(rules) == []


def test_when_true_shadows_and_modify_under_ask_does_not() -> None:
    ask = "ask: {question: q, approver: {type: human, id: ops}, timeout_seconds: 60}"
    rules = (
        "rules:\n"
        f"  - {{id: ask-all, hooks: ['steps/*', 'protocols/MCP/*'], when: 'true', effect: ask,"
        f" reasoning: r, {ask}}}\n"
        "  - {id: redact, tools: [login], effect: modify, reasoning: r,"
        " modify: {redactions: [{path: /arguments/p/value}]}}\n"
        "  - {id: allow-login, tools: [login], effect: allow}\n"
    )
    assert findings(rules) == [("shadowed", "allow-login")]


def test_equal_effect_earlier_rule_makes_later_redundant_unless_it_adds_codes() -> None:
    rules = (
        "rules:\n"
        "  - {id: first, tools: ['*'], effect: deny, reasoning: r, reason_codes: [a]}\n"
        "  - {id: same, tools: [x], effect: deny, reasoning: r, reason_codes: [a]}\n"
        "  - {id: more, tools: [x], effect: deny, reasoning: r, reason_codes: [b]}\n"
    )
    assert findings(rules) == [("shadowed", "same")]


def test_tool_rule_on_hooks_without_a_tool_and_effect_not_permitted() -> None:
    rules = (
        "rules:\n"
        "  - {id: msg-tools, hooks: [steps/userMessage], tools: [send_email], effect: allow}\n"
        "  - {id: mcp-read, hooks: [protocols/MCP/resources/read], tools: ['x'], effect: allow}\n"
        "  - {id: results, hooks: [steps/toolCallResult], tools: [read_file], effect: allow}\n"
        "  - {id: end-ask, hooks: [steps/sessionEnd], effect: deny, reasoning: r}\n"
        "  - {id: any-ask, hooks: ['steps/*'], effect: deny, reasoning: r, when: 'args.x == 1'}\n"
    )
    assert findings(rules) == [
        ("no_tool_on_hook", "msg-tools"),
        ("no_tool_on_hook", "mcp-read"),
        ("effect_not_permitted", "end-ask"),
    ]


def test_tool_patterns_matching_no_listed_tool(tmp_path: Path) -> None:
    rules = (
        "rules:\n"
        "  - {id: fs, tools: [read_file, write_*, 'Move_File'], effect: allow}\n"
        "  - {id: exact, tools: ['*[A-Z]*'], case_sensitive: true, effect: allow}\n"
        "spend:\n"
        "  - {id: c, tools: [pay*], price: '1', currency: USD, budget: team.a}\n"
    )
    tools = ["read_file", "move_file", "list_directory"]
    assert findings(rules, tools=tools) == [
        ("unmatched_tool_pattern", "fs"),
        ("unmatched_tool_pattern", "exact"),
        ("unmatched_tool_pattern", "c"),
    ]
    bundle = parse_bundle(HEAD + rules)
    assert (
        "tool pattern 'write_*' matches none of the 3 listed tools"
        in lint(bundle, tools=tools)[0].message
    )
    assert findings(rules) == []  # no tool list: nothing to compare with


@pytest.mark.parametrize(
    "doc",
    [
        {"tools": [{"name": "a", "inputSchema": {}}, {"name": "b"}]},
        {"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "a"}, {"name": "b"}]}},
        ["a", "b"],
        [{"name": "a"}, {"name": "b"}],
    ],
    ids=["tools-list", "jsonrpc", "names", "objects"],
)
def test_tool_list_shapes(tmp_path: Path, doc: object) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(doc))
    assert load_tool_list(path) == ["a", "b"]


def test_bad_tool_lists_refused(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    for text, why in [
        ("{", "cannot read tool list"),
        ('{"tools": 3}', "MCP tools/list"),
        ('[{"title": "x"}]', "tools[0]: a tool needs a non-empty string name"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=re.escape(why)):
            load_tool_list(path)


def test_charge_without_budget() -> None:
    rules = "rules:\n  - {id: pay, tools: [send_money], effect: allow}\n"
    spend = (
        "spend:\n"
        "  - {id: missing-map, tools: [send_money], amount: args.amount, currency: EUR,"
        " budget_expr: 'data.budgets_by_agent[agent.id]'}\n"
        "  - {id: empty-map, tools: [send_money], amount: args.amount, currency: EUR,"
        " budget_expr: 'data.empty[agent.id]'}\n"
        "  - {id: fixed, tools: [send_money], amount: args.amount, currency: EUR, budget: team.x}\n"
        "  - {id: mapped, tools: [send_money], amount: args.amount, currency: EUR,"
        " budget_expr: 'data.by_agent[agent.id]'}\n"
        "  - {id: computed, tools: [send_money], amount: args.amount, currency: EUR,"
        " budget_expr: 'agent.budgets[0]'}\n"
    )
    data = "data: {empty: {}, by_agent: {a1: team.a, a2: team.gone}}\n"
    text = data + rules + spend
    assert findings(text) == [
        ("charge_without_budget", "missing-map"),
        ("charge_without_budget", "empty-map"),
    ]
    assert findings(text, budgets=["team.a", "team.x"]) == [
        ("charge_without_budget", "missing-map"),
        ("charge_without_budget", "empty-map"),
        ("charge_without_budget", "mapped"),
    ]
    bundle = parse_bundle(HEAD + text)
    last = lint(bundle, budgets=["team.a", "team.x"])[-1].message
    assert last.startswith("charge mapped charges budget 'team.gone', which the budgets file")


def test_cli_check_prints_warnings_and_strict_fails(tmp_path: Path) -> None:
    bundle = tmp_path / "b.yaml"
    bundle.write_text(
        HEAD + "rules:\n"
        "  - {id: no-shell, tools: ['shell*'], effect: deny, reasoning: never}\n"
        "  - {id: shell-ls, tools: [shell_ls], effect: allow}\n"
    )
    tools = tmp_path / "tools.json"
    tools.write_text('{"tools": [{"name": "read_file"}]}')
    res = runner.invoke(app, ["policy", "check", str(bundle), "--tools", str(tools)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("OK lint@1: 2 rules")
    # Findings in bundle order of the rules they name.
    assert [line.split()[1] for line in lines[1:]] == [
        "[unmatched_tool_pattern]",
        "[shadowed]",
        "[unmatched_tool_pattern]",
    ]
    assert lines[2].startswith("  warning [shadowed] rule shell-ls (allow) never decides")
    res = runner.invoke(app, ["policy", "check", str(bundle), "--strict"])
    assert res.exit_code == 1
    res = runner.invoke(app, ["policy", "check", str(bundle), "--tools", str(tmp_path / "no.json")])
    assert res.exit_code == 2 and "cannot read tool list" in res.output


def test_tool_list_names_count_once(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text('{"tools": [{"name": "a"}, {"name": "b"}, {"name": "a"}]}')
    assert load_tool_list(path) == ["a", "b"]
    bundle = parse_bundle(HEAD + "rules:\n  - {id: w, tools: [write_file], effect: allow}\n")
    (finding,) = lint(bundle, tools=["a", "b", "a"])
    assert finding.message.endswith("matches none of the 2 listed tools")


def test_error_responses_and_empty_lists_refused(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    for doc, why in [
        (
            {"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "no such method"}},
            f"{path}: a JSON-RPC error response, not a tool list (error -32601: no such method)",
        ),
        ([], f"{path}: the tool list is empty"),
        ({"tools": []}, f"{path}: the tool list is empty"),
        ({"result": {"tools": []}}, f"{path}: the tool list is empty"),
    ]:
        path.write_text(json.dumps(doc))
        with pytest.raises(ConfigError, match=re.escape(why)):
            load_tool_list(path)
    bundle = tmp_path / "b.yaml"
    bundle.write_text(HEAD + "rules:\n  - {id: w, tools: [write_file], effect: allow}\n")
    res = runner.invoke(app, ["policy", "check", str(bundle), "--tools", str(path)])
    assert res.exit_code == 2 and "the tool list is empty" in res.output


def test_a_page_of_tools_is_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    page = {"tools": [{"name": "read_file"}], "nextCursor": "page-2"}
    path.write_text(json.dumps({"jsonrpc": "2.0", "id": 1, "result": page}))
    listed = read_tool_list(path)
    assert (listed.names, listed.next_cursor) == (["read_file"], "page-2")
    bundle = tmp_path / "b.yaml"
    bundle.write_text(HEAD + "rules:\n  - {id: w, tools: [write_file], effect: allow}\n")
    res = runner.invoke(app, ["policy", "check", str(bundle), "--tools", str(path)])
    assert res.exit_code == 0, res.output
    out = res.output.replace("\n", " ")
    assert 'is one page of a paginated tools/list (nextCursor "page-2")' in out
    path.write_text(json.dumps({"tools": [{"name": "read_file"}]}))
    res = runner.invoke(app, ["policy", "check", str(bundle), "--tools", str(path)])
    assert res.exit_code == 0 and "nextCursor" not in res.output
