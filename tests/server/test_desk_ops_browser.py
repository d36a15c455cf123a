"""The desk's operator view (issue 18 item 4) in a real headless Chromium (Playwright)
against a real `warden serve` over loopback.

Seeded through the real wires: an allow, a deny, an ask and a modify over signed ACS
calls, an ask approved over ``/v1/approvals`` (an approval latency), a spend quote
committed and one left held (burn and holds). Then in the browser: an approver sees no
operator page (every one answers as a missing page); an admin sees the activity with
each filter and the pager, each kind of decision's page with its link verified (and a
tampered entry failing verification), agents and budgets, and the charts. Each page is
screenshotted into ``tests/artifacts/desk-ops/`` (gitignored; the paths are printed),
and no page logs a Content-Security-Policy violation.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from conftest import DEFAULT_POLICY, ROOT, Server, start_server
from playwright.sync_api import ConsoleMessage, Page, expect, sync_playwright
from test_desk_browser import CHROMIUM, CHROMIUM_ARGS, create_key

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts" / "desk-ops"

BUDGETS = """\
- id: ops-org
  kind: org
  currency: USD
  cap: "500.00"
  period: month
  principals: [admin]
"""

SECRET = "hunter2-do-not-show"
KLA_REQUEST = ROOT / "src" / "warden" / "schemas" / "kla" / "examples" / "basic-read.json"
HOSTILE_TOOL = '<img src=x id=injected>"_tool'


@pytest.fixture
def ops_server(tmp_path: Path) -> Iterator[Server]:
    data = tmp_path / "srv"
    data.mkdir()
    (data / "budgets.yaml").write_text(BUDGETS)
    srv = start_server(data, DEFAULT_POLICY, "--budgets", str(data / "budgets.yaml"))
    yield srv
    srv.stop()


def seed(srv: Server, approver_token: str) -> dict[str, Any]:
    """Decisions of every kind through the real wires; what the pages must show."""
    bot = srv.client(agent_id="ops-bot")
    bot.hello()
    assert bot.call("steps/sessionStart", {})["result"]["decision"] == "allow"
    got = {
        "allow": bot.tool_call("read_file", {"path": "/srv/notes.txt"})["result"],
        "deny": bot.tool_call("shell", {"command": "rm -rf /srv"})["result"],
        "ask": bot.tool_call("delete_file", {"path": "/srv/old.csv"})["result"],
        "modify": bot.tool_call("login", {"user": "ops", "password": SECRET})["result"],
    }
    assert {k: v["decision"] for k, v in got.items()} == {
        "allow": "allow",
        "deny": "deny",
        "ask": "ask",
        "modify": "modify",
    }
    # Markup in agent-controlled text is printed as text, never as markup.
    marked = bot.tool_call(HOSTILE_TOOL, {"q": "<script>alert(1)</script>"})["result"]
    assert marked["decision"] == "allow"
    payer = srv.client(agent_id="pay-bot")
    payer.hello()
    payer.call("steps/sessionStart", {})
    pay = payer.tool_call("transfer_funds", {"to": "acct-42", "amount": 90})["result"]
    assert pay["decision"] == "ask"

    task_id = got["ask"]["ask_details"]["task_id"]
    approved = httpx.post(
        f"{srv.url}/v1/approvals/{task_id}/approve",
        json={"reason": "old export, fine to delete"},
        headers={"authorization": f"Bearer {approver_token}"},
        timeout=30,
    )
    assert approved.status_code == 200, approved.text

    admin = (srv.data_dir / "api.token").read_text().strip()

    def spend(path: str, body: dict[str, Any], key: str) -> dict[str, Any]:
        r = httpx.post(
            srv.url + path,
            json=body,
            headers={"authorization": f"Bearer {admin}", "idempotency-key": key},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        data: dict[str, Any] = r.json()["data"]
        return data

    quote = {"budgetId": "ops-org", "action": "buy-ads", "currency": "USD"}
    first = spend("/v1/quotes", {**quote, "amount": "40.00"}, "ops-view-quote-0001")
    spend(
        f"/v1/reservations/{first['quote']['reservation']['reservationId']}/commit",
        {"actualAmount": "32.50"},
        "ops-view-commit-0001",
    )
    held = spend("/v1/quotes", {**quote, "amount": "25.00"}, "ops-view-quote-0002")

    # An agent that may spend the budget (the agents page shows what it has left).
    added = subprocess.run(
        [
            sys.executable,
            "-m",
            "warden",
            "agents",
            "add",
            "spend-bot",
            "--owner",
            "finance-team",
            "--group",
            "finance",
            "--budget",
            "ops-org",
            "--json",
            "--data-dir",
            str(srv.data_dir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert added.returncode == 0, added.stderr

    # A KLA action request (its chain: the request, then Warden's policy decision).
    srv.client(agent_id="kla-agent")  # registers the agent
    kla_key = create_key(srv.data_dir, "kla-agent", "agent")
    kla = httpx.post(
        srv.url + "/v1/action-requests",
        content=KLA_REQUEST.read_bytes(),
        headers={
            "authorization": f"Bearer {kla_key['token']}",
            "content-type": "application/json",
        },
        timeout=30,
    )
    assert kla.status_code in (200, 201), kla.text
    assert kla.json()["data"]["decision"]["decision"] == "allow"
    return {
        "session": bot.session_id,
        "task_id": task_id,
        "hold": held["quote"]["reservation"]["reservationId"],
    }


def shot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def log_in(page: Page, srv: Server, token: str, target: str) -> None:
    page.goto(srv.url + target)
    expect(page).to_have_url(re.compile(r"/desk/login"))
    page.get_by_label("API key").fill(token)
    page.get_by_role("button", name="Log in").click()


def log_out(page: Page) -> None:
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("status")).to_have_text("You are logged out.")


def entry_link(page: Page, decision: str, tool: str) -> str:
    row = page.locator("table.activity tbody tr", has_text=tool).filter(
        has=page.locator(f"span.d-{decision}")
    )
    expect(row).to_have_count(1)
    href = row.get_by_role("link").get_attribute("href")
    assert href is not None
    return href


def test_operator_view_in_a_real_browser(ops_server: Server) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium to run the browser test")
    srv = ops_server
    admin = create_key(srv.data_dir, "root", "admin")
    approver = create_key(srv.data_dir, "alice", "approver", "operators")
    seeded = seed(srv, approver["token"])

    violations: list[str] = []

    def on_console(msg: ConsoleMessage) -> None:
        # The 404 and 400 pages this test opens on purpose log "Failed to load resource";
        # anything the CSP refused (an inline style or script) logs "Refused to …".
        if "Content Security Policy" in msg.text or "Refused to" in msg.text:
            violations.append(msg.text)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            try:
                page = context.new_page()
                page.set_default_timeout(20_000)
                page.on("console", on_console)
                as_approver(page, srv, approver["token"], seeded)
                as_admin(page, srv, admin["token"], seeded)
            finally:
                context.close()
        finally:
            browser.close()
    assert violations == []


def as_approver(page: Page, srv: Server, token: str, seeded: dict[str, Any]) -> None:
    """An approver sees no link to the operator view and every page of it answers
    exactly as a missing desk page does."""
    log_in(page, srv, token, "/desk")
    expect(page.get_by_role("heading", name="Approval tasks")).to_be_visible()
    expect(page.get_by_role("link", name="Activity")).to_have_count(0)
    nothing = page.goto(srv.url + "/desk/no-such-page")
    assert nothing is not None and nothing.status == 404
    missing = page.locator("main").inner_text()
    for path in (
        "/desk/ops",
        "/desk/ops/charts",
        "/desk/ops/agents",
        f"/desk/ops/entries/{seeded['session']}/0",
    ):
        answer = page.goto(srv.url + path)
        assert answer is not None and answer.status == 404, path
        assert page.locator("main").inner_text() == missing
        expect(page.get_by_text("Signed in as")).to_have_count(0)
    page.goto(srv.url + "/desk")
    log_out(page)


def as_admin(page: Page, srv: Server, token: str, seeded: dict[str, Any]) -> None:
    log_in(page, srv, token, "/desk/ops")
    expect(page).to_have_url(re.compile(r"/desk/ops$"))
    expect(page.get_by_role("heading", name="Activity", exact=True)).to_be_visible()

    # Every kind of decision is listed, newest first, with its agent, tool and rules.
    table = page.locator("table.activity")
    for decision, tool in (
        ("allow", "read_file"),
        ("deny", "shell"),
        ("ask", "delete_file"),
        ("modify", "login"),
        ("ask", "transfer_funds"),
    ):
        expect(table.locator("tr", has_text=tool).locator(f"span.d-{decision}")).to_have_count(1)
    expect(table).to_contain_text("approval")  # the desk's own chain
    expect(table).to_contain_text("spend")  # the budget tree's chain
    expect(table).not_to_contain_text(SECRET)
    times = table.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.at)")
    # With the three agents' registration entries (one each on their own chains).
    assert len(times) == 21 and times == sorted(times, reverse=True)
    expect(table).to_contain_text(HOSTILE_TOOL)
    expect(page.locator("#injected")).to_have_count(0)
    expect(page.locator(f'tr[data-session-id="{seeded["session"]}"]')).to_contain_text("ops-bot")
    shot(page, "activity")

    # Filters: each narrows to exactly what it names.
    def rows() -> list[str]:
        return [r.strip() for r in table.locator("tbody tr").all_inner_texts()]

    def filtered(**query: str) -> list[str]:
        page.goto(srv.url + "/desk/ops?" + urlencode(query))
        return rows()

    # The form sends the filter and shows it back.
    page.get_by_label("Decision", exact=True).fill("deny")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"decision=deny"))
    expect(page.get_by_label("Decision", exact=True)).to_have_value("deny")
    denied = rows()
    assert len(denied) == 1 and "shell" in denied[0] and "destructive-shell" in denied[0]
    by_tool = filtered(tool="delete_file")
    # The ACS ask and the desk chain's task being filed for that tool (a task's later
    # events name the task, not the tool).
    assert len(by_tool) == 2
    assert any("steps/toolCallRequest" in r for r in by_tool)
    assert any("warden/approval.requested" in r for r in by_tool)
    assert all("delete_file" in r for r in by_tool)
    by_rule = filtered(rule="redact-password")
    assert len(by_rule) == 1 and "login" in by_rule[0] and "modify" in by_rule[0]
    by_agent = filtered(agent="pay-bot")
    assert by_agent and all("pay-bot" in r for r in by_agent)
    assert any("transfer_funds" in r for r in by_agent)
    assert not any("read_file" in r for r in by_agent)
    by_wire = filtered(wire="spend")
    assert by_wire and all("warden/spend." in r for r in by_wire)
    registry = filtered(wire="agents")  # `warden agents add` is an audit event too
    # spend-bot's, and the three agents the test set-up registered (also audited).
    assert len(registry) == 4 and any("spend-bot" in r for r in registry)
    assert all("warden/agents.registered" in r for r in registry)
    by_kla = filtered(wire="kla")
    assert len(by_kla) == 2
    assert "read_case_summary" in by_kla[1] and "action_request" in by_kla[1]
    assert "allow" in by_kla[0] and "kla-actions" in by_kla[0] and "kla-agent" in by_kla[0]
    # Its decision page: Warden's own entry (no agent request), the rule from the bundle.
    table.locator("tbody tr").first.get_by_role("link").click()
    expect(page.locator("#entry-decision")).to_have_text("allow")
    expect(page.locator("#detail")).to_contain_text("policy_decision_id")
    kla_rule = page.locator('tr[data-rule="kla-actions"]')
    expect(kla_rule).to_contain_text("warden-default@1.4.1")
    expect(kla_rule).to_contain_text("unless a stronger rule below fires.")
    expect(kla_rule).not_to_contain_text("\\u000a")  # folded YAML shown as one line
    expect(page.locator("#verification + ul")).to_contain_text(
        "2 HMAC signature(s) verify: the session record's, the signed head's"
    )
    expect(page.locator("#verification")).to_contain_text("Link verified")
    shot(page, "decision-kla")
    shot(page, "activity-filtered")
    filtered(since="2999-01-01T00:00")
    expect(page.get_by_text("No entries match")).to_be_visible()
    bad = page.goto(srv.url + "/desk/ops?since=yesterday")
    assert bad is not None and bad.status == 400
    expect(page.get_by_role("alert")).to_contain_text("since must be a time")

    # The pager: three at a time, each page older than the one before, none repeated.
    page.goto(srv.url + "/desk/ops?limit=3")
    seen: list[str] = []
    stamps: list[str] = []
    listed = page.locator("table.activity tbody tr")
    for _ in range(3):
        keys = listed.evaluate_all("rows => rows.map(r => r.dataset.entry)")
        assert len(keys) == 3
        seen += keys
        stamps += listed.evaluate_all("rows => rows.map(r => r.dataset.at)")
        page.get_by_role("link", name="Older").click()
        # Wait for the older page itself, not the one the click left.
        expect(listed.first).not_to_have_attribute("data-entry", keys[0])
        expect(page.get_by_role("link", name="Newest")).to_be_visible()
    assert len(set(seen)) == len(seen) == 9
    assert stamps == sorted(stamps, reverse=True)
    # Filtering from an older page keeps the page size and starts from the newest.
    page.get_by_label("Decision", exact=True).fill("allow")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"[?&]decision=allow&.*limit=3$"))
    assert "before_" not in page.url
    expect(listed).to_have_count(3)
    expect(page.get_by_role("link", name="Older")).to_be_visible()

    # A modify decision: the request as received, its secret shown redacted; the rule
    # and its reasoning; the chain link verified.
    page.goto(srv.url + "/desk/ops")
    page.goto(srv.url + entry_link(page, "modify", "login"))
    expect(page.locator("#entry-decision")).to_have_text("modify")
    expect(page.locator("#verification")).to_contain_text("Link verified")
    expect(page.locator("#request")).to_contain_text("[REDACTED]")
    expect(page.locator("#request")).to_contain_text('"user"')
    expect(page.locator("main")).not_to_contain_text(SECRET)
    rule = page.locator('tr[data-rule="redact-password"]')
    expect(rule).to_contain_text("An argument named password is redacted")
    expect(page.locator("#reasoning")).to_contain_text("redacted before the tool runs")
    shot(page, "decision-modify")
    page.get_by_role("link", name="previous entry").click()
    expect(page.locator("#entry-decision")).to_have_text("ask")
    expect(page.get_by_role("link", name=seeded["task_id"])).to_be_visible()
    expect(page.locator("#verification")).to_contain_text("Link verified")
    shot(page, "decision-ask")

    # A deny, and the desk chain's approval event (Warden's own entry, no request).
    page.goto(srv.url + "/desk/ops")
    page.goto(srv.url + entry_link(page, "deny", "shell"))
    expect(page.locator("#reasoning")).to_contain_text("destructive shell pattern")
    expect(page.locator("#request")).to_contain_text("rm -rf /srv")
    expect(page.locator("#verification")).to_contain_text("Link verified")
    shot(page, "decision-deny")
    page.goto(srv.url + "/desk/ops?wire=approval&decision=approved")
    page.locator("table.activity tbody tr").first.get_by_role("link").click()
    expect(page.locator("#detail")).to_contain_text("old export, fine to delete")
    expect(page.locator("#verification")).to_contain_text("Link verified")

    # Missing entries answer 404; a tampered entry fails its verification.
    for path in (
        f"/desk/ops/entries/{seeded['session']}/999",
        "/desk/ops/entries/no-such-session/0",
        f"/desk/ops/entries/{seeded['session']}/-1",
    ):
        answer = page.goto(srv.url + path)
        assert answer is not None and answer.status == 404, path
    expect(page.get_by_role("heading", name="Audit entry not found")).to_be_visible()
    page.goto(srv.url + "/desk/ops")
    allow_href = entry_link(page, "allow", "read_file")
    with sqlite3.connect(srv.data_dir / "warden.db") as db:
        db.execute(
            "UPDATE entries SET request = replace(request, 'notes.txt', 'n0tes.txt') "
            "WHERE session_id = ? AND seq = 1",
            (seeded["session"],),
        )
    page.goto(srv.url + allow_href)
    expect(page.locator("#verification")).to_contain_text("Verification failed")
    expect(page.locator("#verification")).to_contain_text("record_hash_mismatch")
    shot(page, "decision-tampered")

    # Agents and budgets.
    page.get_by_role("link", name="Agents and budgets").click()
    expect(page.get_by_role("heading", name="Agents and budgets")).to_be_visible()
    expect(page.locator('tr[data-agent="ops-bot"]')).to_contain_text("ops-bot.owner")
    expect(page.locator('tr[data-agent="pay-bot"]')).to_contain_text("active")
    spender = page.locator('tr[data-agent="spend-bot"]')
    expect(spender).to_contain_text("finance-team")
    expect(spender).to_contain_text("ops-org (442.5 USD left)")
    budget = page.locator('tr[data-budget="ops-org"]')
    expect(budget).to_contain_text("500")
    expect(budget).to_contain_text("25")  # held
    expect(budget).to_contain_text("442.5")  # 500 - 32.50 settled - 25 held
    expect(budget).to_contain_text("total 32.5")
    expect(budget.locator("svg.spark rect.burn")).to_have_count(1)
    expect(page.locator(f'tr[data-hold="{seeded["hold"]}"]')).to_contain_text("buy-ads")
    shot(page, "agents")

    # Charts.
    page.get_by_role("link", name="Charts").click()
    expect(page.get_by_role("heading", name="Charts")).to_be_visible()
    counts = {
        o: int(page.locator(f'[data-outcome="{o}"]').inner_text())
        for o in ("allow", "deny", "ask", "modify")
    }
    # Two sessionStarts, a read, the hostile name and the KLA request; the shell;
    # delete_file and transfer_funds; login.
    assert counts == {"allow": 5, "deny": 1, "ask": 2, "modify": 1}, counts
    expect(page.locator("#per-minute rect.o-deny")).to_have_count(1)
    rules = page.get_by_role("table", name="Top rules")
    expect(rules.get_by_role("img", name="tool-calls: 6 verdicts")).to_be_visible()
    expect(rules.get_by_role("img", name="redact-password: 1 verdicts")).to_be_visible()
    tools = page.get_by_role("table", name="Top tools")
    expect(tools.locator("svg.hbar")).to_have_count(6)  # read shell delete login pay hostile
    expect(tools).to_contain_text(HOSTILE_TOOL)
    expect(page.locator("#injected")).to_have_count(0)
    expect(tools.get_by_role("img", name="read_file: 1 verdicts")).to_be_visible()
    latency = page.locator("section", has_text="Approval latency")
    expect(latency).to_contain_text("1 most recently decided task")
    expect(latency.get_by_role("img", name="under 10 s: 1 tasks")).to_be_visible()
    shot(page, "charts")

    # Last (it changes what the pages above count): a row that is no audit record at
    # all is a clear page, not a server error, and the list shows it as unreadable.
    with sqlite3.connect(srv.data_dir / "warden.db") as db:
        db.execute(
            "UPDATE entries SET entry = '{not json' WHERE session_id = ? AND seq = 0",
            (seeded["session"],),
        )
    damaged = page.goto(srv.url + allow_href.rsplit("/", 1)[0] + "/0")
    assert damaged is not None and damaged.status == 409
    expect(page.get_by_role("alert")).to_contain_text("cannot be read as stored")
    page.goto(srv.url + "/desk/ops?decision=unreadable")
    expect(page.locator("table.activity tbody tr")).to_have_count(1)
