"""``warden approvals``: list, show, approve, deny and re-route approval tasks.

A client of a running Warden's ``/v1/approvals`` REST API (so notifications and the
audit chain are the server's, whatever machine the approver is on). The approver
authenticates with an API key of role approver or admin (``--token`` or
``WARDEN_TOKEN``).

Exit codes: 0 success, 1 refused (not found, not permitted, already decided),
2 bad input, configuration or an unreachable server.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.markup import escape

from warden.cli_options import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE_FOUND,
    HELP_SETTINGS,
    console,
    err_console,
)
from warden.cli_output import print_json, print_table, table

approvals_app = typer.Typer(
    **HELP_SETTINGS,
    help="Decide approval tasks on a running Warden (maker-checker).",
    no_args_is_help=True,
    add_completion=False,
)

Url = Annotated[
    str,
    typer.Option("--url", envvar="WARDEN_URL", help="The Warden server (default: local)."),
]
Token = Annotated[
    str,
    typer.Option(
        "--token",
        envvar="WARDEN_TOKEN",
        help="An API key of role approver or admin (`warden keys create`).",
        show_default=False,
    ),
]
AsJson = Annotated[
    bool,
    typer.Option("--json", help="Print the server's data object as JSON (docs/cli-json.md)."),
]
Reason = Annotated[str, typer.Option("--reason", help="Why (recorded in the audit chain).")]
DEFAULT_URL = "http://127.0.0.1:8787"


def _call(method: str, url: str, token: str, path: str, **kw: Any) -> dict[str, Any]:
    """One REST call; the envelope's data, or exit 1 (refused) / 2 (unreachable, bad)."""
    if not token:
        err_console.print("[red]error:[/red] an API key is required (--token or WARDEN_TOKEN)")
        raise typer.Exit(EXIT_BAD_INPUT)
    if not (token.isascii() and token.isprintable()):
        # Not echoed: it is a secret. (An undecodable WARDEN_TOKEN arrives as surrogates.)
        err_console.print(
            "[red]error:[/red] the API key (--token or WARDEN_TOKEN) is not printable "
            "ASCII, so it cannot be sent as an HTTP header"
        )
        raise typer.Exit(EXIT_BAD_INPUT)
    import httpx

    try:
        base = httpx.URL(url.rstrip("/"))
    except (httpx.InvalidURL, UnicodeError) as exc:
        err_console.print(
            f"[red]error:[/red] --url or WARDEN_URL is not a URL: {escape(repr(url))}: "
            f"{escape(str(exc))}"
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            r = client.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kw)
    except httpx.HTTPError as exc:
        err_console.print(
            f"[red]error:[/red] cannot reach Warden at {escape(url)}: {escape(str(exc))}"
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    try:
        body = r.json()
    except ValueError as exc:
        err_console.print(f"[red]error:[/red] HTTP {r.status_code} without a JSON body")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    if r.status_code >= 400:
        gate = body.get("blockedBy", "error") if isinstance(body, dict) else "error"
        message = body.get("message", "") if isinstance(body, dict) else ""
        err_console.print(f"[red]{_safe(gate)}[/red] (HTTP {r.status_code}): {_safe(message)}")
        code = EXIT_BAD_INPUT if r.status_code in (400, 401, 413) else EXIT_FAILURE_FOUND
        raise typer.Exit(code)
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, dict):
        err_console.print(f"[red]error:[/red] {escape(url)} did not answer as Warden's /v1 API")
        raise typer.Exit(EXIT_BAD_INPUT)
    return data


def _safe(value: Any) -> str:
    """Agent-controlled text for the terminal: controls and bidi escaped, markup too."""
    from warden.approvals.display import visible

    return escape(visible(str(value)))


def _task_path(task_id: str, verb: str = "") -> str:
    return f"/v1/approvals/{quote(task_id, safe='')}" + (f"/{verb}" if verb else "")


def _left(expires_at: str) -> str:
    seconds = (datetime.fromisoformat(expires_at) - datetime.now(UTC)).total_seconds()
    if seconds <= 0:
        return "expired"
    return f"{int(seconds // 60)} min" if seconds >= 60 else f"{int(seconds)} s"


def _approvals(task: dict[str, Any]) -> int:
    """The approve votes that count (a vote whose key was revoked is ``void``)."""
    return sum(1 for v in task["votes"] if v["decision"] == "approve" and not v.get("void"))


