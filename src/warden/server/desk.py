"""The web approval desk: server-rendered pages under ``/desk`` for human approvers.

An approver or admin logs in with an API key (``POST /desk/login``); the desk keeps
the key's id and a random session id in a signed session cookie, never the token. The
session lives in the database (:mod:`warden.identity.desk_sessions`): logging out
deletes it, so a copied cookie stops working on every replica, and revoking the key
deletes all of its sessions. Every request looks the session and the key up again, so
a revoked key (or one whose role was lowered) is logged out at once. Pages list the
approval tasks, show one task in full (action, policy, requester, votes and its audit
trail) and let an approver approve, deny or re-route it through
:class:`~warden.approvals.desk.ApprovalDesk`, which applies maker-checker and group
membership itself.

Routes (none in the OpenAPI schema)::

    GET  /desk/login                     the login form (an API key)
    POST /desk/login                     log in: 303 to /desk, or the form again (401/403)
    POST /desk/logout                    log out (CSRF-protected)
    GET  /desk                           tasks: ?state=pending|approved|denied|expired|
                                         consumed|canceled|all &group= &wire=
    GET  /desk/tasks/{task_id}           one task in full (404 page if unknown)
    POST /desk/tasks/{task_id}/approve   reason required; 303 back with a flash message
    POST /desk/tasks/{task_id}/deny      reason required
    POST /desk/tasks/{task_id}/reroute   group required, reason optional
    GET  /desk/static/desk.css           the stylesheet
    GET  /desk/ops[/…]                   the operator view, admin keys only
                                         (:mod:`warden.server.desk_ops`)
    *    /desk/<anything else>           the desk's 404 page

**Session.** Starlette's ``SessionMiddleware`` (itsdangerous timestamp signature),
applied to ``/desk`` paths only, cookie ``warden_desk`` with path ``/desk``,
HttpOnly, ``SameSite=Strict``, ``Secure`` when the public URL is https, max age
8 hours; the login time is kept in the session too and a session older than
8 hours is refused even if its cookie was re-signed since. The signing secret is a
random 32-byte secret generated once and kept in the database
(:func:`warden.store.secrets_sql.server_secret`), not derived from the IKM: under
ACS-Core every Observed Agent holds the IKM, and one that could sign a desk cookie
could approve its own tasks. Every replica on the database accepts the same cookies.

**CSRF.** Every form carries a random per-session token (``csrf_token``), created
at login (and for the login form itself) and compared with
:func:`hmac.compare_digest`; a missing or wrong token is a 403 page and nothing
changes. ``SameSite=Strict`` is a second line. Pages are sent with a strict
Content-Security-Policy (no script at all), ``frame-ancestors 'none'``,
``Referrer-Policy: no-referrer`` and ``Cache-Control: no-store``.

Forms are read up to 64 KiB (``application/x-www-form-urlencoded`` only) and parsed
with the standard library. Every value is HTML-escaped (Jinja2 autoescape).
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.middleware.sessions import SessionMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from warden.approvals.desk import MAX_REASON_CHARS, DeskError, TaskNotFound
from warden.approvals.display import Layout, shown
from warden.approvals.group_check import empty_group_warning
from warden.approvals.tasks import TASK_WIRES, ApprovalState, Task
from warden.core.media import repeated_params_problem
from warden.errors import UNAVAILABLE_RETRY_AFTER_S, CouldNotDecide, failure_log_level
from warden.identity.api_keys import Identity, Role
from warden.identity.credentials import cookies_named, header_lines
from warden.identity.desk_sessions import DeskSessionStore
from warden.reasons import NO_REASON, says_something
from warden.runtime import Runtime
from warden.store.secrets_sql import server_secret

log = logging.getLogger(__name__)

PREFIX = "/desk"
SESSION_COOKIE = "warden_desk"
SESSION_INFO = "warden:desk-session"
SESSION_MAX_AGE_S = 8 * 60 * 60
MAX_FORM_BYTES = 64 * 1024
MAX_FORM_FIELDS = 16
MAX_TOKEN_FIELD_CHARS = 1024
MAX_FILTER_CHARS = 64
MAX_TASK_ID_CHARS = 200
LIST_LIMIT = 100
PREVIEW_CHARS = 120

#: The state filter of the task list: every task state, from the one enum; ``all`` is no filter.
STATE_FILTERS = (*(s.value for s in ApprovalState), "all")

#: Methods the catch-all 404 page answers (every method a browser or script may send).
_ANY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

#: Sent with every desk response: no script, no framing, no referrer, no caching.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def session_secret(runtime: Runtime) -> str:
    """The session cookie's signing secret (hex): random, kept in the database."""
    return server_secret(runtime.store, SESSION_INFO).hex()


