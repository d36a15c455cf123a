"""AgentDojo v1.2 replayed end to end: a real `warden serve`, the `warden replay agentdojo`
CLI over HTTP, then `warden verify` on the database. The decision counts are pinned: a
change in the bundle, the loader, the engine or the spend gate shows up here. Bank
transfers are governed by the budgets of examples/budgets/agentdojo.yaml."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import AGENTDOJO_POLICY, ROOT, Server, start_server

from warden.replay.agentdojo_tasks import load_task_runs

AGENTDOJO_BUDGETS = ROOT / "examples" / "budgets" / "agentdojo.yaml"

#: The counts of `warden replay agentdojo --json`, in the order of PINNED's tuples.
COUNTS = ("tasks", "calls", "allow", "warn", "modify", "ask", "defer", "deny", "budget", "errors")
#: suite → (tasks, calls, allow, warn, modify, ask, defer, deny, budget, errors);
#: budget = the denies with reason code budget_exceeded (counted in deny too).
PINNED = {
    "banking": (25, 45, 23, 0, 0, 21, 0, 1, 1, 0),
    "slack": (26, 111, 69, 19, 0, 23, 0, 0, 0, 0),
    "travel": (27, 136, 127, 2, 0, 7, 0, 0, 0, 0),
    "workspace": (54, 94, 74, 0, 0, 20, 0, 0, 0, 0),
    "all": (132, 386, 293, 21, 0, 71, 0, 1, 1, 0),
}
#: The transfers the rules allow, in replay order (EUR): 4 and 10 are held and settled,
#: 50 no longer fits the 50 EUR agent budget (budget_exceeded), the last 10 does.
ALLOWED_TRANSFERS = [("4.0", "held"), ("10.0", "held"), ("50.0", "refused"), ("10.0", "held")]


@pytest.fixture(scope="module")
def dojo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("dojo") / "srv"
    srv = start_server(data, AGENTDOJO_POLICY, "--budgets", str(AGENTDOJO_BUDGETS))
    # The replay signs as the registered demo agent (the bundle charges its transfers to
    # the banking budget by its verified id); registered here as the quick start would.
    try:
        (data / "agents").mkdir(exist_ok=True)  # --key-out writes into an existing folder only
        added = subprocess.run(
            [sys.executable, "-m", "warden", "agents", "add", "demo-agent"]
            + ["--owner", "demo-owner", "--key-out", str(data / "agents" / "demo-agent.key")]
            + ["--data-dir", str(data)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert added.returncode == 0, added.stderr
        yield srv
    finally:
        srv.stop()  # also when the set-up failed: a leaked server fails a later test


def test_ground_truth_counts() -> None:
    runs = list(load_task_runs("v1.2"))
    assert sum(r.kind == "user" for r in runs) == 97
    assert sum(r.kind == "injection" for r in runs) == 35
    assert sum(len(r.steps) for r in runs) == 386


def test_replay_all_suites_then_verify(dojo_server: Server) -> None:
    data = dojo_server.data_dir
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "warden",
            "replay",
            "agentdojo",
            "--url",
            dojo_server.acs_url,
            "--key-file",
            str(data / "ikm.key"),
            "--data-dir",
            str(data),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)  # the final summary (docs/cli-json.md); progress on stderr
    rows = {suite: tuple(c[k] for k in COUNTS) for suite, c in doc["suites"].items()}
    rows["all"] = tuple(doc["all"][k] for k in COUNTS)
    assert rows == PINNED, doc
    assert (doc["ok"], doc["errors"], doc["verify"]["ok"]) == (True, 0, True)
    verified = doc["verify"]
    sessions, entries, signatures = (
        verified["sessions"],
        verified["entries"],
        verified["signatures_checked"],
    )
    # 132 ACS sessions, plus the spend chain of the agentdojo budget tree, the
    # approval desk's chain and the demo agent's registration chain.
    assert sessions == 132 + 1 + 1 + 1
    # Per ACS session: sessionStart, userMessage, sessionEnd + 2 per call. Spend chain:
    # 3 budgets defined, 3 holds taken and 3 settled, 1 refusal. Desk chain: one task
    # requested per distinct asked action (69: two of the 71 asks repeat an action
    # already pending in their session and name its task; nobody approves here).
    acs_entries = 132 * 3 + 2 * 386
    assert entries == acs_entries + 3 + 3 + 3 + 1 + 69 + 1
    # Every ACS response and every signed head (spend entries carry no response).
    assert signatures == acs_entries + sessions


def test_replay_transfers_are_governed_by_the_budget(dojo_server: Server) -> None:
    """After the replay (previous test): each transfer the rules allowed was held against
    the agent budget and settled by its result, or refused; the entries carry it."""
    import sqlite3

    db = sqlite3.connect(f"file:{dojo_server.data_dir / 'warden.db'}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT step_type, step_id, entry FROM entries WHERE step_type IN "
            "('steps/toolCallRequest', 'steps/toolCallResult') AND entry LIKE '%\"spend\"%' "
            "ORDER BY rowid"
        ).fetchall()
        holds = dict(db.execute("SELECT reservation_id, status FROM reservations").fetchall())
        usage = db.execute(
            "SELECT reserved, settled FROM budget_usage WHERE budget_id = ?",
            ("agentdojo.banking.agent",),
        ).fetchone()
    finally:
        db.close()
    requests = [json.loads(e)["verdict"] for t, _, e in rows if t == "steps/toolCallRequest"]
    results = [json.loads(e)["verdict"] for t, _, e in rows if t == "steps/toolCallResult"]
    seen = [
        (v["spend"]["amount"], "refused" if "refused" in v["spend"] else "held") for v in requests
    ]
    assert seen == ALLOWED_TRANSFERS
    refused = next(v for v in requests if "refused" in v["spend"])
    assert (refused["decision"], refused["reason_codes"]) == ("deny", ["budget_exceeded"])
    assert refused["spend"] == {
        "charge": "banking-transfers",
        "budget_id": "agentdojo.banking.agent",
        "amount": "50.0",
        "currency": "EUR",
        "refused": "budget_exceeded",
        "blocking_budget_id": "agentdojo.banking.agent",
        "limit": "50",
        "available": "36.0",
    }
    held = [v["spend"]["reservation_id"] for v in requests if "reservation_id" in v["spend"]]
    assert [v["spend"]["reservation_id"] for v in results] == held
    assert all(v["spend"]["outcome"] == "settled" for v in results)
    assert holds == dict.fromkeys(held, "settled")
    assert (Decimal(usage[0]), Decimal(usage[1])) == (Decimal(0), Decimal("24.0"))


def test_verify_detects_a_tampered_replay_database(dojo_server: Server, tmp_path: Path) -> None:
    import shutil
    import sqlite3

    data = dojo_server.data_dir
    copy = tmp_path / "copy"
    copy.mkdir()
    # Checkpointed copy: the server may hold recent pages in its WAL.
    src = sqlite3.connect(data / "warden.db")
    dst = sqlite3.connect(copy / "warden.db")
    src.backup(dst)
    src.close()
    shutil.copy(data / "ikm.key", copy / "ikm.key")
    row = dst.execute(
        "SELECT session_id, seq, entry FROM entries WHERE step_type = 'steps/toolCallRequest' "
        'AND entry LIKE \'%"decision":"ask"%\' LIMIT 1'
    ).fetchone()
    assert row is not None
    dst.execute(
        "UPDATE entries SET entry = ? WHERE session_id = ? AND seq = ?",
        (row[2].replace('"decision":"ask"', '"decision":"allow"'), row[0], row[1]),
    )
    dst.commit()
    dst.close()
    proc = subprocess.run(
        [sys.executable, "-m", "warden", "verify", "--data-dir", str(copy), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    failure = json.loads(proc.stdout)["failure"]
    assert (failure["reason"], failure["session_id"], failure["seq"]) == (
        "record_hash_mismatch",
        row[0],
        row[1],
    )