def _print_task(task: dict[str, Any]) -> None:
    if not isinstance(task, dict) or "action" not in task:
        err_console.print("[red]error:[/red] the answer is not an approval task")
        raise typer.Exit(EXIT_BAD_INPUT)
    action = task["action"]
    console.print(
        f"[bold]{_safe(task['id'])}[/bold]  {_safe(task['state'])}  ({_safe(task['wire'])})"
    )
    console.print(f"action     {_safe(action.get('name'))} via {_safe(action.get('method'))}")
    console.print(f"arguments  {_safe(json.dumps(action.get('arguments'), sort_keys=True))}")
    console.print(f"question   {_safe(task['question'])}")
    policy = task.get("policy") or {}
    bundle = policy.get("bundle") or {}
    console.print(
        f"policy     {_safe(bundle.get('id'))}@{_safe(bundle.get('version'))} "
        f"rules {_safe(', '.join(policy.get('rules') or []))}: "
        f"{_safe(policy.get('reasoning') or '')}"
    )
    req = task["requester"]
    behind = f" (owner {_safe(req['principal'])})" if req.get("principal") else ""
    if req.get("claimed_user_id"):
        behind += f" (claims user {_safe(req['claimed_user_id'])}, unverified)"
    console.print(f"requester  {_safe(req.get('agent_id'))}{behind}")
    approvals = _approvals(task)
    console.print(
        f"group      {_safe(task['approver_group'])}, "
        f"{approvals}/{_safe(task['approvals_required'])} approvals, "
        f"expires {_safe(task['expires_at'])} ({_left(task['expires_at'])})"
    )
    console.print("trail:")
    for h in task["history"]:
        by = (h.get("by") or {}).get("principal") or "warden"
        console.print(
            f"  {_safe(h['at'])}  {_safe(h['event']):<9} by {_safe(by)}  "
            f"{_safe(h.get('reason') or '')}  [dim]{_safe(h['entry_hash'])}[/dim]"
        )


@approvals_app.command("list")
def list_tasks(
    token: Token = "",
    url: Url = DEFAULT_URL,
    state: Annotated[
        str, typer.Option(help="pending, approved, denied, expired, consumed, canceled or all.")
    ] = "pending",
    group: Annotated[str | None, typer.Option(help="Only this approver group.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many.")] = 100,
    as_json: AsJson = False,
) -> None:
    """List approval tasks (default: pending), newest first."""
    params: dict[str, Any] = {"state": state, "limit": limit, **({"group": group} if group else {})}
    data = _call("GET", url, token, "/v1/approvals", params=params)
    if as_json:
        print_json(data)
        return
    more = " (more exist: raise --limit)" if data.get("truncated") else ""
    listing = table(
        "task",
        "state",
        "action",
        "requester",
        "group",
        "approvals",
        "left",
        title=f"{data['count']} approval task(s){'' if state == 'all' else ', ' + _safe(state)}"
        f"{more}",
        whole=("task",),  # copied into `approvals approve <task>`: never folded
    )
    for task in data["tasks"]:
        approvals = _approvals(task)
        listing.add_row(
            _safe(task["id"]),
            _safe(task["state"]),
            _safe(task["action"].get("name")),
            _safe(task["requester"].get("agent_id")),
            _safe(task["approver_group"]),
            f"{approvals}/{_safe(task['approvals_required'])}",
            _left(task["expires_at"]) if task["state"] == "pending" else "",
        )
    print_table(console, listing)


@approvals_app.command()
def show(task_id: str, token: Token = "", url: Url = DEFAULT_URL, as_json: AsJson = False) -> None:
    """Show one task: action, arguments, policy, requester, votes and trail."""
    data = _call("GET", url, token, _task_path(task_id))
    if as_json:
        print_json(data)
    else:
        _print_task(data["task"])


@approvals_app.command()
def approve(
    task_id: str,
    token: Token = "",
    url: Url = DEFAULT_URL,
    reason: Reason = "",
    as_json: AsJson = False,
) -> None:
    """Approve a pending task (one vote; N distinct approvers when its rule needs N)."""
    data = _call("POST", url, token, _task_path(task_id, "approve"), json={"reason": reason})
    if as_json:
        print_json(data)
    else:
        console.print(f"task {_safe(task_id)} is now {_safe(data['task']['state'])}")


@approvals_app.command()
def deny(
    task_id: str,
    reason: Annotated[str, typer.Option("--reason", help="Why (required; recorded).")],
    token: Token = "",
    url: Url = DEFAULT_URL,
    as_json: AsJson = False,
) -> None:
    """Deny a pending task with a reason."""
    data = _call("POST", url, token, _task_path(task_id, "deny"), json={"reason": reason})
    if as_json:
        print_json(data)
    else:
        console.print(f"task {_safe(task_id)} is now {_safe(data['task']['state'])}")


@approvals_app.command()
def reroute(
    task_id: str,
    group: Annotated[str, typer.Option("--group", help="The approver group to send it to.")],
    token: Token = "",
    url: Url = DEFAULT_URL,
    reason: Reason = "",
    as_json: AsJson = False,
) -> None:
    """Send a pending task to another approver group."""
    data = _call(
        "POST",
        url,
        token,
        _task_path(task_id, "reroute"),
        json={"group": group, "reason": reason},
    )
    if as_json:
        print_json(data)
    else:
        console.print(f"task {_safe(task_id)} is routed to {_safe(data['task']['approver_group'])}")
        if data.get("warning"):
            err_console.print(f"[yellow]warning:[/yellow] {_safe(data['warning'])}")