class DeskSessions:
    """``SessionMiddleware`` for ``/desk`` paths only: the other routes never see (nor
    set) the desk cookie."""

    def __init__(self, app: ASGIApp, secret_key: str, https_only: bool) -> None:
        self.app = app
        self.sessions = SessionMiddleware(
            app,
            secret_key=secret_key,
            session_cookie=SESSION_COOKIE,
            max_age=SESSION_MAX_AGE_S,
            path=PREFIX,
            same_site="strict",
            https_only=https_only,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == PREFIX or path.startswith(PREFIX + "/")):
            if cookies_named(header_lines(Headers(scope=scope)), SESSION_COOKIE) > 1:
                # Two desk sessions in one request: which one counts would depend on
                # order. Refused as an invalid one (decision 840's rule, decision 976):
                # the request is seen with no cookie, so no session.
                kept = [(k, v) for k, v in scope["headers"] if k.lower() != b"cookie"]
                scope = {**scope, "headers": kept}
            await self.sessions(scope, receive, send)
        else:
            await self.app(scope, receive, send)


class _FormRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Form(dict[str, str]):
    """A form's fields, the first value of each; ``repeated``: names sent more than once."""

    repeated: set[str]


async def read_form(request: Request) -> Form:
    """An urlencoded form body, read up to :data:`MAX_FORM_BYTES`; the first value of
    each field. Raises _FormRefused (413, 415 or 400)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        raise _FormRefused(415, "The form must be sent as application/x-www-form-urlencoded.")
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_FORM_BYTES):
        raise _FormRefused(413, f"The form is larger than {MAX_FORM_BYTES} bytes.")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            raise _FormRefused(413, f"The form is larger than {MAX_FORM_BYTES} bytes.")
        chunks.append(chunk)
    try:
        text = b"".join(chunks).decode("utf-8")
        pairs = parse_qsl(
            text, keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_FORM_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        raise _FormRefused(400, "The form could not be read.") from None
    out = Form()
    out.repeated = {name for name, n in Counter(n for n, _ in pairs).items() if n > 1}
    for name, value in pairs:
        out.setdefault(name, value)
    return out


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def pretty_json(value: Any) -> Layout:
    """Indented JSON; its line breaks are layout (a newline inside a value stays ``\\n``)."""
    return Layout(json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True))


def truncate(text: str, limit: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def time_left(task: Task, now: datetime) -> str:
    """What the list shows about the task's clock: ``14 min left``, ``expired``, or
    ``closed`` for a task decided for good (denied, consumed, canceled)."""
    if task.state is ApprovalState.EXPIRED:
        return "expired"
    if task.state not in (ApprovalState.PENDING, ApprovalState.APPROVED):
        return "closed"
    seconds = (task.expires_at - now).total_seconds()
    if seconds <= 0:
        return "expired"
    minutes = int(seconds // 60)
    if minutes < 1:
        return "under 1 min left"
    if minutes < 60:
        return f"{minutes} min left"
    hours, mins = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {mins} min left" if mins else f"{hours} h left"
    return f"{hours // 24} days left"


def show_time(value: object) -> str:
    """An RFC 3339 time as ``YYYY-MM-DD HH:MM:SS UTC`` (anything else as text)."""
    if value is None:
        return ""
    when = value
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    if not isinstance(when, datetime):
        return str(value)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def task_href(task_id: str) -> str:
    return f"{PREFIX}/tasks/{quote(task_id, safe='')}"


def _bundle_ref(policy: dict[str, Any]) -> str:
    bundle = policy.get("bundle")
    if isinstance(bundle, dict) and bundle.get("id"):
        version = bundle.get("version")
        return f"{bundle['id']}@{version}" if version else str(bundle["id"])
    return ""


def _who(by: Any) -> str:
    if isinstance(by, dict) and by.get("principal"):
        key = by.get("key_id")
        return f"{by['principal']} (key {key})" if key else str(by["principal"])
    return "Warden"


_HISTORY_CORE = ("event", "at", "by", "reason", "entry_hash")


def _row(task: Task, now: datetime) -> dict[str, Any]:
    args = compact_json(task.action.get("arguments", {}))
    policy = task.policy
    return {
        "id": task.id,
        "href": task_href(task.id),
        "state": task.state.value,
        "wire": task.wire,
        "name": str(task.action.get("name", "")),
        "method": str(task.action.get("method", "")),
        "arguments": truncate(args),
        "truncated": len(args) > PREVIEW_CHARS,
        "reasoning": str(policy.get("reasoning") or ""),
        "rules": [str(r) for r in policy.get("rules") or ()],
        "agent": task.requester.agent_id,
        "principal": task.requester.principal,
        "claimed_user_id": task.requester.claimed_user_id,
        "group": task.approver_group,
        "approvals": len(task.approvals()),
        "required": task.approvals_required,
        "time_left": time_left(task, now),
        "expires_at": show_time(task.expires_at),
    }


def _detail(task: Task, viewer: Identity, now: datetime) -> dict[str, Any]:
    policy = task.policy
    bundle = policy.get("bundle") if isinstance(policy.get("bundle"), dict) else {}
    history = []
    for item in task.history:
        extra = {k: v for k, v in item.items() if k not in _HISTORY_CORE}
        history.append(
            {
                "event": str(item.get("event", "")),
                "at": show_time(item.get("at")),
                "by": _who(item.get("by")),
                "reason": str(item.get("reason") or ""),
                "entry_hash": str(item.get("entry_hash", "")),
                "extra": compact_json(extra) if extra else "",
            }
        )
    pending = task.state is ApprovalState.PENDING
    own = viewer.principal in task.requester.names()
    member = viewer.in_group(task.approver_group)
    voted = any(v.principal == viewer.principal and v.void is None for v in task.votes)
    if not pending:
        why_not = ""
    elif own:
        did = (
            f"own the agent {task.requester.agent_id} that requested this task"
            if task.requester.owns_agent(viewer.principal)
            else "requested this task"
        )
        why_not = f"You ({viewer.principal}) {did}, so you cannot decide it (maker-checker)."
    elif not member:
        mine = ", ".join(viewer.groups) or "none"
        why_not = (
            f"Only members of approver group {task.approver_group} can decide this task; "
            f"your groups: {mine}."
        )
    elif voted:
        why_not = "You have already voted on this task."
    else:
        why_not = ""
    return {
        **_row(task, now),
        "kind": task.kind.value,
        "question": task.question,
        "arguments_full": pretty_json(task.action.get("arguments", {})),
        "action_hash": task.action_hash,
        "scope": task.scope,
        "created_at": show_time(task.created_at),
        "updated_at": show_time(task.updated_at),
        "bundle": _bundle_ref(policy),
        "bundle_digest": str(bundle.get("digest") or "") if isinstance(bundle, dict) else "",
        "decision": str(policy.get("decision") or ""),
        "reason_codes": [str(c) for c in policy.get("reason_codes") or ()],
        # The modifications a grant still owes (redaction paths, never the values).
        "modifications": compact_json(policy["modifications"])
        if isinstance(policy.get("modifications"), dict)
        else "",
        "timeout_disposition": task.timeout_disposition,
        "correlation": compact_json(task.correlation) if task.correlation else "",
        "consumed_by": compact_json(task.consumed_by) if task.consumed_by else "",
        "detail": pretty_json(task.detail) if task.detail else "",
        "votes": [
            {
                "principal": v.principal,
                "key_id": v.key_id,
                "decision": v.decision,
                "reason": v.reason,
                "at": show_time(v.at),
                "void": v.void or "",
            }
            for v in task.votes
        ],
        "history": history,
        "pending": pending,
        "may_act": pending and not why_not,
        "why_not": why_not,
    }


def _safe_next(target: str | None) -> str:
    """A post-login destination: a path inside the desk, else ``/desk``."""
    if not target or "\\" in target or "//" in target:
        return PREFIX
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return PREFIX
    if parts.path != PREFIX and not parts.path.startswith(PREFIX + "/"):
        return PREFIX
    if parts.path.startswith(f"{PREFIX}/login") or parts.path.startswith(f"{PREFIX}/static"):
        return PREFIX
    return target


@dataclass
class _Desk:
    runtime: Runtime
    env: Environment
    css: str
    sessions: DeskSessionStore

    # -- session --------------------------------------------------------------------------

    def csrf(self, request: Request) -> str:
        token = request.session.get("csrf")
        if not isinstance(token, str) or len(token) < 32:
            token = secrets.token_urlsafe(32)
            request.session["csrf"] = token
        return token

    @staticmethod
    def csrf_ok(request: Request, form: dict[str, str]) -> bool:
        expected = request.session.get("csrf")
        given = form.get("csrf_token", "")
        if not isinstance(expected, str) or not expected or not given:
            return False
        return hmac.compare_digest(expected.encode("utf-8"), given.encode("utf-8"))

    def viewer(self, request: Request) -> Identity | None:
        """The logged-in approver, read afresh from the key table; None (and the
        session cleared) when there is none or the key may no longer use the desk."""
        session = request.session
        key_id = session.get("key_id")
        if key_id is None:
            return None
        auth_at = session.get("auth_at")
        # The login time bounds the session to 8 hours even if its cookie was re-signed.
        fresh = (
            isinstance(auth_at, int | float) and -60 <= time.time() - auth_at <= SESSION_MAX_AGE_S
        )
        # The session must still exist server-side: logging out (from any copy of the
        # cookie) or revoking the key deleted it.
        live = (
            fresh and isinstance(key_id, str) and self.sessions.key_of(session.get("sid")) == key_id
        )
        info = self.runtime.api_keys.get(key_id) if live and isinstance(key_id, str) else None
        identity = (
            Identity(info.key_id, info.principal, info.role, info.groups)
            if info is not None and info.active
            else None
        )
        if identity is None or not identity.may(Role.APPROVER):
            self.sessions.end(session.get("sid"))
            session.clear()
            session["flash"] = "Your session has ended. Log in again."
            return None
        return identity

    @staticmethod
    def to_login(request: Request, back: str | None = None) -> RedirectResponse:
        target = f"{PREFIX}/login"
        if back and back != PREFIX:
            target += "?" + urlencode({"next": back})
        return RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)

    # -- rendering ------------------------------------------------------------------------

    def page(
        self,
        request: Request,
        template: str,
        status: int = 200,
        viewer: Identity | None = None,
        **context: Any,
    ) -> HTMLResponse:
        flash = request.session.pop("flash", None)
        html = self.env.get_template(template).render(
            prefix=PREFIX,
            viewer=viewer,
            csrf_token=self.csrf(request),
            flash=flash if isinstance(flash, str) else None,
            error=context.pop("error", None),
            **context,
        )
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    def problem(
        self, request: Request, status: int, title: str, message: str, viewer: Identity | None
    ) -> HTMLResponse:
        return self.page(request, "desk/error.html", status, viewer, title=title, message=message)

    def unavailable(self, request: Request) -> HTMLResponse:
        """503 with ``Retry-After``: the store failed, so nothing was read or changed."""
        page = self.problem(
            request,
            503,
            "Approval desk unavailable",
            "The approval desk cannot reach its database right now; nothing was changed. "
            "Try again in a moment.",
            None,
        )
        page.headers["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER_S)
        return page

    async def task_page(
        self,
        request: Request,
        viewer: Identity,
        task_id: str,
        status: int = 200,
        error: str | None = None,
        form: dict[str, str] | None = None,
    ) -> HTMLResponse:
        task = (
            await run_in_threadpool(self.runtime.desk.get, task_id)
            if len(task_id) <= MAX_TASK_ID_CHARS
            else None
        )
        if task is None:
            return self.problem(
                request, 404, "Task not found", f"There is no approval task {task_id}.", viewer
            )
        now = self.runtime.desk.now()
        return self.page(
            request,
            "desk/task.html",
            status,
            viewer,
            title=f"Approval task {task.id}",
            task=_detail(task, viewer, now),
            error=error,
            form=form or {"action": "", "reason": "", "group": ""},
            max_reason=MAX_REASON_CHARS,
        )

    # -- handlers -------------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        if twice := repeated_params_problem(request.query_params.multi_items(), ("next",)):
            # Which destination counts would depend on order (decision 1142): the form,
            # to the desk's front page, with why.
            error = twice[0].upper() + twice[1:] + "."
            title = "Log in to the approval desk"
            return self.page(request, "desk/login.html", 400, title=title, next=PREFIX, error=error)
        back = _safe_next(request.query_params.get("next"))
        if request.session.get("key_id") is not None:
            viewer = await run_in_threadpool(self.viewer, request)
            if viewer is not None:
                return RedirectResponse(back, status_code=303, headers=SECURITY_HEADERS)
        return self.page(request, "desk/login.html", title="Log in to the approval desk", next=back)

    async def login(self, request: Request) -> Response:
        try:
            form = await read_form(request)
        except _FormRefused as exc:
            return self.problem(request, exc.status, "Login refused", exc.message, None)
        back = _safe_next(form.get("next"))

        def again(status: int, error: str) -> HTMLResponse:
            return self.page(
                request,
                "desk/login.html",
                status,
                title="Log in to the approval desk",
                next=back,
                error=error,
            )

        if not self.csrf_ok(request, form):
            return again(403, "The login form expired. Please try again.")
        token = form.get("token", "").strip()
        if "token" in form.repeated:  # which one counts would depend on order (decision 842)
            return again(401, "More than one API key was sent. Enter exactly one.")
        if not token:
            return again(400, "Enter your API key.")
        identity = (
            await run_in_threadpool(self.runtime.api_keys.authenticate, token)
            if len(token) <= MAX_TOKEN_FIELD_CHARS
            else None
        )
        if identity is None:
            return again(401, "That API key is not valid: it is unknown, mistyped or revoked.")
        if not identity.may(Role.APPROVER):
            return again(
                403,
                f"This API key has the {identity.role.value} role; only approver and admin "
                "keys may use the approval desk.",
            )
        # A session the browser had before is ended with it (no fixation of an old id).
        await run_in_threadpool(self.sessions.end, request.session.get("sid"))
        sid = await run_in_threadpool(self.sessions.start, identity.key_id, SESSION_MAX_AGE_S)
        request.session.clear()
        request.session.update(
            key_id=identity.key_id, sid=sid, auth_at=time.time(), csrf=secrets.token_urlsafe(32)
        )
        return RedirectResponse(back, status_code=303, headers=SECURITY_HEADERS)

    async def logout(self, request: Request) -> Response:
        try:
            form = await read_form(request)
        except _FormRefused as exc:
            return self.problem(request, exc.status, "Logout refused", exc.message, None)
        if request.session.get("key_id") is not None and not self.csrf_ok(request, form):
            return self.problem(
                request,
                403,
                "Form refused",
                "The form did not come from this desk page (missing or wrong CSRF token).",
                None,
            )
        # Ended in the database: a copy of this cookie is no session any more.
        await run_in_threadpool(self.sessions.end, request.session.get("sid"))
        request.session.clear()
        request.session["flash"] = "You are logged out."
        return RedirectResponse(f"{PREFIX}/login", status_code=303, headers=SECURITY_HEADERS)

    async def list_page(self, request: Request) -> Response:
        viewer = await run_in_threadpool(self.viewer, request)
        if viewer is None:
            back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return self.to_login(request, back)
        params = request.query_params
        state = params.get("state", "pending")  # the form's select never sends it empty
        group = (params.get("group") or "").strip()
        wire = (params.get("wire") or "").strip()
        filters = {"state": state, "group": group, "wire": wire}
        error = None
        if twice := repeated_params_problem(params.multi_items(), ("state", "group", "wire")):
            error = twice[0].upper() + twice[1:] + "."
        elif state not in STATE_FILTERS:
            error = f"Unknown state {state!r}; choose one of: {', '.join(STATE_FILTERS)}."
        elif wire and wire not in TASK_WIRES:  # empty: the form's "any wire"
            error = f"Unknown wire {wire!r}; choose one of: {', '.join(TASK_WIRES)}."
        elif len(group) > MAX_FILTER_CHARS:
            error = f"The group filter is at most {MAX_FILTER_CHARS} characters."
        if error is not None:
            return self.page(
                request,
                "desk/list.html",
                400,
                viewer,
                title="Approval tasks",
                rows=[],
                filters=filters,
                states=STATE_FILTERS,
                error=error,
                limit=LIST_LIMIT,
            )
        states = () if state == "all" else (ApprovalState(state),)
        tasks = await run_in_threadpool(
            lambda: self.runtime.desk.list(
                states=states, group=group or None, wire=wire or None, limit=LIST_LIMIT
            )
        )
        now = self.runtime.desk.now()
        return self.page(
            request,
            "desk/list.html",
            200,
            viewer,
            title="Approval tasks",
            rows=[_row(t, now) for t in tasks],
            filters=filters,
            states=STATE_FILTERS,
            limit=LIST_LIMIT,
        )

    async def show_task(self, request: Request, task_id: str) -> Response:
        viewer = await run_in_threadpool(self.viewer, request)
        if viewer is None:
            return self.to_login(request, task_href(task_id))
        return await self.task_page(request, viewer, task_id)

    async def act(self, request: Request, task_id: str, action: str) -> Response:
        viewer = await run_in_threadpool(self.viewer, request)
        if viewer is None:
            return self.to_login(request, task_href(task_id))
        try:
            form = await read_form(request)
        except _FormRefused as exc:
            return self.problem(request, exc.status, "Form refused", exc.message, viewer)
        if not self.csrf_ok(request, form):
            return self.problem(
                request,
                403,
                "Form refused",
                "The form did not come from this desk page (missing or wrong CSRF token); "
                "nothing was changed. Reload the task and try again.",
                viewer,
            )
        reason = form.get("reason", "")
        kept = {"action": action, "reason": reason, "group": form.get("group", "")}
        if action in ("approve", "deny") and not says_something(reason):
            verb = "approving" if action == "approve" else "denying"
            return await self.task_page(
                request,
                viewer,
                task_id,
                400,
                f"Give a reason for {verb} this task. {NO_REASON.capitalize()}.",
                kept,
            )
        desk = self.runtime.desk
        try:
            if action == "approve":
                task = await run_in_threadpool(desk.approve, task_id, viewer, reason)
                done = (
                    "Approved"
                    if task.state is not ApprovalState.PENDING
                    else f"Approval recorded ({len(task.approvals())} of {task.approvals_required})"
                )
            elif action == "deny":
                await run_in_threadpool(desk.deny, task_id, viewer, reason)
                done = "Denied"
            else:
                group = form.get("group", "").strip()
                if not group:
                    return await self.task_page(
                        request, viewer, task_id, 400, "Name the approver group.", kept
                    )
                task = await run_in_threadpool(desk.reroute, task_id, viewer, group, reason)
                done = f"Re-routed to {task.approver_group}"
                warning = await run_in_threadpool(
                    empty_group_warning, self.runtime.api_keys, task.approver_group
                )
                if warning is not None:
                    done += f". Warning: {warning}."
        except TaskNotFound as exc:
            return self.problem(request, 404, "Task not found", exc.message, viewer)
        except DeskError as exc:
            return await self.task_page(request, viewer, task_id, exc.status, exc.message, kept)
        request.session["flash"] = done
        return RedirectResponse(task_href(task_id), status_code=303, headers=SECURITY_HEADERS)

    async def stylesheet(self, request: Request) -> Response:
        return Response(
            self.css,
            media_type="text/css",
            headers={"cache-control": "max-age=3600", "x-content-type-options": "nosniff"},
        )


def _guarded(desk: _Desk) -> type[APIRoute]:
    """A route class whose handlers answer a store failure (database down, locked) with
    the desk's 503 page instead of a 500: fail closed, nothing changed."""

    class _Route(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                try:
                    return await handler(request)
                except CouldNotDecide as exc:
                    log.log(
                        failure_log_level(exc),
                        "desk %s failed: %s",
                        request.url.path,
                        exc.diagnostics(),
                    )
                    return desk.unavailable(request)

            return guarded

    return _Route


def mount_desk(app: FastAPI, runtime: Runtime) -> None:
    """Add the desk's routes under ``/desk`` (outside the OpenAPI schema) and its
    session middleware (``/desk`` paths only)."""
    env = Environment(
        loader=PackageLoader("warden.server", "templates"),
        autoescape=True,
        # Every value printed is agent-controlled text until shown otherwise.
        finalize=lambda v: shown(v) if isinstance(v, str) else v,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    css = files("warden.server").joinpath("static/desk.css").read_text(encoding="utf-8")
    desk = _Desk(runtime, env, css, DeskSessionStore(runtime.store))
    router = APIRouter(prefix=PREFIX, include_in_schema=False, route_class=_guarded(desk))

    @router.get("/login")
    async def login_form(request: Request) -> Response:
        return await desk.login_form(request)

    @router.post("/login")
    async def login(request: Request) -> Response:
        return await desk.login(request)

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        return await desk.logout(request)

    @router.get("")
    async def tasks(request: Request) -> Response:
        return await desk.list_page(request)

    @router.get("/")
    async def tasks_slash(request: Request) -> Response:
        return RedirectResponse(PREFIX, status_code=307, headers=SECURITY_HEADERS)

    @router.get("/static/desk.css")
    async def stylesheet(request: Request) -> Response:
        return await desk.stylesheet(request)

    @router.get("/tasks/{task_id}")
    async def task(request: Request, task_id: str) -> Response:
        return await desk.show_task(request, task_id)

    @router.post("/tasks/{task_id}/approve")
    async def approve(request: Request, task_id: str) -> Response:
        return await desk.act(request, task_id, "approve")

    @router.post("/tasks/{task_id}/deny")
    async def deny(request: Request, task_id: str) -> Response:
        return await desk.act(request, task_id, "deny")

    @router.post("/tasks/{task_id}/reroute")
    async def reroute(request: Request, task_id: str) -> Response:
        return await desk.act(request, task_id, "reroute")

    # The operator view (admin only), before the catch-all below.
    from warden.server.desk_ops import add_ops_routes

    add_ops_routes(router, desk)

    @router.api_route("/{rest:path}", methods=_ANY_METHOD)
    async def unknown_page(request: Request, rest: str) -> Response:
        # Last: any other /desk path is the desk's own 404 page (same headers and
        # CSP), never FastAPI's {"detail": "Not Found"}. No login is looked up, so it
        # says nothing about whether the caller has a session.
        return desk.problem(
            request, 404, "Page not found", "There is no approval desk page at this address.", None
        )

    app.include_router(router)
    public = runtime.settings.resolved_public_url()
    app.add_middleware(
        DeskSessions,
        secret_key=session_secret(runtime),
        https_only=public.lower().startswith("https"),
    )
