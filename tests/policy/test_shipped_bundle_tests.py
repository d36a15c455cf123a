"""Every shipped bundle has policy tests, they pass, they fire every rule, and the
bundles lint clean; a change to a bundle that changes a decision fails its tests.

The shipped bundles are examples/policies/*.yaml and src/warden/bundles/default.yaml
(the same file as examples/policies/default.yaml; its tests are that file's).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from warden.cli import app
from warden.policytools import discover_tests

EXAMPLES = ROOT / "examples" / "policies"
SHIPPED = sorted(EXAMPLES.glob("*.yaml"))
PACKAGED = ROOT / "src" / "warden" / "bundles" / "default.yaml"
BUDGETS = ROOT / "examples" / "budgets" / "agentdojo.yaml"

runner = CliRunner()


def warden(*args: str | Path) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def test_every_shipped_bundle_has_tests() -> None:
    assert len(SHIPPED) >= 4
    for bundle in SHIPPED:
        assert discover_tests(bundle) == [EXAMPLES / "tests" / bundle.name], bundle


@pytest.mark.parametrize(
    ("bundle", "tests"),
    [*((b, None) for b in SHIPPED), (PACKAGED, EXAMPLES / "tests" / "default.yaml")],
    ids=[*(b.stem for b in SHIPPED), "packaged-default"],
)
def test_shipped_bundle_tests_pass_and_cover_every_rule(bundle: Path, tests: Path | None) -> None:
    args = [bundle, *([tests] if tests else []), "--require-coverage", "--json"]
    code, out = warden("policy", "test", *args)
    doc = json.loads(out)
    failed = [(r["name"], r["failures"]) for r in doc["results"] if not r["passed"]]
    assert (code, failed, doc["coverage"]["unfired"]) == (0, [], [])
    assert doc["cases"] == doc["passed"] >= 8


def test_shipped_bundles_lint_clean() -> None:
    code, out = warden("policy", "check", *SHIPPED, PACKAGED, "--budgets", BUDGETS, "--strict")
    assert code == 0, out
    assert "warning" not in out


def _copy(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A copy of a shipped bundle and its tests, laid out as shipped (tests/ beside it)."""
    (tmp_path / "tests").mkdir()
    bundle = shutil.copy(EXAMPLES / name, tmp_path / name)
    shutil.copy(EXAMPLES / "tests" / name, tmp_path / "tests" / name)
    return Path(bundle), tmp_path / "tests" / name


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


@pytest.mark.parametrize(
    ("name", "old", "new", "failing"),
    [
        # A threshold moved: the 1500 spend no longer asks.
        (
            "default.yaml",
            "when: double(args.amount) > 1000.0",
            "when: double(args.amount) > 2000.0",
            ["a spend over 1000 asks finance"],
        ),
        # A pattern dropped from the destructive list: rm -rf over MCP and as argv pass.
        (
            "default.yaml",
            "    - '\\brm\\b[^;&|\\n]*(?:[\\s\"'',]|\\\\[tnr])-[a-zA-Z]*(?:[rR][a-zA-Z]*f|"
            "f[a-zA-Z]*[rR])'\n",
            "",
            ["rm -rf as an argument is denied", "rm -rf over wrapped MCP is denied"],
        ),
        # A contact removed from the data: mail to her now asks.
        (
            "agentdojo.yaml",
            "    - emma.johnson@bluesparrowtech.com\n",
            "",
            ["mail to a contact is allowed", "creating an event with contacts is allowed"],
        ),
        # The writable root moved: writing in the old one is denied.
        (
            "mcp.yaml",
            'writable_roots: ["/srv/agent-workspace/"]',
            'writable_roots: ["/srv/other/"]',
            [
                "writing inside the writable root is allowed",
                "a move inside the root asks an operator",
            ],
        ),
        # A gate switched off: the tainted payee no longer meets the sink rule.
        (
            "agentdojo-provenance.yaml",
            "    sinks: {enabled: true, on_untrusted: ask}",
            "    sinks: {enabled: false, on_untrusted: ask}",
            [
                "a payee read from an untrusted file is asked, citing its source "
                "(CaMeL, FIDES, AARM, sink)",
                "an argument naming a recorded id keeps the recorded label",
            ],
        ),
    ],
    ids=["threshold", "pattern", "data", "roots", "gate"],
)
def test_a_bundle_change_fails_its_tests(
    tmp_path: Path, name: str, old: str, new: str, failing: list[str]
) -> None:
    bundle, _ = _copy(tmp_path, name)
    code, _ = warden("policy", "test", bundle)
    assert code == 0  # the copy passes as shipped
    _edit(bundle, old, new)
    code, out = warden("policy", "test", bundle, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False
    assert [r["name"] for r in doc["results"] if not r["passed"]] == failing


def test_a_removed_rule_fails_the_tests_and_coverage_names_an_unfired_rule(
    tmp_path: Path,
) -> None:
    bundle, tests = _copy(tmp_path, "mcp.yaml")
    text = bundle.read_text(encoding="utf-8")
    # Drop the time rule: its case falls to the default deny.
    start = text.index("  - id: time\n")
    end = text.index("  - id: git-read\n")
    bundle.write_text(text[:start] + text[end:], encoding="utf-8")
    # The case still names the rule: the test file no longer fits the bundle (exit 2).
    code, out = warden("policy", "test", bundle)
    assert code == 2, out
    assert "case 'the time server is allowed': expect.rules: 'time' is not a rule" in out.replace(
        "\n", ""
    )
    # Without the rule expectation, the case runs and fails on the decision.
    _edit(tests, "expect: {decision: allow, rules: [time]}", "expect: {decision: allow}")
    code, out = warden("policy", "test", bundle)
    assert code == 1
    assert "FAIL" in out and "the time server is allowed" in out
    assert re.search(r"decision: expected allow, got deny \(no rule fired\)", out), out
    # And a rule no case fires is reported (and fails --require-coverage).
    _edit(tests, "expect: {decision: allow}", "expect: {decision: allow, rules: [time]}")
    _edit(tests, "    tool: git_status\n", "    tool: get_current_time\n")
    bundle.write_text(text, encoding="utf-8")
    code, out = warden("policy", "test", bundle, "--json")
    doc = json.loads(out)
    assert doc["coverage"]["unfired"] == ["git-read"]
    assert doc["coverage"]["by_rule"]["git-read"] == 0
    assert code == 1  # the git_status case now expects git-read and gets time
    assert warden("policy", "test", bundle, "--require-coverage")[0] == 1
