"""`warden whatif` over a recorded AgentDojo history (issue 19 item 2): the recorded
bundle reproduces every decision, and a candidate that allows send_money moves exactly
the asked transfers to allow (and `--fail-on loosen` fails)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import AGENTDOJO_POLICY
from dojo import AGENTDOJO_BUDGETS, record_agentdojo, send_money_candidate, valid

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


def whatif(*args: str, process: bool = False) -> subprocess.CompletedProcess[str]:
    """`warden whatif ARGS`: in a process, or (faster; the mapping is the same) through
    typer's runner."""
    if process:
        return subprocess.run(
            [sys.executable, "-m", "warden", "whatif", *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
    from typer.testing import CliRunner

    from warden.cli import app

    res = CliRunner().invoke(app, ["whatif", *args])
    return subprocess.CompletedProcess(args, res.exit_code, res.stdout, res.stderr)


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
    proc = whatif(
        "--policy", str(AGENTDOJO_POLICY), "--data-dir", str(history), "--json", process=True
    )
    assert proc.returncode == 0, proc.stderr
    doc = valid(json.loads(proc.stdout))
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
        "--policy",
        str(candidate),
        "--data-dir",
        str(history),
        "--json",
        "--fail-on",
        "loosen",
        "--html",
        str(tmp_path / "report.html"),
    )
    assert proc.returncode == 1, proc.stderr
    doc = valid(json.loads(proc.stdout))
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
        "transfer-over-limit",
        "transfer-unknown-recipient",
        "transfer-amount-invalid",
    }
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    # Without --fail-on the same report exits 0; --fail-on any also fails.
    assert whatif("--policy", str(candidate), "--data-dir", str(history), "--json").returncode == 0
    assert (
        whatif(
            "--policy", str(candidate), "--data-dir", str(history), "--json", "--fail-on", "any"
        ).returncode
        == 1
    )


def test_replay_writes_nothing(history: Path, tmp_path: Path) -> None:
    """Pure: the database's bytes are the same after a replay."""
    db = history / "warden.db"
    before = db.read_bytes()
    proc = whatif("--policy", str(send_money_candidate(tmp_path)), "--data-dir", str(history))
    assert proc.returncode == 0, proc.stderr
    assert db.read_bytes() == before
    assert "loosened" in proc.stdout
    # The human lines name the rules on each side (brackets kept, not read as markup).
    assert "ask→allow [write-banking-transfers, transfer-" in proc.stdout


def test_an_export_replays_like_the_database(history: Path, tmp_path: Path) -> None:
    """The one reader interface: an export (with --current, since an export carries no
    bundle sources) gives the same report as the database it came from."""
    out = tmp_path / "history.jsonl"
    exported = subprocess.run(
        [sys.executable, "-m", "warden", "export", "--data-dir", str(history), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    candidate = send_money_candidate(tmp_path)
    from_db = json.loads(
        whatif("--policy", str(candidate), "--data-dir", str(history), "--json").stdout
    )
    proc = whatif(
        "--policy",
        str(candidate),
        "--export",
        str(out),
        "--current",
        str(AGENTDOJO_POLICY),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    from_export = valid(json.loads(proc.stdout))
    assert from_export["source"]["kind"] == "export"
    for key in ("decisions", "matrix", "changes", "by_tool", "by_rule", "loosened", "never_fired"):
        assert from_export[key] == from_db[key], key
    assert from_export["faithfulness"]["faithful"] is True
    # Without --current the export's decisions cannot be checked for faithfulness.
    unchecked = json.loads(
        whatif("--policy", str(candidate), "--export", str(out), "--json").stdout
    )
    assert unchecked["faithfulness"]["not_checked"] == unchecked["decisions"] > 0
    assert unchecked["faithfulness"]["faithful"] is False


def test_window_and_agent_filters(history: Path) -> None:
    base = ["--policy", str(AGENTDOJO_POLICY), "--data-dir", str(history), "--json"]
    other = json.loads(whatif(*base, "--agent", "someone-else").stdout)
    assert other["decisions"] == 0
    later = json.loads(whatif(*base, "--since", "2999-01-01T00:00:00Z").stdout)
    assert later["decisions"] == 0
    everything = json.loads(
        whatif(*base, "--agent", "demo-agent", "--until", "2999-01-01T00:00:00Z").stdout
    )
    assert everything["decisions"] == 132 * 3 + 2 * 386
    bad = whatif(*base, "--since", "yesterday")
    assert bad.returncode == 2 and "RFC 3339" in bad.stderr


def test_the_html_report_renders_in_chromium(history: Path, tmp_path: Path) -> None:
    """One self-contained page: Chromium with the network cut off renders its charts and
    the numbers of the JSON report."""
    from playwright.sync_api import sync_playwright

    chromium = Path("/usr/bin/chromium")
    report = tmp_path / "report.html"
    candidate = send_money_candidate(tmp_path)
    proc = whatif(
        "--policy", str(candidate), "--data-dir", str(history), "--json", "--html", str(report)
    )
    doc = valid(json.loads(proc.stdout))
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(chromium), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.goto(report.as_uri())
            assert page.locator("#loosened").inner_text() == str(doc["changes"]["loosened"])
            assert page.locator("#tightened").inner_text() == "0"
            svgs = page.locator("svg")
            assert svgs.count() >= 6  # faithfulness, matrix, rule, tool, agent, wire
            bars = page.locator("rect.bar.loosened")
            assert bars.count() >= 1
            box = bars.first.bounding_box()
            assert box is not None and box["width"] > 0 and box["height"] > 0
            matrix = page.locator("#matrix").inner_text()
            assert "ask" in matrix and str(doc["matrix"]["ask"]["allow"]) in matrix
            assert "send_money" in page.content()
        finally:
            browser.close()
    assert requests == [report.as_uri()]  # nothing but the page itself was fetched
