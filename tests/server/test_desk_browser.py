"""The approval desk end to end in a real headless Chromium (Playwright) against a real
`warden serve`: an approver key made with `warden keys create`, two tasks filed by ACS
steps over HTTP, then in the browser: log in, see both, approve one and deny the other
with reasons, see the new states on the task pages and on the list filtered by "all";
finally the approved step, resubmitted over ACS, is allowed once and only once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Server
from playwright.sync_api import Page, expect, sync_playwright

from warden.wire.acs.client import AcsClient

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

DELETE_ARGS = {"path": "/srv/reports/2024.csv"}
PAY_ARGS = {"to": "acct-42", "amount": 2500}


def create_key(data_dir: Path, principal: str, role: str, *groups: str) -> dict[str, Any]:
    """`warden keys create … --json` against the server's database."""
    cmd = [
        sys.executable,
        "-m",
        "warden",
        "keys",
        "create",
        "--principal",
        principal,
        "--role",
        role,
        *[arg for g in groups for arg in ("--group", g)],
        "--json",
        "--data-dir",
        str(data_dir),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    created: dict[str, Any] = json.loads(done.stdout)
    return created


def ask(agent: AcsClient, tool: str, args: dict[str, Any]) -> str:
    result = agent.tool_call(tool, args)["result"]
    assert result["decision"] == "ask", result
    task_id: str = result["ask_details"]["task_id"]
    return task_id


def decide(page: Page, task_id: str, button: str, label: str, reason: str) -> None:
    """Open the task from the pending list and approve or deny it with a reason."""
    page.get_by_role("link", name="Pending tasks").click()
    expect(page.get_by_role("heading", name="Approval tasks")).to_be_visible()
    page.get_by_role("link", name=task_id, exact=True).click()
    expect(page.get_by_role("heading", name=f"Approval task {task_id}")).to_be_visible()
    expect(page.locator("#task-state")).to_have_text("pending")
    page.get_by_label(label).fill(reason)
    page.get_by_role("button", name=button, exact=True).click()


def test_desk_in_a_real_browser(server: Server) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium to run the browser test")
    key = create_key(server.data_dir, "alice", "approver", "operators", "finance")
    assert key["role"] == "approver" and key["groups"] == ["finance", "operators"]

    agent = server.client(agent_id="ops-bot")
    agent.hello()
    assert agent.call("steps/sessionStart", {})["result"]["decision"] == "allow"
    delete_task = ask(agent, "delete_file", DELETE_ARGS)
    pay_task = ask(agent, "transfer_funds", PAY_ARGS)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            context = browser.new_context()
            try:
                page = context.new_page()
                page.set_default_timeout(20_000)
                run_browser(page, server, key["token"], delete_task, pay_task)
            finally:
                context.close()
        finally:
            browser.close()

    # The approved step, resubmitted in the same session: allowed once, then asked again.
    again = agent.tool_call("delete_file", DELETE_ARGS)["result"]
    assert again["decision"] == "allow", again
    assert "approval_granted" in again["reason_codes"]
    assert again["policy_data"]["approval"]["task_id"] == delete_task
    third = agent.tool_call("delete_file", DELETE_ARGS)["result"]
    assert third["decision"] != "allow", third
    assert third["decision"] == "ask"
    # The denied one is denied.
    refused = agent.tool_call("transfer_funds", PAY_ARGS)["result"]
    assert refused["decision"] == "deny" and "approval_denied" in refused["reason_codes"]


def run_browser(page: Page, server: Server, token: str, delete_task: str, pay_task: str) -> None:
    # Not logged in: the desk sends the browser to its login form.
    page.goto(server.url + "/desk")
    expect(page).to_have_url(re.compile(r"/desk/login"))
    expect(page.get_by_role("heading", name="Log in to the approval desk")).to_be_visible()
    page.get_by_label("API key").fill("wdn_000000000000_" + "A" * 43)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("That API key is not valid")
    page.get_by_label("API key").fill(token)
    page.get_by_role("button", name="Log in").click()

    # Both tasks are pending on the list.
    expect(page.get_by_role("heading", name="Approval tasks")).to_be_visible()
    expect(page).to_have_title(re.compile("Approval tasks"))
    page.get_by_text("Signed in as alice").wait_for()
    for task_id, group in ((delete_task, "operators"), (pay_task, "finance")):
        row = page.locator(f'tr[data-task-id="{task_id}"]')
        expect(row).to_be_visible()
        expect(row).to_contain_text("pending")
        expect(row).to_contain_text(group)
        expect(row).to_contain_text("0/1 approvals")
        expect(row).to_contain_text(re.compile(r"\d+ min left"))
    expect(page.locator(f'tr[data-task-id="{delete_task}"]')).to_contain_text("delete_file")
    expect(page.locator(f'tr[data-task-id="{pay_task}"]')).to_contain_text("transfer_funds")

    # Approve the delete.
    decide(page, delete_task, "Approve", "Reason for approving", "Checked: an old report.")
    expect(page.get_by_role("status")).to_have_text("Approved")
    expect(page.locator("#task-state")).to_have_text("approved")
    trail = page.locator("table.trail")
    expect(trail).to_contain_text("alice")
    expect(trail).to_contain_text("Checked: an old report.")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)

    # Deny the payment; an empty reason is not accepted by the form.
    page.get_by_role("link", name="Pending tasks").click()
    expect(page.locator(f'tr[data-task-id="{delete_task}"]')).to_have_count(0)
    page.get_by_role("link", name=pay_task, exact=True).click()
    page.get_by_role("button", name="Deny", exact=True).click()  # required field: no submit
    expect(page.locator("#task-state")).to_have_text("pending")
    decide(page, pay_task, "Deny", "Reason for denying", "Unknown payee.")
    expect(page.get_by_role("status")).to_have_text("Denied")
    expect(page.locator("#task-state")).to_have_text("denied")
    expect(page.locator("table.trail")).to_contain_text("Unknown payee.")

    # Both on the list filtered by "all", with their new states.
    page.get_by_role("link", name="Pending tasks").click()
    expect(page.get_by_text("No tasks match")).to_be_visible()
    page.get_by_label("State").select_option("all")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"state=all"))
    expect(page.locator(f'tr[data-task-id="{delete_task}"]')).to_contain_text("approved")
    expect(page.locator(f'tr[data-task-id="{pay_task}"]')).to_contain_text("denied")

    # Log out: the desk is closed again.
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("status")).to_have_text("You are logged out.")
    page.goto(server.url + "/desk")
    expect(page).to_have_url(re.compile(r"/desk/login"))
