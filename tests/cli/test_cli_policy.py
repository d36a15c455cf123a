"""``warden policy check`` and ``warden policy explain``, end to end as subprocesses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import AGENTDOJO_POLICY, DEFAULT_POLICY, asset

from warden.errors import ConfigError
from warden.policy import load_bundle

REFUSED = sorted(p.name for p in asset("policy").glob("bundle_*.yaml"))
REFUSED.remove("bundle_eval_error.yaml")  # valid at load; fails at evaluation


def warden(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warden", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "1000"},
    )


@pytest.mark.parametrize("path", [DEFAULT_POLICY, AGENTDOJO_POLICY], ids=["default", "agentdojo"])
def test_check_shipped_bundle(path: Path) -> None:
    bundle = load_bundle(path)
    proc = warden("policy", "check", path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        f"OK {bundle.ref.id}@{bundle.ref.version}: {len(bundle.rules)} rules, "
        f"default {bundle.default.value}, {bundle.ref.digest}"
    )


@pytest.mark.parametrize("name", REFUSED)
def test_check_refuses_bad_bundle_with_every_problem(name: str) -> None:
    path = asset(f"policy/{name}")
    with pytest.raises(ConfigError) as info:
        load_bundle(path)
    proc = warden("policy", "check", path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("invalid bundle\n")
    # Printed verbatim: no line lost, no [bracketed] text eaten as console markup.
    for line in info.value.message.splitlines():
        assert line.rstrip() in proc.stderr, line


def test_check_missing_file() -> None:
    proc = warden("policy", "check", "/nonexistent/bundle.yaml")
    assert proc.returncode == 2
    assert "/nonexistent/bundle.yaml: cannot read bundle" in proc.stderr


def _row(rule_id: str, effect: str, fired: str) -> re.Pattern[str]:
    return re.compile(rf"│ {re.escape(rule_id)}\s+│ {effect}\s+│ {fired}\s+│")


def test_explain_shows_fired_rules_and_verdict() -> None:
    proc = warden("policy", "explain", asset("policy/explain_policy.yaml"),
                  asset("policy/request_shell_rm.json"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "method steps/toolCallRequest, tool shell: 2 candidate rules of 5" in out
    assert _row("tools", "allow", "yes").search(out)
    assert _row("destructive", "deny", "yes").search(out)
    for absent in ("sessions", "recursive-delete", "payments"):
        assert f"│ {absent} " not in out
    assert "no condition" in out
    assert "type(args[k]) == string && args[k].startsWith('rm ')" in out
    assert "verdict: deny — Destructive [shell] command." in out
    assert "reason codes: destructive_command" in out


def test_explain_rule_that_does_not_fire() -> None:
    proc = warden("policy", "explain", asset("policy/explain_policy.yaml"),
                  asset("policy/request_delete_file.json"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "tool delete_file: 2 candidate rules of 5" in out
    assert _row("tools", "allow", "yes").search(out)
    assert _row("recursive-delete", "deny", "no").search(out)
    assert "→ False" in out
    assert re.search(r"^verdict: allow$", out, re.M)
    assert "reason codes" not in out


def test_explain_no_candidates_applies_bundle_default() -> None:
    proc = warden("policy", "explain", asset("policy/bundle_eval_error.yaml"),
                  asset("policy/request_delete_file.json"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "0 candidate rules of 2" in proc.stdout
    assert "verdict: allow (default)" in proc.stdout


def test_explain_default_bundle_on_destructive_command() -> None:
    proc = warden("policy", "explain", DEFAULT_POLICY, asset("policy/request_shell_rm.json"))
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^verdict: deny — ", proc.stdout, re.M)


def test_explain_refuses_a_non_envelope() -> None:
    proc = warden("policy", "explain", asset("policy/explain_policy.yaml"),
                  asset("policy/request_not_an_envelope.json"))  # fmt: skip
    assert proc.returncode == 2
    assert "not an ACS request envelope" in proc.stderr
    assert proc.stdout == ""


def test_explain_refuses_a_bad_bundle() -> None:
    proc = warden("policy", "explain", asset("policy/bundle_bad_cel.yaml"),
                  asset("policy/request_shell_rm.json"))  # fmt: skip
    assert proc.returncode == 2
    assert "rule big-transfer: when: does not compile" in proc.stderr
