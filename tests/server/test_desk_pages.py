"""The web approval desk (/desk) through Starlette's TestClient: login with API keys
(approver/admin only), the task list and task page, approve / deny / re-route with
reasons and CSRF, maker-checker and group membership, immediate revocation, the
session cookie, and HTML escaping. Tasks come from real ACS steps the default policy
asks about (delete_file → operators, transfer_funds → finance)."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from html import unescape
from types import SimpleNamespace
from typing import Any, get_args

import pytest
from conftest import ensure_agent, service_client
from fastapi.testclient import TestClient

import warden.server.desk as desk_module
from warden.approvals.tasks import TASK_WIRES, ApprovalState, Requester, Task, TaskKind
from warden.runtime import Runtime
from warden.server.app import create_app
from warden.server.approvals_api import StateFilter
from warden.server.desk import SESSION_COOKIE, time_left
from warden.wire.acs.client import AcsClient
from warden.wire.acs.signing import sign_request

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(runtime), follow_redirects=False) as c:
        yield c


def key(rt: Runtime, principal: str, role: str, *groups: str) -> tuple[str, str]:
    """(key_id, token) of a new API key."""
    ensure_agent(rt, principal, role)
    identity, token = rt.api_keys.create(principal, role, groups)
    return identity.key_id, token


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found is not None, html
    return found.group(1)


def login(client: TestClient, token: str) -> str:
    """Log in; the CSRF token of the session."""
    form = client.get("/desk/login")
    assert form.status_code == 200
    r = client.post("/desk/login", data={"token": token, "csrf_token": csrf_of(form.text)})
    assert r.status_code == 303, r.text
    assert r.headers["location"] == "/desk"
    page = client.get("/desk")
    assert page.status_code == 200, page.text
    return csrf_of(page.text)


def agent(rt: Runtime, name: str = "bot") -> AcsClient:
    c = service_client(rt, agent_id=name)
    c.hello()
    assert c.call("steps/sessionStart", {})["result"]["decision"] == "allow"
    return c


def tool_call(c: AcsClient, tool: str, args: dict[str, Any], user: str | None = None) -> Any:
    """The result of one signed toolCallRequest (``user`` as metadata.user_context)."""
    payload = {"tool": {"name": tool}, "arguments": {k: {"value": v} for k, v in args.items()}}
    env = c.envelope("steps/toolCallRequest", payload, sign=False)
    if user is not None:
        env["params"]["metadata"]["user_context"] = {"user_id": user}
    return c.send(sign_request(env, c.key, c.key_id))["result"]


def ask(
    rt: Runtime, tool: str, args: dict[str, Any], user: str | None = None
) -> tuple[str, AcsClient]:
    """File a pending task with a real ACS step; (task id, the agent's client)."""
    c = agent(rt)
    result = tool_call(c, tool, args, user)
    assert result["decision"] == "ask", result
    return result["ask_details"]["task_id"], c


def task_state(rt: Runtime, task_id: str) -> ApprovalState:
    task = rt.desk.get(task_id)
    assert task is not None
    return task.state


def post(client: TestClient, path: str, **data: str) -> Any:
    return client.post(path, data=data)


# -- login ------------------------------------------------------------------------------


def test_pages_need_a_login(client: TestClient) -> None:
    for path in ("/desk", "/desk/tasks/task_x"):
        r = client.get(path)
        assert r.status_code == 303
        assert r.headers["location"].startswith("/desk/login")
    assert client.get("/desk/tasks/task_x").headers["location"] == (
        "/desk/login?next=%2Fdesk%2Ftasks%2Ftask_x"
    )
    r = client.get("/desk/login")
    assert r.status_code == 200
    assert "<h1>Log in to the approval desk</h1>" in r.text
    assert '<label for="token">API key</label>' in r.text


def test_login_refuses_a_bad_token_and_an_agent_key(runtime: Runtime, client: TestClient) -> None:
    _, agent_token = key(runtime, "svc-bot", "agent")
    csrf = csrf_of(client.get("/desk/login").text)
    for bad in ("wdn_000000000000_" + "A" * 43, "not a token", "x" * 5000):
        r = post(client, "/desk/login", token=bad, csrf_token=csrf)
        assert r.status_code == 401
        assert "That API key is not valid" in r.text
    r = post(client, "/desk/login", token="", csrf_token=csrf)
    assert r.status_code == 400
    r = post(client, "/desk/login", token=agent_token, csrf_token=csrf)
    assert r.status_code == 403
    assert "This API key has the agent role" in r.text
    assert "only approver and admin keys may use the approval desk" in r.text
    # Still not logged in.
    assert client.get("/desk").status_code == 303


def test_login_form_is_csrf_protected(runtime: Runtime, client: TestClient) -> None:
    _, token = key(runtime, "alice", "approver", "operators")
    client.get("/desk/login")
    r = post(client, "/desk/login", token=token)
    assert r.status_code == 403
    r = post(client, "/desk/login", token=token, csrf_token="forged")
    assert r.status_code == 403
    assert client.get("/desk").status_code == 303


def test_session_cookie_holds_the_key_id_never_the_token(
    runtime: Runtime, client: TestClient
) -> None:
    key_id, token = key(runtime, "alice", "approver", "operators")
    form = client.get("/desk/login")
    r = post(client, "/desk/login", token=token, csrf_token=csrf_of(form.text))
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(SESSION_COOKIE + "=")
    flags = cookie.lower()
    for flag in ("httponly", "samesite=strict", "path=/desk;", "max-age=28800"):
        assert flag in flags, cookie
    assert "secure" not in flags  # http public URL
    value = cookie.split(";")[0].split("=", 1)[1]
    payload = json.loads(base64.b64decode(value.split(".")[0]))
    assert payload["key_id"] == key_id
    assert set(payload) == {"key_id", "sid", "auth_at", "csrf"}
    # The secret is everything after wdn_<key id>_ (it may itself contain "_").
    secret = token[len("wdn_") + len(key_id) + 1 :]
    assert token not in cookie and secret not in json.dumps(payload)
    # A tampered cookie is no session at all.
    assert client.get("/desk").status_code == 200
    head, signature = value.rsplit(".", 1)
    forged = signature[:-4] + ("AAAA" if not signature.endswith("AAAA") else "BBBB")
    client.cookies.clear()
    client.cookies.set(SESSION_COOKIE, f"{head}.{forged}")
    assert client.get("/desk").status_code == 303
    client.cookies.clear()
    client.cookies.set(SESSION_COOKIE, value)
    assert client.get("/desk").status_code == 200


def test_cookie_is_secure_behind_an_https_public_url(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(public_url="https://desk.example.com")
    _, token = key(rt, "alice", "approver", "operators")
    app = create_app(rt)
    with TestClient(app, base_url="https://testserver", follow_redirects=False) as c:
        form = c.get("/desk/login")
        assert "secure" in form.headers["set-cookie"].lower()
        r = c.post("/desk/login", data={"token": token, "csrf_token": csrf_of(form.text)})
        assert r.status_code == 303
        assert "; secure" in r.headers["set-cookie"].lower()
        assert c.get("/desk").status_code == 200


def test_admin_logs_in_with_the_bootstrap_token(runtime: Runtime, client: TestClient) -> None:
    login(client, runtime.api_token)
    page = client.get("/desk").text
    assert "Signed in as <strong>admin</strong>" in page


def test_pages_carry_security_headers_and_stay_out_of_openapi(
    runtime: Runtime, client: TestClient
) -> None:
    r = client.get("/desk/login")
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "script-src" not in csp  # no script at all
    assert r.headers["cache-control"] == "no-store"
    assert r.headers["referrer-policy"] == "no-referrer"
    css = client.get("/desk/static/desk.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    schema = client.get("/openapi.json").json()
    assert not [p for p in schema["paths"] if p.startswith("/desk")]
    # The desk cookie is never set outside /desk.
    assert "set-cookie" not in client.get("/healthz").headers


# -- list and task page -----------------------------------------------------------------


def test_approver_sees_approves_and_the_step_is_allowed_once(
    runtime: Runtime, client: TestClient
) -> None:
    key_id, token = key(runtime, "alice", "approver", "operators", "finance")
    task_id, bot = ask(runtime, "delete_file", {"path": "/srv/data/report.csv"})
    csrf = login(client, token)

    page = client.get("/desk").text
    assert task_id in page
    assert f'href="/desk/tasks/{task_id}"' in page
    assert "delete_file" in page
    assert "{&#34;path&#34;:&#34;/srv/data/report.csv&#34;}" in page
    assert "This call deletes data; a human must approve it." in page
    assert "ask-before-delete" in page
    assert "operators" in page and "0/1 approvals" in page
    assert re.search(r"1[45] min left", page), page
    assert "observed-agent" not in page and "bot" in page

    detail = client.get(f"/desk/tasks/{task_id}")
    assert detail.status_code == 200
    text = detail.text
    assert "Allow the agent to delete this data?" in text
    assert "warden-default@1.4.1" in text
    assert "destructive_action_requires_approval" in text
    task = runtime.desk.get(task_id)
    assert task is not None and task.action_hash in text
    assert '<label for="approve-reason">Reason for approving</label>' in text
    assert '<label for="deny-reason">Reason for denying</label>' in text
    assert '<label for="reroute-group">New approver group</label>' in text

    r = post(
        client, f"/desk/tasks/{task_id}/approve", csrf_token=csrf, reason="  checked with ops  "
    )
    assert r.status_code == 303
    assert r.headers["location"] == f"/desk/tasks/{task_id}"
    assert task_state(runtime, task_id) is ApprovalState.APPROVED

    after = client.get(f"/desk/tasks/{task_id}").text
    assert '<p class="flash" role="status">Approved</p>' in after
    assert 'id="task-state">approved<' in after
    assert "Reason for approving" not in after  # no forms once decided
    trail = after.split('id="h-trail"')[1]
    assert "approved" in trail and f"alice (key {key_id})" in trail
    assert "checked with ops" in trail
    approved = runtime.desk.get(task_id)
    assert approved is not None and approved.history[-1]["entry_hash"] in trail
    # The flash is shown once.
    assert "Approved</p>" not in client.get(f"/desk/tasks/{task_id}").text
    # Pending list no longer has it; "all" does, approved.
    assert task_id not in client.get("/desk").text
    everything = client.get("/desk", params={"state": "all"}).text
    assert task_id in everything and "state-approved" in everything

    # The agent resubmits the same step: allowed once, then asked again.
    again = tool_call(bot, "delete_file", {"path": "/srv/data/report.csv"})
    assert again["decision"] == "allow"
    assert "approval_granted" in again["reason_codes"]
    third = tool_call(bot, "delete_file", {"path": "/srv/data/report.csv"})
    assert third["decision"] == "ask"
    assert task_state(runtime, task_id) is ApprovalState.CONSUMED


def test_deny_needs_a_reason(runtime: Runtime, client: TestClient) -> None:
    _, token = key(runtime, "alice", "approver", "finance")
    task_id, bot = ask(runtime, "transfer_funds", {"to": "acct-9", "amount": 5000})
    csrf = login(client, token)
    for blank in ("", "   \n "):
        r = post(client, f"/desk/tasks/{task_id}/deny", csrf_token=csrf, reason=blank)
        assert r.status_code == 400
        assert "Give a reason for denying this task." in r.text
        assert task_state(runtime, task_id) is ApprovalState.PENDING
    r = post(client, f"/desk/tasks/{task_id}/approve", csrf_token=csrf, reason=" ")
    assert r.status_code == 400
    assert task_state(runtime, task_id) is ApprovalState.PENDING
    r = post(client, f"/desk/tasks/{task_id}/deny", csrf_token=csrf, reason="unknown account")
    assert r.status_code == 303
    assert task_state(runtime, task_id) is ApprovalState.DENIED
    page = client.get(f"/desk/tasks/{task_id}").text
    assert '<p class="flash" role="status">Denied</p>' in page
    assert 'id="task-state">denied<' in page and "unknown account" in page
    assert task_id in client.get("/desk", params={"state": "denied"}).text
    assert task_id not in client.get("/desk", params={"state": "approved"}).text
    # Deciding twice is a conflict, rendered with its status.
    r = post(client, f"/desk/tasks/{task_id}/approve", csrf_token=csrf, reason="changed my mind")
    assert r.status_code == 409
    assert "is denied; only a pending task can be" in r.text
    assert task_state(runtime, task_id) is ApprovalState.DENIED
    # The agent's resubmission is denied.
    result = tool_call(bot, "transfer_funds", {"to": "acct-9", "amount": 5000})
    assert result["decision"] == "deny"
    assert "approval_denied" in result["reason_codes"]


def test_missing_or_wrong_csrf_is_refused_and_changes_nothing(
    runtime: Runtime, client: TestClient
) -> None:
    _, token = key(runtime, "alice", "approver", "operators")
    task_id, _ = ask(runtime, "delete_file", {"path": "/tmp/a"})
    csrf = login(client, token)
    for action in ("approve", "deny", "reroute"):
        for forged in ({}, {"csrf_token": "x" * len(csrf)}, {"csrf_token": csrf + "x"}):
            r = client.post(
                f"/desk/tasks/{task_id}/{action}",
                data={"reason": "ok", "group": "finance", **forged},
            )
            assert r.status_code == 403, (action, forged)
            assert "CSRF" in r.text
    task = runtime.desk.get(task_id)
    assert task is not None
    assert task.state is ApprovalState.PENDING and task.approver_group == "operators"
    assert not task.votes and len(task.history) == 1
    # Logout needs the token too.
    assert client.post("/desk/logout", data={"csrf_token": ""}).status_code == 403
    assert client.get("/desk").status_code == 200
    r = client.post("/desk/logout", data={"csrf_token": csrf})
    assert r.status_code == 303 and r.headers["location"] == "/desk/login"
    assert client.get("/desk").status_code == 303


def test_forms_must_be_urlencoded_and_small(runtime: Runtime, client: TestClient) -> None:
    _, token = key(runtime, "alice", "approver", "operators")
    task_id, _ = ask(runtime, "delete_file", {"path": "/tmp/b"})
    csrf = login(client, token)
    r = client.post(f"/desk/tasks/{task_id}/approve", json={"csrf_token": csrf, "reason": "ok"})
    assert r.status_code == 415
    r = client.post(
        f"/desk/tasks/{task_id}/approve", data={"csrf_token": csrf, "reason": "x" * 70_000}
    )
    assert r.status_code == 413
    r = client.post(
        f"/desk/tasks/{task_id}/approve", data={"csrf_token": csrf, "reason": "x" * 2001}
    )
    assert r.status_code == 400 and "longer than 2000" in r.text
    assert task_state(runtime, task_id) is ApprovalState.PENDING


def test_an_approver_outside_the_group_is_refused(runtime: Runtime, client: TestClient) -> None:
    _, token = key(runtime, "bob", "approver", "operators")
    task_id, _ = ask(runtime, "transfer_funds", {"to": "acct-1", "amount": 10})
    csrf = login(client, token)
    page = client.get(f"/desk/tasks/{task_id}").text
    assert "Only members of approver group finance can decide this task" in page
    assert "Reason for approving" not in page
    r = post(client, f"/desk/tasks/{task_id}/approve", csrf_token=csrf, reason="fine")
    assert r.status_code == 403
    assert "bob is not in approver group &#39;finance&#39;" in r.text
    assert task_state(runtime, task_id) is ApprovalState.PENDING


def test_the_requesting_principal_cannot_approve(runtime: Runtime, client: TestClient) -> None:
    # The maker is the agent's registered owner (bot.owner), whatever user it claims.
    _, token = key(runtime, "bot.owner", "approver", "operators")
    task_id, _ = ask(runtime, "delete_file", {"path": "/tmp/mine"}, user="alice")
    csrf = login(client, token)
    page = client.get(f"/desk/tasks/{task_id}").text
    # Named as the owner of the requesting agent, not as its requester (decision 256).
    assert (
        "You (bot.owner) own the agent bot that requested this task, so you cannot decide it "
        "(maker-checker)" in page
    )
    assert "alice <small>(the agent's claim, not verified)</small>" in page
    assert "owner bot.owner" in client.get("/desk").text
    for action in ("approve", "deny"):
        r = post(client, f"/desk/tasks/{task_id}/{action}", csrf_token=csrf, reason="mine")
        assert r.status_code == 403
        assert "bot.owner owns the agent bot that requested task" in r.text
    assert task_state(runtime, task_id) is ApprovalState.PENDING
    # A colleague can.
    _, other = key(runtime, "carol", "approver", "operators")
    client.cookies.clear()
    csrf = login(client, other)
    r = post(client, f"/desk/tasks/{task_id}/approve", csrf_token=csrf, reason="four eyes")
    assert r.status_code == 303
    assert task_state(runtime, task_id) is ApprovalState.APPROVED


def test_reroute(runtime: Runtime, client: TestClient) -> None:
    _, token = key(runtime, "alice", "approver", "operators")
    key(runtime, "fay", "approver", "finance")  # finance has an approver: no warning
    task_id, _ = ask(runtime, "delete_file", {"path": "/tmp/c"})
    csrf = login(client, token)
    r = post(client, f"/desk/tasks/{task_id}/reroute", csrf_token=csrf, group=" ", reason="")
    assert r.status_code == 400 and "Name the approver group." in r.text
    r = post(client, f"/desk/tasks/{task_id}/reroute", csrf_token=csrf, group="operators")
    assert r.status_code == 409
    r = post(
        client, f"/desk/tasks/{task_id}/reroute", csrf_token=csrf, group="finance", reason="money"
    )
    assert r.status_code == 303
    page = client.get(f"/desk/tasks/{task_id}").text
    assert '<p class="flash" role="status">Re-routed to finance</p>' in page
    assert "rerouted" in page and "to_group" in page
    # Alice is not in finance: she can no longer decide it.
    assert "Only members of approver group finance" in page
    task = runtime.desk.get(task_id)
    assert task is not None and task.approver_group == "finance"
    assert task.state is ApprovalState.PENDING


def test_reroute_to_a_group_without_approvers_warns(runtime: Runtime, client: TestClient) -> None:
    _, token = key(runtime, "alice", "approver", "operators")
    gone, _ = key(runtime, "gus", "approver", "ghosts")
    assert runtime.api_keys.revoke(gone)  # a revoked key does not count
    key(runtime, "root", "admin")  # nor does an admin (in every group)
    task_id, _ = ask(runtime, "delete_file", {"path": "/tmp/d"})
    csrf = login(client, token)
    r = post(client, f"/desk/tasks/{task_id}/reroute", csrf_token=csrf, group="ghosts")
    assert r.status_code == 303  # accepted: the group may be filled later
    page = client.get(f"/desk/tasks/{task_id}").text
    assert "Re-routed to ghosts. Warning: no active approver key is in group" in page
    task = runtime.desk.get(task_id)
    assert task is not None and task.approver_group == "ghosts"


def test_revoked_key_is_logged_out_on_the_next_request(
    runtime: Runtime, client: TestClient
) -> None:
    key_id, token = key(runtime, "alice", "approver", "operators")
    task_id, _ = ask(runtime, "delete_file", {"path": "/tmp/d"})
    csrf = login(client, token)
    assert runtime.api_keys.revoke(key_id)
    r = post(client, f"/desk/tasks/{task_id}/approve", csrf_token=csrf, reason="late")
    assert r.status_code == 303
    assert r.headers["location"].startswith("/desk/login")
    assert task_state(runtime, task_id) is ApprovalState.PENDING
    assert client.get("/desk").status_code == 303
    login_page = client.get("/desk/login").text
    assert "Your session has ended. Log in again." in login_page
    r = client.post("/desk/login", data={"token": token, "csrf_token": csrf_of(login_page)})
    assert r.status_code == 401


def test_session_ends_after_eight_hours(
    runtime: Runtime, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, token = key(runtime, "alice", "approver", "operators")
    login(client, token)
    later = time.time() + 8 * 3600 + 5
    monkeypatch.setattr(desk_module, "time", SimpleNamespace(time=lambda: later))
    assert client.get("/desk").status_code == 303


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/desk/nope"),
        ("GET", "/desk/tasks"),
        ("GET", "/desk/tasks/task_x/nope"),
        ("POST", "/desk/nope"),
        ("DELETE", "/desk/login/x"),
    ],
)
def test_unknown_desk_paths_are_the_desk_404_page(
    runtime: Runtime, client: TestClient, method: str, path: str
) -> None:
    login_page = client.get("/desk/login")
    r = client.request(method, path)
    assert r.status_code == 404, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "Page not found" in r.text and '"detail"' not in r.text
    for header in ("content-security-policy", "x-frame-options", "cache-control"):
        assert r.headers[header] == login_page.headers[header]


def test_the_login_page_says_where_the_session_is_kept(client: TestClient) -> None:
    text = " ".join(client.get("/desk/login").text.split())
    assert "keeps only its id" not in text  # sessions are in the database now
    assert "Warden keeps the session in its database" in text
    assert "never stored" in text


def test_unknown_task_is_a_404_page(runtime: Runtime, client: TestClient) -> None:
    _, token = key(runtime, "alice", "approver", "operators")
    csrf = login(client, token)
    r = client.get("/desk/tasks/task_nope")
    assert r.status_code == 404 and "Task not found" in r.text
    r = post(client, "/desk/tasks/task_nope/approve", csrf_token=csrf, reason="?")
    assert r.status_code == 404


def test_filters(runtime: Runtime, client: TestClient) -> None:
    _, token = key(runtime, "alice", "admin")
    delete_id, _ = ask(runtime, "delete_file", {"path": "/tmp/e"})
    pay_id, _ = ask(runtime, "transfer_funds", {"to": "x", "amount": 1})
    login(client, token)
    ops = client.get("/desk", params={"group": "operators"}).text
    assert delete_id in ops and pay_id not in ops
    acs = client.get("/desk", params={"wire": "acs", "state": "all"}).text
    assert delete_id in acs and pay_id in acs
    assert "No tasks match" in client.get("/desk", params={"wire": "spend"}).text
    r = client.get("/desk", params={"state": "bogus<b>"})
    assert r.status_code == 400 and "bogus&lt;b&gt;" in r.text and "bogus<b>" not in r.text


def test_the_state_filter_takes_every_task_state_and_says_so(
    runtime: Runtime, client: TestClient
) -> None:
    """The unknown-state message lists exactly what the filter accepts: every state, ``all``."""
    _, token = key(runtime, "alice", "admin")
    login(client, token)
    accepted = [s.value for s in ApprovalState] + ["all"]
    r = client.get("/desk", params={"state": "bogus"})
    assert r.status_code == 400
    listed = re.search(r"choose one of: ([a-z, ]+)\.", r.text)
    assert listed is not None, r.text
    assert listed.group(1).split(", ") == accepted
    for state in accepted:
        assert client.get("/desk", params={"state": state}).status_code == 200, state
    # The JSON API's filter (a Literal, for its OpenAPI schema) names the same states.
    assert list(get_args(StateFilter)) == accepted


def test_the_wire_filter_takes_the_task_wires_and_says_so(
    runtime: Runtime, client: TestClient
) -> None:
    """An unknown wire is a 400 listing the wires a task can come from, as on /v1/approvals;
    an empty wire is the form's "any wire"; an empty state is refused as on /v1/approvals
    (the form's state is a select, never empty) (decision 1156)."""
    _, token = key(runtime, "alice", "admin")
    login(client, token)
    r = client.get("/desk", params={"wire": "bogus"})
    assert r.status_code == 400
    listed = re.search(r"Unknown wire 'bogus'; choose one of: ([a-z, ]+)\.", unescape(r.text))
    assert listed is not None, r.text
    assert listed.group(1).split(", ") == list(TASK_WIRES)
    for wire in (*TASK_WIRES, ""):
        assert client.get("/desk", params={"wire": wire}).status_code == 200, wire
    r = client.get("/desk", params={"state": ""})
    assert r.status_code == 400 and "Unknown state ''" in unescape(r.text)
    assert client.get("/desk", params={"group": "", "wire": ""}).status_code == 200


def test_everything_is_escaped(runtime: Runtime, client: TestClient) -> None:
    _, token = key(runtime, "alice", "approver", "operators")
    evil = "<script>alert('x')</script>"
    task_id, _ = ask(runtime, "delete_file", {"path": evil, "note": '"><img src=x>'})
    csrf = login(client, token)
    listing = client.get("/desk").text
    page = client.get(f"/desk/tasks/{task_id}").text
    for html in (listing, page):
        assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page
    assert "&lt;script&gt;" in listing
    r = post(client, f"/desk/tasks/{task_id}/deny", csrf_token=csrf, reason="<b>no</b>")
    assert r.status_code == 303
    page = client.get(f"/desk/tasks/{task_id}").text
    assert "&lt;b&gt;no&lt;/b&gt;" in page and "<b>no</b>" not in page


def test_arguments_keep_their_layout_but_not_hidden_characters(
    runtime: Runtime, client: TestClient
) -> None:
    _, token = key(runtime, "alice", "approver", "operators")
    task_id, _ = ask(runtime, "delete_file", {"path": "/tmp/safe\u202eetc", "note": "l1\nl2"})
    login(client, token)
    page = client.get(f"/desk/tasks/{task_id}").text
    block = page[page.index("<dt>Arguments</dt>") :]
    block = block[: block.index("</pre>")]
    shown = '{\n  "note": "l1\\nl2",\n  "path": "/tmp/safe\\u202eetc"\n}'
    assert shown.replace('"', "&#34;") in block
    assert "\u202e" not in page and "\\u000a" not in block


def test_long_arguments_are_truncated_in_the_list(runtime: Runtime, client: TestClient) -> None:
    _, token = key(runtime, "alice", "approver", "operators")
    task_id, _ = ask(runtime, "delete_file", {"path": "/data/" + "a" * 400})
    login(client, token)
    listing = client.get("/desk").text
    assert "a" * 400 not in listing and "…" in listing and "full arguments" in listing
    assert "a" * 400 in client.get(f"/desk/tasks/{task_id}").text


def _task(state: ApprovalState, expires_in: timedelta, now: datetime) -> Task:
    return Task(
        id="task_t",
        kind=TaskKind.ACTION,
        state=state,
        wire="acs",
        created_at=now,
        updated_at=now,
        expires_at=now + expires_in,
        action={},
        action_hash="0" * 64,
        scope="s",
        requester=Requester("bot"),
        approver_group="operators",
    )


def test_time_left() -> None:
    now = datetime(2025, 1, 1, tzinfo=UTC)
    pending = ApprovalState.PENDING
    assert time_left(_task(pending, timedelta(minutes=14, seconds=59), now), now) == "14 min left"
    assert time_left(_task(pending, timedelta(seconds=30), now), now) == "under 1 min left"
    assert time_left(_task(pending, timedelta(hours=2, minutes=5), now), now) == "2 h 5 min left"
    assert time_left(_task(pending, timedelta(days=3), now), now) == "3 days left"
    assert time_left(_task(pending, timedelta(seconds=-1), now), now) == "expired"
    assert time_left(_task(ApprovalState.EXPIRED, timedelta(0), now), now) == "expired"
    assert time_left(_task(ApprovalState.DENIED, timedelta(minutes=5), now), now) == "closed"


def test_login_returns_to_the_page_asked_for(runtime: Runtime, client: TestClient) -> None:
    _, token = key(runtime, "alice", "approver", "operators")
    task_id, _ = ask(runtime, "delete_file", {"path": "/tmp/f"})
    r = client.get(f"/desk/tasks/{task_id}")
    assert r.status_code == 303
    form = client.get(r.headers["location"])
    assert f'name="next" value="/desk/tasks/{task_id}"' in form.text
    csrf = csrf_of(form.text)
    r = post(client, "/desk/login", token=token, csrf_token=csrf, next=f"/desk/tasks/{task_id}")
    assert r.status_code == 303 and r.headers["location"] == f"/desk/tasks/{task_id}"
    # Logged in: the login form sends the browser on.
    assert client.get("/desk/login").headers["location"] == "/desk"
    client.cookies.clear()
    for evil in ("//evil.example/desk", "https://evil.example/desk", "/v1/budgets", "/\\evil"):
        csrf = csrf_of(client.get("/desk/login").text)
        r = post(client, "/desk/login", token=token, csrf_token=csrf, next=evil)
        assert r.status_code == 303 and r.headers["location"] == "/desk", evil
        client.cookies.clear()


def test_control_and_bidi_characters_are_shown_escaped(
    runtime: Runtime, client: TestClient
) -> None:
    _, token = key(runtime, "alice", "approver", "operators")
    # Rendered raw, the override would make this path read "/tmp/safedwssap/cte".
    task_id, _ = ask(runtime, "delete_file", {"path": "/tmp/safe\u202eetc/passwd\u202c"})
    login(client, token)
    for html in (client.get("/desk").text, client.get(f"/desk/tasks/{task_id}").text):
        assert "\u202e" not in html and "\u202c" not in html
        assert "\\u202e" in html


def test_a_desk_reason_needs_a_visible_character(runtime: Runtime, client: TestClient) -> None:
    """Decision 973: the web desk's approve and deny forms use the same rule as the REST
    deny and budget requests (warden.reasons): invisible characters are no reason."""
    _, token = key(runtime, "alice", "approver", "finance")
    task_id, _ = ask(runtime, "transfer_funds", {"to": "acct-9", "amount": 5000})
    csrf = login(client, token)
    for action in ("deny", "approve"):
        for blank in ("\u200b", " \u2060\ufeff "):
            r = post(client, f"/desk/tasks/{task_id}/{action}", csrf_token=csrf, reason=blank)
            assert r.status_code == 400
            assert "A reason needs a visible character" in r.text
            assert task_state(runtime, task_id) is ApprovalState.PENDING


def test_two_desk_session_cookies_are_no_session(runtime: Runtime, client: TestClient) -> None:
    """Decision 976 (decision 840's rule on the desk): a request carrying the desk's
    session cookie twice — two sessions, or one twice, in one Cookie line or two — is
    answered as one with no valid session; which one would count depends on order."""
    _, alice = key(runtime, "alice", "approver", "operators")
    _, bob = key(runtime, "bob", "approver", "operators")
    login(client, alice)
    mine = client.cookies.get(SESSION_COOKIE)
    client.cookies.clear()
    login(client, bob)
    theirs = client.cookies.get(SESSION_COOKIE)
    client.cookies.clear()
    one = client.get("/desk", headers={"cookie": f"{SESSION_COOKIE}={mine}"})
    assert one.status_code == 200 and "alice" in one.text
    for lines in (
        [("cookie", f"{SESSION_COOKIE}={mine}; {SESSION_COOKIE}={theirs}")],
        [("cookie", f"{SESSION_COOKIE}={mine}; theme=dark; {SESSION_COOKIE}={mine}")],
        [("cookie", f"{SESSION_COOKIE}={theirs}"), ("cookie", f"{SESSION_COOKIE}={mine}")],
    ):
        r = client.get("/desk/tasks/task_x", headers=lines)
        assert r.status_code == 303, lines
        assert r.headers["location"] == "/desk/login?next=%2Fdesk%2Ftasks%2Ftask_x"
    # Each session is still valid on its own.
    again = client.get("/desk", headers={"cookie": f"{SESSION_COOKIE}={theirs}"})
    assert again.status_code == 200 and "bob" in again.text
