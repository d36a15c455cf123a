"""``warden policy check`` and ``warden policy explain``, end to end as subprocesses."""

from __future__ import annotations

import json
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
    )


def explained(*args: str | Path) -> dict[str, Any]:
    """``warden policy explain ARGS --json``'s document (docs/cli-json.md), exit 0."""
    proc = warden("policy", "explain", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def _candidates(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["rule"], c["effect"], c["fired"]) for c in doc["candidates"]]


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


def test_explain_shows_fired_rules_and_verdict() -> None:
    doc = explained(asset("policy/explain_policy.yaml"), asset("policy/request_shell_rm.json"))
    assert (doc["method"], doc["tool"], doc["rules_total"]) == ("steps/toolCallRequest", "shell", 5)
    assert _candidates(doc) == [("tools", "allow", "yes"), ("destructive", "deny", "yes")]
    tools, destructive = doc["candidates"]
    assert tools["detail"] == "no condition"
    assert "type(args[k]) == string && args[k].startsWith('rm ')" in destructive["detail"]
    assert doc["verdict"] == {
        "decision": "deny",
        "reasoning": "Destructive [shell] command.",
        "reason_codes": ["destructive_command"],
        "default_applied": False,
        "fail_closed": False,
    }


def test_explain_rule_that_does_not_fire() -> None:
    doc = explained(asset("policy/explain_policy.yaml"), asset("policy/request_delete_file.json"))
    assert (doc["tool"], doc["rules_total"]) == ("delete_file", 5)
    assert _candidates(doc) == [("tools", "allow", "yes"), ("recursive-delete", "deny", "no")]
    assert doc["candidates"][1]["detail"].endswith("→ False")
    assert (doc["verdict"]["decision"], doc["verdict"]["reasoning"]) == ("allow", "")
    assert doc["verdict"]["reason_codes"] == []


def test_explain_no_candidates_applies_bundle_default() -> None:
    doc = explained(
        asset("policy/bundle_eval_error.yaml"), asset("policy/request_delete_file.json")
    )
    assert (doc["candidates"], doc["rules_total"]) == ([], 2)
    assert (doc["verdict"]["decision"], doc["verdict"]["default_applied"]) == ("allow", True)


def test_explain_default_bundle_on_destructive_command() -> None:
    doc = explained(DEFAULT_POLICY, asset("policy/request_shell_rm.json"))
    assert doc["verdict"]["decision"] == "deny" and doc["verdict"]["reasoning"]


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
    proc = warden("policy", "check", *paths, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is True and len(doc["files"]) == len(paths)
    for got, path in zip(doc["files"], paths, strict=True):
        ref = load_bundle(path).ref
        assert (got["file"], got["ok"]) == (str(path), True)
        assert got["bundle"] == {"id": ref.id, "version": ref.version, "digest": ref.digest}


def test_check_several_files_one_bad() -> None:
    bad = asset("policy/bundle_unknown_hook.yaml")
    proc = warden("policy", "check", DEFAULT_POLICY, bad)
    assert proc.returncode == 2
    assert proc.stdout.startswith("OK warden-default@")
    assert proc.stderr.startswith(f"invalid bundle\n{bad}: rule no-shell: hooks: ")
    assert "unknown hook 'steps/toolcallrequest'" in proc.stderr


# -- policy explain: the server's own request checks --------------------------------------


def _rejection(*args: str | Path) -> tuple[int, str | None, str]:
    """(code, pointer, message) of explain's ``--json`` report of a request the server
    rejects (exit 2)."""
    proc = warden("policy", "explain", *args, "--json")
    assert proc.returncode == 2, proc.stdout
    assert "Traceback" not in proc.stderr
    rejected = json.loads(proc.stdout)["rejected"]
    return rejected["code"], rejected["pointer"], rejected["message"]


def test_explain_unwrapped_arguments_is_the_servers_invalid_params() -> None:
    """Arguments not wrapped in {"value": …}: once a traceback (AttributeError), then a
    wrong `allow`; the server answers -32602, and so must explain (exit 2)."""
    assert _rejection(DEFAULT_POLICY, asset("policy/request_arguments_not_wrapped.json")) == (
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
    code, pointer, message = _rejection(DEFAULT_POLICY, path)

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
    # The table's cells fold at the width: their text is checked through --json
    # (tests/cli/test_cli_json.py::test_policy_explain_json_fail_closed).
    assert f"verdict: deny (fail closed) — {FAIL_CLOSED_REASONING}" in out
    assert "reason codes: evaluation_failed" in out
    assert re.search(r"^evaluation failed: rule transfer-limit: evaluation failed: ", out, re.M)


def test_explain_regex_re2_cannot_compile_is_the_fail_closed_decision(tmp_path: Path) -> None:
    request = json.loads(asset("policy/request_shell_rm.json").read_text())
    request["params"]["payload"]["raw_command"] = "echo echo"
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    doc = explained(asset("policy/bundle_eval_regex_not_re2.yaml"), path)
    assert ("repeated-word", "deny", "error") in _candidates(doc)
    assert (doc["verdict"]["decision"], doc["verdict"]["fail_closed"]) == ("deny", True)
    assert "RE2 cannot compile pattern" in doc["evaluation_failed"]
