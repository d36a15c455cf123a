"""``warden policy check`` and ``warden policy explain``, end to end as subprocesses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import AGENTDOJO_POLICY, DEFAULT_POLICY, ROOT, asset, service_client

from warden.core.guardian import FAIL_CLOSED_REASONING
from warden.errors import ConfigError
from warden.policy import load_bundle
from warden.runtime import Runtime

# bundle_eval_*.yaml are valid at load and fail at evaluation.
REFUSED = sorted(
    p.name for p in asset("policy").glob("bundle_*.yaml") if not p.name.startswith("bundle_eval_")
)


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
        f"default {bundle.default.value}, {bundle.ref.digest}; provenance: off"
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
    assert proc.stderr == (
        "error: Warden would reject this request with JSON-RPC error -32600 (invalid request)\n"
        '  pointer: ""\n'
        '  message: request envelope invalid at /: "jsonrpc" is a required property\n'
    )
    assert proc.stdout == ""


def test_explain_refuses_a_bad_bundle() -> None:
    proc = warden("policy", "explain", asset("policy/bundle_bad_cel.yaml"),
                  asset("policy/request_shell_rm.json"))  # fmt: skip
    assert proc.returncode == 2
    assert "rule big-transfer: when: does not compile" in proc.stderr


# -- policy check on several files ------------------------------------------------------


def test_check_every_example_bundle_at_once() -> None:
    paths = sorted((ROOT / "examples" / "policies").glob("*.yaml"))
    assert len(paths) >= 2
    proc = warden("policy", "check", *paths)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(paths)
    for line, path in zip(lines, paths, strict=True):
        bundle = load_bundle(path)
        assert line.startswith(f"OK {bundle.ref.id}@{bundle.ref.version}: "), line


def test_check_several_files_one_bad() -> None:
    bad = asset("policy/bundle_unknown_hook.yaml")
    proc = warden("policy", "check", DEFAULT_POLICY, bad)
    assert proc.returncode == 2
    assert proc.stdout.startswith("OK warden-default@")
    assert proc.stderr.startswith(f"invalid bundle\n{bad}: rule no-shell: hooks: ")
    assert "unknown hook 'steps/toolcallrequest'" in proc.stderr


# -- policy explain: the server's own request checks --------------------------------------


def _rejection(stderr: str) -> tuple[int, str | None, str]:
    """(code, pointer, message) from explain's report of a request the server rejects."""
    head, *rest = stderr.splitlines()
    code = re.fullmatch(r"error: Warden would reject this request with JSON-RPC error "
                        r"(-\d+) \([a-z ]+\)", head)  # fmt: skip
    assert code is not None, stderr
    fields = dict(line.strip().split(": ", 1) for line in rest)
    pointer = json.loads(fields["pointer"]) if "pointer" in fields else None
    return int(code[1]), pointer, fields["message"]


def test_explain_unwrapped_arguments_is_the_servers_invalid_params() -> None:
    """Arguments not wrapped in {"value": …}: once a traceback (AttributeError), then a
    wrong `allow`; the server answers -32602, and so must explain (exit 2)."""
    proc = warden("policy", "explain", DEFAULT_POLICY,
                  asset("policy/request_arguments_not_wrapped.json"))  # fmt: skip
    assert proc.returncode == 2, proc.stdout
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert _rejection(proc.stderr) == (
        -32602,
        "/params/payload/arguments/cmd",
        'steps/toolCallRequest payload invalid at /arguments/cmd: "rm -rf /" is not of type '
        '"object"',
    )


SERVER_REJECTS = [
    "request_arguments_not_wrapped.json",
    "request_mcp_wrong_method.json",
    "request_mcp_request_with_result.json",
    "request_method_unknown.json",
    "request_not_an_envelope.json",
    "request_truncated_json.json",
]


@pytest.mark.parametrize("name", SERVER_REJECTS)
def test_explain_reports_exactly_what_the_server_answers(
    name: str, make_runtime: Callable[..., Runtime]
) -> None:
    path = asset(f"policy/{name}")
    proc = warden("policy", "explain", DEFAULT_POLICY, path)
    assert proc.returncode == 2, proc.stdout
    assert proc.stdout == ""
    code, pointer, message = _rejection(proc.stderr)

    rt = make_runtime()
    client = service_client(rt)
    client.hello()
    body = path.read_bytes()
    try:
        msg: Any = json.loads(body)
    except ValueError:
        msg = None
    if isinstance(msg, dict) and isinstance(msg.get("params"), dict):
        # A well-formed envelope: send it signed, in a live session, as an agent would.
        answer = client.send(client.envelope(msg["method"], msg["params"]["payload"]))
    else:
        answer = rt.acs.handle(body)
    error = answer["error"]
    assert (code, message) == (error["code"], error["message"])
    assert pointer == error["data"].get("pointer")


def test_explain_missing_request_file() -> None:
    proc = warden("policy", "explain", DEFAULT_POLICY, "/nonexistent/request.json")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: cannot read /nonexistent/request.json: ")
    assert "envelope" not in proc.stderr
    assert proc.stdout == ""


def test_explain_request_file_is_a_directory(tmp_path: Path) -> None:
    proc = warden("policy", "explain", DEFAULT_POLICY, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: cannot read {tmp_path}: ")


def test_explain_condition_error_is_the_fail_closed_decision() -> None:
    """A condition that errors is a decision (a signed deny on the server), not bad input."""
    proc = warden("policy", "explain", asset("policy/bundle_eval_error.yaml"),
                  asset("policy/request_send_money_no_amount.json"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "tool send_money: 1 candidate rules evaluated before the failure, of 2" in out
    assert _row("transfer-limit", "deny", "error").search(out), out
    assert "when `args.amount > 1000` → error: evaluation failed" in out
    assert f"verdict: deny (fail closed) — {FAIL_CLOSED_REASONING}" in out
    assert "reason codes: evaluation_failed" in out
    assert re.search(r"^evaluation failed: rule transfer-limit: evaluation failed: ", out, re.M)


def test_explain_regex_re2_cannot_compile_is_the_fail_closed_decision(tmp_path: Path) -> None:
    request = json.loads(asset("policy/request_shell_rm.json").read_text())
    request["params"]["payload"]["raw_command"] = "echo echo"
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    proc = warden("policy", "explain", asset("policy/bundle_eval_regex_not_re2.yaml"), path)
    assert proc.returncode == 0, proc.stderr
    assert _row("repeated-word", "deny", "error").search(proc.stdout), proc.stdout
    assert "verdict: deny (fail closed)" in proc.stdout
    assert "RE2 cannot compile pattern" in proc.stdout
