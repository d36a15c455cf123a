"""`warden whatif` over a recorded AgentDojo history (issue 19 item 2): the recorded
bundle reproduces every decision, and a candidate that allows send_money moves exactly
the asked transfers to allow (and `--fail-on loosen` fails)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import AGENTDOJO_POLICY
from dojo import AGENTDOJO_BUDGETS, record_agentdojo, send_money_candidate

from warden.runtime import Runtime


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory holding the recorded AgentDojo replay (server stopped)."""
    from conftest import write_key

    from warden.settings import Settings

    data = tmp_path_factory.mktemp("whatif") / "data"
    key = write_key(data / "ikm.key")
    rt = Runtime.start(
        Settings(
            data_dir=data,
            policy=AGENTDOJO_POLICY,
            key_file=key,
            budgets=AGENTDOJO_BUDGETS,
            sqlite_sync="NORMAL",
        )
    )
    try:
        record_agentdojo(rt)
    finally:
        rt.close()
    return data


def whatif(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warden", "whatif", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def recorded_asks(data: Path, tool: str) -> set[tuple[str, int]]:
    """(session, seq) of every recorded toolCallRequest for ``tool`` answered ask, read
    straight from the database (not through Warden)."""
    db = sqlite3.connect(f"file:{data / 'warden.db'}?mode=ro", uri=True)
    try:
        out = set()
        for sid, seq, entry, request in db.execute(
            "SELECT session_id, seq, entry, request FROM entries WHERE step_type = ?",
            ("steps/toolCallRequest",),
        ):
            params = json.loads(request)
            if (
                json.loads(entry)["verdict"]["decision"] == "ask"
                and params["payload"]["tool"]["name"] == tool
            ):
                out.add((sid, seq))
        return out
    finally:
        db.close()


def test_the_recorded_bundle_reproduces_every_decision(history: Path) -> None:
    proc = whatif("--policy", str(AGENTDOJO_POLICY), "--data-dir", str(history), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    f = doc["faithfulness"]
    # Every ACS entry of the 132 sessions: 3 lifecycle steps each and 2 per call.
    assert doc["decisions"] == 132 * 3 + 2 * 386
    assert f["faithful"] is True
    assert (f["reproduced"], f["unreproduced"], f["not_checked"]) == (doc["decisions"], 0, 0)
    # The one transfer the budget refused is reproduced at the policy level (allow) and
    # marked; no other state decided anything (nobody approved an ask).
    assert f["marked"] == {"budget": 1}
    assert doc["changes"]["total"] == 0
    assert set(doc["matrix"]) == {"allow", "ask"}
    # The agents chain and the spend and desk chains are not decisions to replay.
    assert set(doc["skipped"]) == {"warden/agents", "warden/spend", "warden/approval"}


def test_a_candidate_allowing_send_money_loosens_exactly_the_asked_transfers(
    history: Path, tmp_path: Path
) -> None:
    candidate = send_money_candidate(tmp_path)
    asked = recorded_asks(history, "send_money")
    assert len(asked) >= 5  # the history has transfers that asked
    proc = whatif(
        "--policy", str(candidate), "--data-dir", str(history), "--json",
        "--fail-on", "loosen", "--html", str(tmp_path / "report.html"),
    )
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["faithfulness"]["faithful"] is True
    ch = doc["changes"]
    assert (ch["loosened"], ch["tightened"]) == (len(asked), 0)
    assert doc["matrix"]["ask"].get("allow") == len(asked)
    assert list(doc["by_tool"]) == ["send_money"]
    assert doc["by_tool"]["send_money"]["loosened"] == len(asked)
    moved = {(ex["session_id"], ex["seq"]) for ex in doc["loosened"]}
    assert moved <= asked and len(moved) == min(len(asked), 20)
    for ex in doc["loosened"]:
        assert (ex["old"]["decision"], ex["new"]["decision"]) == ("ask", "allow")
        assert ex["tool"] == "send_money" and ex["agent"] == "demo-agent"
    # The rules that stopped firing are the transfer ask rules.
    assert set(doc["by_rule"]) <= {
        "transfer-over-limit", "transfer-unknown-recipient", "transfer-amount-invalid"
    }
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    # Without --fail-on the same report exits 0; --fail-on any also fails.
    assert whatif("--policy", str(candidate), "--data-dir", str(history), "--json").returncode == 0
    assert whatif(
        "--policy", str(candidate), "--data-dir", str(history), "--json", "--fail-on", "any"
    ).returncode == 1


def test_replay_writes_nothing(history: Path, tmp_path: Path) -> None:
    """Pure: the database's bytes are the same after a replay."""
    db = history / "warden.db"
    before = db.read_bytes()
    proc = whatif("--policy", str(send_money_candidate(tmp_path)), "--data-dir", str(history))
    assert proc.returncode == 0, proc.stderr
    assert db.read_bytes() == before
    assert "loosened" in proc.stdout
