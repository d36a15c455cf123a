"""Every reporting command's ``--json`` (issue 14 item 11), and human output that does not
depend on the terminal's width.

Each command runs as an operator's script would: a subprocess whose stdout is a pipe, with a
narrow ``COLUMNS`` (40) so that anything width-dependent would break. Its stdout is parsed
with ``json.loads`` as one document and validated against the shipped schema in
``warden/schemas/cli/`` (python-jsonschema, not the runtime's validator), failures included.
Database-backed commands run on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    DEFAULT_POLICY,
    ROOT,
    TEST_IKM,
    Server,
    asset,
    service_client,
    start_server,
    write_key,
)
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource
from sqlalchemy import create_engine, text

from warden.core.guardian import FAIL_CLOSED_REASONING
from warden.ledger.verify import read_jsonl, verify_records
from warden.runtime import Runtime
from warden.server.approvals_api import ApprovalTask
from warden.settings import Settings
from warden.store import open_store

NARROW = "40"
PROVENANCE_POLICY = ROOT / "examples" / "policies" / "agentdojo-provenance.yaml"


#: The schemas in the source tree (as conftest's SCHEMAS); the test below checks the
#: installed package serves the same files.
CLI_SCHEMAS = ROOT / "src" / "warden" / "schemas" / "cli"


def _registry() -> Registry:
    docs = [json.loads(f.read_text(encoding="utf-8")) for f in sorted(CLI_SCHEMAS.glob("*.json"))]
    return Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in docs)


REGISTRY = _registry()


def check_shape(command: str, doc: Any) -> Any:
    """Validate ``doc`` against ``schemas/cli/<command>.json``; return it."""
    schema = REGISTRY.contents(f"https://warden.dev/schemas/cli/{command}.json")
    Draft202012Validator(schema, registry=REGISTRY, format_checker=FormatChecker()).validate(doc)
    return doc


def warden(
    *args: str | Path, columns: str = NARROW, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m warden ARGS`` with stdout a pipe (not a terminal) and COLUMNS narrow."""
    return subprocess.run(
        [sys.executable, "-m", "warden", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": columns, **(env or {})},
    )


def json_of(proc: subprocess.CompletedProcess[str], command: str) -> Any:
    """The single JSON document on stdout, shape-checked."""
    return check_shape(command, json.loads(proc.stdout))


def assert_headers_whole(out: str, *headers: str) -> None:
    """Every header printed in full on one line, and nothing cut with an ellipsis."""
    assert "…" not in out, out
    header_line = next(line for line in out.splitlines() if line.startswith("┃"))
    assert [cell.strip() for cell in header_line.split("┃")[1:-1]] == list(headers), out


def column_text(out: str, index: int) -> str:
    """Column ``index`` (0-based) of a printed table, its folded cells joined."""
    rows = [line.split("│") for line in out.splitlines() if line.startswith("│")]
    return "".join(row[index + 1].strip() for row in rows)


def test_every_schema_is_valid_and_listed() -> None:
    from warden.cli_output import cli_schema

    names = sorted(f.name for f in CLI_SCHEMAS.glob("*.json"))
    assert names == [
        "approvals-list.json",
        "doctor.json",
        "export.json",
        "keys-list.json",
        "log-check.json",
        "policy-activate.json",
        "policy-check.json",
        "policy-explain.json",
        "policy-test.json",
        "replay-agentdojo.json",
        "replay-efficacy.json",
        "verify.json",
        "whatif.json",
        "witness.json",
    ]
    docs = (ROOT / "docs" / "cli-json.md").read_text(encoding="utf-8")
    for name in names:
        schema = REGISTRY.contents(f"https://warden.dev/schemas/cli/{name}")
        Draft202012Validator.check_schema(schema)
        assert cli_schema(name.removesuffix(".json")) == schema  # shipped as package data
        assert f"schemas/cli/{name}" in docs, name


# -- verify and export ------------------------------------------------------------------


def _two_sessions(rt: Runtime) -> tuple[str, str]:
    rt.acs.approval_gate = None
    a = service_client(rt, agent_id="agent-a")
    b = service_client(rt, agent_id="agent-b")
    for r in (
        a.hello(),
        a.call("steps/sessionStart", {}),
        a.tool_call("read_file", {"path": "/home/u/notes.txt"}),
        a.tool_call("shell", {"cmd": "rm -rf /"}),
        b.hello(),
        b.call("steps/sessionStart", {}),
        b.tool_call("read_file", {"path": "/etc/hosts"}),
    ):
        assert "result" in r, r
    return a.session_id, b.session_id


@pytest.fixture
def chains(tmp_path: Path, database_url: str) -> Iterator[tuple[Path, str, str, str]]:
    """(data dir, database URL, session A, session B): two real sessions written by a
    runtime on each backend, closed so only the CLI reads the database."""
    data = tmp_path / "data"
    write_key(data / "ikm.key")
    rt = Runtime.start(
        Settings(
            data_dir=data,
            policy=DEFAULT_POLICY,
            key_file=data / "ikm.key",
            database_url=database_url,
        )  # fmt: skip
    )
    try:
        sid_a, sid_b = _two_sessions(rt)
    finally:
        rt.close()
    yield data, database_url, sid_a, sid_b


def test_verify_json_on_a_database(chains: tuple[Path, str, str, str]) -> None:
    data, url, sid_a, sid_b = chains
    proc = warden("verify", "--data-dir", data, "--database-url", url, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc, "verify")
    assert doc["ok"] is True and doc["signatures"] is True
    store = open_store(url, migrate=False)
    try:
        report = verify_records(store.iter_records(), ikm=TEST_IKM)
    finally:
        store.close()
    assert {sid_a, sid_b} <= set(doc["heads"]) and doc["heads"] == report.heads
    assert doc["entries"] == report.entries >= 5  # 3 + 2 steps (hello is not chained)
    assert (doc["sessions"], doc["signatures_checked"]) == (
        report.sessions,
        report.signatures_checked,
    )
    assert "postgresql" not in url or "password" not in doc["source"]


def test_verify_json_names_the_first_bad_entry(chains: tuple[Path, str, str, str]) -> None:
    data, url, sid_a, _ = chains
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            changed = conn.execute(
                text(
                    'UPDATE entries SET entry = replace(entry, \'"decision":"deny"\', '
                    '\'"decision":"allow"\') WHERE session_id = :s AND seq = 2'
                ),
                {"s": sid_a},
            ).rowcount
    finally:
        engine.dispose()
    assert changed == 1
    proc = warden("verify", "--data-dir", data, "--database-url", url, "--json")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    doc = json_of(proc, "verify")
    assert doc["ok"] is False
    assert doc["failure"]["reason"] == "record_hash_mismatch"
    assert (doc["failure"]["session_id"], doc["failure"]["seq"]) == (sid_a, 2)
    assert doc["failure"]["message"].startswith(f"session {sid_a} entry seq 2: ")


def test_verify_json_on_export_files(key_file: Path) -> None:
    clean = warden("verify", asset("ledger/chain_clean.jsonl"), "--key-file", key_file, "--json")
    assert clean.returncode == 0, clean.stderr
    doc = json_of(clean, "verify")
    report = verify_records(read_jsonl(asset("ledger/chain_clean.jsonl")), ikm=TEST_IKM)
    assert (doc["sessions"], doc["entries"], doc["signatures_checked"]) == (2, 9, 12)
    assert doc["heads"] == report.heads

    bad = warden("verify", asset("ledger/chain_entry_edited.jsonl"), "--no-signatures", "--json")
    assert bad.returncode == 1
    failure = json_of(bad, "verify")["failure"]
    assert failure["reason"] == "record_hash_mismatch" and failure["seq"] == 2

    # Not a report: nothing on stdout, the reason on stderr, exit 2 as before.
    missing = warden("verify", asset("ledger/chain_clean.jsonl"), "--key-file",
                     key_file.parent / "none.key", "--json")  # fmt: skip
    assert (missing.returncode, missing.stdout) == (2, "")
    assert "does not exist" in missing.stderr


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    return write_key(tmp_path / "keys" / "ikm.key")


def test_export_json_summary(chains: tuple[Path, str, str, str], tmp_path: Path) -> None:
    data, url, sid_a, _ = chains
    out = tmp_path / "one.jsonl"
    db = ["--data-dir", str(data), "--database-url", url]
    proc = warden("export", *db, "--session", sid_a, "--out", out, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc, "export")
    lines = out.read_text(encoding="utf-8").splitlines()
    assert doc == {"ok": True, "out": str(out), "records": len(lines), "sessions": 1}
    assert json.loads(lines[-1])["kind"] == "manifest"
    # stdout carries the export itself when there is no --out: --json is refused there.
    refused = warden("export", *db, "--json")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "--json needs --out" in refused.stderr


# -- policy check and explain ---------------------------------------------------------------


def test_policy_check_json() -> None:
    bad = asset("policy/bundle_empty_rules.yaml")
    proc = warden("policy", "check", DEFAULT_POLICY, bad, "--json")
    assert proc.returncode == 2, proc.stderr
    doc = json_of(proc, "policy-check")
    assert doc["ok"] is False
    good, refused = doc["files"]
    assert good["ok"] is True and good["file"] == str(DEFAULT_POLICY)
    assert good["bundle"]["id"] == "warden-default" and good["provenance"] is None
    assert refused["ok"] is False and refused["file"] == str(bad) and refused["error"]

    on = warden("policy", "check", PROVENANCE_POLICY,
                "--json")  # fmt: skip
    assert on.returncode == 0, on.stderr
    provenance = json_of(on, "policy-check")["files"][0]["provenance"]
    assert provenance["gates"] and provenance["unknown_trust"] in ("trusted", "untrusted")


def test_policy_check_json_lint_findings(tmp_path: Path) -> None:
    bundle = tmp_path / "b.yaml"
    bundle.write_text(
        "warden_bundle: 1\nid: b\nversion: '1'\nrules:\n"
        "  - {id: all, tools: ['*'], effect: deny, reasoning: never}\n"
        "  - {id: reads, tools: [read_file], effect: allow}\n",
        encoding="utf-8",
    )
    proc = warden("policy", "check", bundle, "--json", "--strict")
    assert proc.returncode == 1, proc.stderr
    doc = json_of(proc, "policy-check")
    # ok goes with the exit code: a warning under --strict is exit 1, so ok is false.
    assert (doc["ok"], doc["warnings"], doc["files"][0]["ok"]) == (False, 1, True)
    lenient = warden("policy", "check", bundle, "--json")
    assert lenient.returncode == 0, lenient.stderr
    assert json_of(lenient, "policy-check")["ok"] is True
    assert [(f["code"], f["kind"], f["id"]) for f in doc["files"][0]["lint"]] == [
        ("shadowed", "rule", "reads")
    ]


def test_policy_test_json_pass_and_fail(tmp_path: Path) -> None:
    proc = warden("policy", "test", DEFAULT_POLICY, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc, "policy-test")
    assert doc["ok"] is True and doc["failed"] == 0 and doc["cases"] == doc["passed"] > 0
    assert doc["coverage"]["unfired"] == [] and doc["bundle"]["id"] == "warden-default"
    tests = tmp_path / "t.yaml"
    tests.write_text(
        "warden_policy_tests: 1\ncases:\n"
        "  - {name: wrong, tool: shell, args: {cmd: 'rm -rf /'}, expect: {decision: allow}}\n"
        "  - {name: refused, hook: steps/toolCallRequest, payload: {}, expect: {decision: deny}}\n",
        encoding="utf-8",
    )
    proc = warden("policy", "test", DEFAULT_POLICY, tests, "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json_of(proc, "policy-test")
    wrong, refused = doc["results"]
    assert wrong["got"]["decision"] == "deny" and wrong["failures"][0].startswith(
        "decision: expected allow, got deny"
    )
    assert refused["got"]["decision"] is None
    assert refused["got"]["error"]["name"] == "invalid_params"
    assert "ask-before-delete" in doc["coverage"]["unfired"]


def test_policy_test_json_ok_false_when_coverage_is_required(tmp_path: Path) -> None:
    bundle = tmp_path / "b.yaml"
    bundle.write_text(
        "warden_bundle: 1\nid: b\nversion: '1'\nrules:\n"
        "  - {id: reads, tools: [read_file], effect: allow}\n"
        "  - {id: writes, tools: [write_file], effect: deny, reasoning: never}\n",
        encoding="utf-8",
    )
    tests = tmp_path / "t.yaml"
    tests.write_text(
        "warden_policy_tests: 1\ncases:\n"
        "  - {name: read, tool: read_file, args: {path: /x}, expect: {decision: allow}}\n",
        encoding="utf-8",
    )
    proc = warden("policy", "test", bundle, tests, "--json", "--require-coverage")
    assert proc.returncode == 1, proc.stderr
    doc = json_of(proc, "policy-test")
    assert (doc["ok"], doc["failed"], doc["coverage"]["unfired"]) == (False, 0, ["writes"])
    lenient = warden("policy", "test", bundle, tests, "--json")
    assert lenient.returncode == 0, lenient.stderr
    assert json_of(lenient, "policy-test")["ok"] is True


def test_policy_explain_json_fired_rules_and_verdict() -> None:
    proc = warden("policy", "explain", asset("policy/explain_policy.yaml"),
                  asset("policy/request_shell_rm.json"), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc, "policy-explain")
    assert (doc["method"], doc["tool"], doc["rules_total"]) == ("steps/toolCallRequest", "shell", 5)
    assert doc["tool_matched_as"] == "shell"
    assert [(c["rule"], c["effect"], c["fired"]) for c in doc["candidates"]] == [
        ("tools", "allow", "yes"),
        ("destructive", "deny", "yes"),
    ]
    assert doc["verdict"]["decision"] == "deny"
    assert doc["verdict"]["reason_codes"] == ["destructive_command"]
    assert doc["verdict"]["fail_closed"] is False and doc["evaluation_failed"] is None


def test_policy_explain_json_fail_closed() -> None:
    proc = warden("policy", "explain", asset("policy/bundle_eval_error.yaml"),
                  asset("policy/request_send_money_no_amount.json"), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc, "policy-explain")
    assert doc["verdict"]["decision"] == "deny" and doc["verdict"]["fail_closed"] is True
    assert doc["verdict"]["reasoning"] == FAIL_CLOSED_REASONING
    assert doc["verdict"]["reason_codes"] == ["evaluation_failed"]
    assert doc["evaluation_failed"].startswith("rule transfer-limit: evaluation failed: ")
    assert [(c["rule"], c["fired"]) for c in doc["candidates"]] == [("transfer-limit", "error")]
    assert doc["candidates"][0]["detail"].startswith("when `args.amount > 1000` → error: ")


def test_policy_explain_json_rejected_request() -> None:
    proc = warden("policy", "explain", DEFAULT_POLICY,
                  asset("policy/request_not_an_envelope.json"), "--json")  # fmt: skip
    assert proc.returncode == 2
    doc = json_of(proc, "policy-explain")
    assert doc == {
        "ok": False,
        "rejected": {
            "code": -32600,
            "name": "invalid_request",
            "pointer": "",
            "message": 'request envelope invalid at /: "jsonrpc" is a required property',
        },
    }


# -- keys and approvals ---------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "srv")
    yield srv
    srv.stop()


def _key(srv: Server, principal: str, role: str, *groups: str) -> str:
    flags = [x for g in groups for x in ("--group", g)]
    made = warden("keys", "create", "--principal", principal, "--role", role, *flags,
                  "--json", "--data-dir", srv.data_dir)  # fmt: skip
    assert made.returncode == 0, made.stderr
    token: str = json.loads(made.stdout)["token"]
    return token


def test_keys_and_approvals_list_json_and_narrow_tables(server: Server) -> None:
    alice = _key(server, "alice@example.com", "approver", "operators")
    listed = warden("keys", "list", "--json", "--data-dir", server.data_dir)
    assert listed.returncode == 0, listed.stderr
    keys = json_of(listed, "keys-list")
    assert [(k["principal"], k["role"]) for k in keys][-1] == ("alice@example.com", "approver")

    human = warden("keys", "list", "--data-dir", server.data_dir)
    assert human.returncode == 0, human.stderr
    assert_headers_whole(human.stdout, "key_id", "principal", "role", "groups", "created_at",
                         "status")  # fmt: skip

    agent = server.client(agent_id="agent-cli")
    agent.hello()
    r = agent.tool_call("delete_file", {"path": "/srv/old"})["result"]
    assert r["decision"] == "ask"
    env = {"WARDEN_TOKEN": alice}
    tasks = warden("approvals", "list", "--url", server.url, "--json", env=env)
    assert tasks.returncode == 0, tasks.stderr
    data = json_of(tasks, "approvals-list")
    assert [t["id"] for t in data["tasks"]] == [r["ask_details"]["task_id"]]
    assert (data["count"], data["truncated"]) == (1, False)
    # The schema requires every field the server's task model declares.
    required = set(REGISTRY.contents("https://warden.dev/schemas/cli/approvals-list.json")
                   ["properties"]["tasks"]["items"]["required"])  # fmt: skip
    assert required == {n for n, f in ApprovalTask.model_fields.items() if f.is_required()}

    table = warden("approvals", "list", "--url", server.url, env=env)
    assert table.returncode == 0, table.stderr
    assert_headers_whole(table.stdout, "task", "state", "action", "requester", "group",
                         "approvals", "left")  # fmt: skip
    # The task id is never folded (it is copied into `approvals approve`): one line whole.
    assert column_text(table.stdout, 0) == r["ask_details"]["task_id"]
    assert any(r["ask_details"]["task_id"] in line for line in table.stdout.splitlines())


# -- human output does not depend on the width --------------------------------------------


def test_human_verify_line_and_heads_survive_a_narrow_pipe(key_file: Path) -> None:
    path = asset("ledger/chain_clean.jsonl")
    proc = warden("verify", path, "--key-file", key_file, columns="40")
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first == f"OK {path}: 2 sessions, 9 entries, 12 signatures checked"
    assert_headers_whole(proc.stdout, "session", "chain head")
    heads = verify_records(read_jsonl(path), ikm=TEST_IKM).heads
    # Folded, not cut: each head's hex is all there, read down its column.
    assert column_text(proc.stdout, 0) == "".join(heads)
    assert column_text(proc.stdout, 1) == "".join(heads.values())


@pytest.mark.parametrize("columns", ["40", "80", "1000"])
def test_human_policy_output_is_the_same_line_at_any_width(columns: str) -> None:
    check = warden("policy", "check", DEFAULT_POLICY, columns=columns)
    assert check.returncode == 0, check.stderr
    assert len(check.stdout.splitlines()) == 1 and check.stdout.startswith("OK warden-default@")
    explain = warden("policy", "explain", asset("policy/explain_policy.yaml"),
                     asset("policy/request_shell_rm.json"), columns=columns)  # fmt: skip
    assert explain.returncode == 0, explain.stderr
    lines = explain.stdout.splitlines()
    assert lines[0] == "method steps/toolCallRequest, tool shell: 2 candidate rules of 5"
    assert "verdict: deny — Destructive [shell] command." in lines
    assert_headers_whole(explain.stdout, "rule", "effect", "fired", "why")


def test_table_wider_than_the_console_keeps_its_headers() -> None:
    """Headers that need more than the console's width widen the table (the terminal
    wraps it) instead of being cut to ``tas…``."""
    from io import StringIO

    from rich.console import Console

    from warden.cli_output import print_table, table

    console = Console(file=StringIO(), width=20)
    t = table("task", "state", "requester", "approvals", "left")
    t.add_row("task_0123456789abcdef", "pending", "agent-x", "0/1", "9 min")
    print_table(console, t)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert_headers_whole(out, "task", "state", "requester", "approvals", "left")
    assert column_text(out, 0) == "task_0123456789abcdef"
    assert max(len(line) for line in out.splitlines()) > 20


@pytest.mark.parametrize("width", [60, 80, 100])
def test_a_column_kept_whole_never_folds_the_others_do(width: int) -> None:
    """``approvals list`` at 80 columns folded its 38-character task id over two lines,
    which then could not be copied into ``approvals approve``."""
    from io import StringIO

    from rich.console import Console

    from warden.cli_output import print_table, table

    tid = "task_01JF3K2M9Q8R7S6T5V4W3X2Y1Z0ABCDEFG"[:38]
    console = Console(file=StringIO(), width=width)
    t = table("task", "state", "action", "requester", "group", "approvals", "left",
              whole=("task",))  # fmt: skip
    t.add_row(tid, "pending", "delete_file_recursively", "agent-with-a-long-name",
              "operators-and-friends", "0/1", "59 min")  # fmt: skip
    print_table(console, t)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert any(tid in line for line in out.splitlines()), out
    assert_headers_whole(out, "task", "state", "action", "requester", "group", "approvals",
                         "left")  # fmt: skip
    assert column_text(out, 2) == "delete_file_recursively"
    assert column_text(out, 3) == "agent-with-a-long-name"
    # Short values keep their rule (never folded); only when even that does not fit is
    # the table wider than the console.
    assert "│ pending │" in out and "│ 59 min │" in out, out


# -- replay -------------------------------------------------------------------------------------


def test_replay_efficacy_json(tmp_path: Path) -> None:
    proc = warden("replay", "agentdojo", "--efficacy", "--bundle",
                  PROVENANCE_POLICY, "--suite",
                  "banking", "--user-tasks", "1", "--paradigm", "combined", "--mode",
                  "client", "--json", env={"TMPDIR": str(tmp_path)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc, "replay-efficacy")
    [config] = doc["configurations"]
    assert (config["paradigm"], config["mode"]) == ("combined", "client")
    assert set(config["suites"]) == {"banking"}
    assert config["all"] == config["suites"]["banking"]
    assert config["all"]["benign_tasks"] == 1 and config["all"]["pairs"] == 9
    assert config["bundle"]["id"] == "agentdojo-provenance"
    assert config["rates"]["attack_success"] == config["all"].get("attack_success", 0) / 9
    assert "not an LLM agent run" in doc["note"]
    # Progress went to stderr, not into the document.
    assert "banking: 1 user tasks, 9 attacked pairs" in proc.stderr
