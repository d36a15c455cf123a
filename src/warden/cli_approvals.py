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
import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import httpx
import typer
from rich.markup import escape
from rich.table import Table

from warden.cli_options import EXIT_BAD_INPUT, EXIT_FAILURE_FOUND, console, err_console

approvals_app = typer.Typer(
    help="Decide approval tasks on a running Warden (maker-checker).", no_args_is_help=True
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
AsJson = Annotated[bool, typer.Option("--json", help="Print the JSON the server returned.")]
Reason = Annotated[str, typer.Option("--reason", help="Why (recorded in the audit chain).")]
DEFAULT_URL = "http://127.0.0.1:8787"


def _call(method: str, url: str, token: str, path: str, **kw: Any) -> dict[str, Any]:
    """One REST call; the envelope's data, or exit 1 (refused) / 2 (unreachable, bad)."""
    if not token:
        err_console.print("[red]error:[/red] an API key is required (--token or WARDEN_TOKEN)")
        raise typer.Exit(EXIT_BAD_INPUT)
    try:
        with httpx.Client(base_url=url.rstrip("/"), timeout=30) as client:
            r = client.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kw)
    except httpx.HTTPError as exc:
        err_console.print(f"[red]error:[/red] cannot reach Warden at {escape(url)}: {exc}")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    try:
        body = r.json()
    except ValueError as exc:
        err_console.print(f"[red]error:[/red] HTTP {r.status_code} without a JSON body")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    if r.status_code >= 400:
        gate = body.get("blockedBy", "error") if isinstance(body, dict) else "error"
        message = body.get("message", "") if isinstance(body, dict) else ""
        err_console.print(f"[red]{escape(str(gate))}[/red] (HTTP {r.status_code}): {message}")
        code = EXIT_BAD_INPUT if r.status_code in (400, 401, 413) else EXIT_FAILURE_FOUND
        raise typer.Exit(code)
    data: dict[str, Any] = body["data"]
    return data


def _left(expires_at: str) -> str:
    seconds = (datetime.fromisoformat(expires_at) - datetime.now(UTC)).total_seconds()
    if seconds <= 0:
        return "expired"
    return f"{int(seconds // 60)} min" if seconds >= 60 else f"{int(seconds)} s"


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")


def _print_task(task: dict[str, Any]) -> None:
    action = task["action"]
    console.print(f"[bold]{escape(task['id'])}[/bold]  {task['state']}  ({task['wire']})")
    console.print(f"action     {escape(str(action.get('name')))} via {action.get('method')}")
    console.print(f"arguments  {escape(json.dumps(action.get('arguments'), sort_keys=True))}")
    console.print(f"question   {escape(task['question'])}")
    policy = task.get("policy") or {}
    bundle = policy.get("bundle") or {}
    console.print(
        f"policy     {escape(str(bundle.get('id')))}@{escape(str(bundle.get('version')))} "
        f"rules {', '.join(policy.get('rules') or [])}: {escape(policy.get('reasoning') or '')}"
    )
    req = task["requester"]
    console.print(f"requester  {escape(str(req.get('agent_id')))} ({req.get('principal')})")
    approvals = sum(1 for v in task["votes"] if v["decision"] == "approve")
    console.print(
        f"group      {escape(task['approver_group'])}, "
        f"{approvals}/{task['approvals_required']} approvals, "
        f"expires {task['expires_at']} ({_left(task['expires_at'])})"
    )
    console.print("trail:")
    for h in task["history"]:
        by = (h.get("by") or {}).get("principal") or "warden"
        console.print(
            f"  {h['at']}  {h['event']:<9} by {escape(by)}  "
            f"{escape(h.get('reason') or '')}  [dim]{h['entry_hash'][:16]}…[/dim]"
        )


@approvals_app.command("list")
def list_tasks(
    token: Token = "",
    url: Url = DEFAULT_URL,
    state: Annotated[
        str, typer.Option(help="pending, approved, denied, expired, consumed, canceled or all.")
    ] = "pending",
    group: Annotated[str | None, typer.Option(help="Only this approver group.")] = None,
    as_json: AsJson = False,
) -> None:
    """List approval tasks (default: pending), newest first."""
    params = {"state": state, **({"group": group} if group else {})}
    data = _call("GET", url, token, "/v1/approvals", params=params)
    if as_json:
        _print_json(data)
        return
    table = Table(title=f"{data['count']} {state} approval task(s)")
    for col in ("task", "state", "action", "requester", "group", "approvals", "left"):
        table.add_column(col)
    for t in data["tasks"]:
        approvals = sum(1 for v in t["votes"] if v["decision"] == "approve")
        table.add_row(
            t["id"],
            t["state"],
            escape(str(t["action"].get("name"))),
            escape(str(t["requester"].get("agent_id"))),
            escape(t["approver_group"]),
            f"{approvals}/{t['approvals_required']}",
            _left(t["expires_at"]) if t["state"] == "pending" else "",
        )
    console.print(table)


@approvals_app.command()
def show(task_id: str, token: Token = "", url: Url = DEFAULT_URL, as_json: AsJson = False) -> None:
    """Show one task: action, arguments, policy, requester, votes and trail."""
    data = _call("GET", url, token, f"/v1/approvals/{task_id}")
    if as_json:
        _print_json(data)
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
    data = _call("POST", url, token, f"/v1/approvals/{task_id}/approve", json={"reason": reason})
    if as_json:
        _print_json(data)
    else:
        console.print(f"task {task_id} is now {data['task']['state']}")


@approvals_app.command()
def deny(
    task_id: str,
    reason: Annotated[str, typer.Option("--reason", help="Why (required; recorded).")],
    token: Token = "",
    url: Url = DEFAULT_URL,
    as_json: AsJson = False,
) -> None:
    """Deny a pending task with a reason."""
    data = _call("POST", url, token, f"/v1/approvals/{task_id}/deny", json={"reason": reason})
    if as_json:
        _print_json(data)
    else:
        console.print(f"task {task_id} is now {data['task']['state']}")


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
        f"/v1/approvals/{task_id}/reroute",
        json={"group": group, "reason": reason},
    )
    if as_json:
        _print_json(data)
    else:
        console.print(f"task {task_id} is routed to {data['task']['approver_group']}")
