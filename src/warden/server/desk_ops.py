"""The desk's operator view (issue 18 item 4): server-rendered pages under ``/desk/ops``,
for admin keys only, under the desk's session, CSRF and Content-Security-Policy
(:mod:`warden.server.desk`; no script, charts as inline SVG).

Routes::

    GET /desk/ops                          activity: sessions and audit entries of every
                                           chain, newest first; ?agent= &tool= &decision=
                                           &rule= &wire= &session= &since= &until=, rows per
                                           page ?limit= (1-200, default 50) and the page
                                           cursor ?before_at= &before_session= &before_seq=
    GET /desk/ops/entries/{session}/{seq}  one decision: request, verdict, rules, provenance,
                                           its audit-chain link verified
    GET /desk/ops/agents                   registered agents, budgets (cap, held, remaining),
                                           holds, burn per hour over 24 hours
    GET /desk/ops/charts                   decisions per minute by outcome, top rules and
                                           tools, approval latency

**Who sees what** (docs/decisions.md, decision 340). The activity crosses every agent,
owner and chain, so only the ``admin`` role sees these pages. An approver is shown
exactly the desk's "Page not found" page for every ``/desk/ops`` address (as for any
other missing desk page), and no link to them: approvers keep seeing only what the
desk already showed them, the approval tasks. Not logged in: the login form, as for
every desk page. A missing entry (unknown session or seq) is a 404 page; an entry whose
row cannot be read as an audit record (what ``warden export`` would refuse) is a 409
page naming the damage. A store failure is the desk's 503 page, as everywhere on it.

Bad filters are a 400 page that repeats the form and reads nothing.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from warden.core.media import repeated_params_problem
from warden.errors import IntegrityError
from warden.identity.api_keys import Identity, Role
from warden.server import ops_view, svg_charts
from warden.server.desk import PREFIX, _Desk, show_time, task_href
from warden.server.ops_detail import decision_context
from warden.server.ops_view import FilterError, cursor_query, entry_href
from warden.store import activity_sql, metrics_sql

#: Sessions listed above the entries on the activity page.
SESSIONS_SHOWN = 10
#: Budgets, holds and agents the agents page lists at most.
BUDGETS_SHOWN = 200
HOLDS_SHOWN = 100
#: The charts' window (minutes) and the burn window (hours).
CHART_MINUTES = 60
BURN_HOURS = 24
#: Approval tasks the latency chart reads (the most recently decided).
LATENCY_TASKS = 500
#: Rows read from the spend chains for the burn charts.
BURN_SCAN = 20000
MAX_SESSION_CHARS = 255

_MISSING_TITLE = "Page not found"
_MISSING_TEXT = "There is no approval desk page at this address."


class OpsPages:
    """The operator pages' handlers over the desk (its session, rendering, runtime)."""

    def __init__(self, desk: _Desk) -> None:
        self.desk = desk
        self.runtime = desk.runtime

    async def operator(self, request: Request) -> Identity | Response:
        """The logged-in admin, or the response to send instead: the login form when
        nobody is logged in, the desk's own 404 page for any other role."""
        viewer = await run_in_threadpool(self.desk.viewer, request)
        if viewer is None:
            back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return self.desk.to_login(request, back)
        if viewer.role is not Role.ADMIN:
            # Exactly the catch-all's answer: nothing says these pages exist.
            return self.desk.problem(request, 404, _MISSING_TITLE, _MISSING_TEXT, None)
        return viewer

    # -- activity -------------------------------------------------------------------------

    async def activity(self, request: Request) -> Response:
        viewer = await self.operator(request)
        if not isinstance(viewer, Identity):
            return viewer
        params = request.query_params
        session = (params.get("session") or "").strip()
        try:
            if twice := repeated_params_problem(params.multi_items(), ops_view.QUERY_FIELDS):
                raise FilterError(twice[0].upper() + twice[1:] + ".")
            filters = ops_view.parse_filters(params)
            before = ops_view.parse_cursor(params)
            limit = ops_view.parse_limit(params)
            if len(session) > MAX_SESSION_CHARS:
                raise FilterError(f"The session filter is at most {MAX_SESSION_CHARS} characters.")
        except FilterError as exc:
            raw = {k: (params.get(k) or "")[:200] for k in ops_view.FILTER_FIELDS}
            return self.desk.page(
                request,
                "desk/ops_activity.html",
                400,
                viewer,
                title="Activity",
                error=str(exc),
                form=raw,
                session=session[:MAX_SESSION_CHARS],
                limit="",
                rows=[],
                sessions=[],
                page=None,
                older="",
                newest="",
                filtered=True,
            )
        store = self.runtime.store

        def read() -> tuple[ops_view.ActivityPage, list[activity_sql.SessionRow]]:
            page = ops_view.activity(store, filters, before, limit, session_id=session or None)
            sessions = (
                []
                if before is not None
                else activity_sql.recent_sessions(
                    store, limit=SESSIONS_SHOWN, agent_id=filters.agent or None
                )
            )
            return page, sessions

        page, sessions = await run_in_threadpool(read)
        query = (
            filters.query()
            | ({"session": session} if session else {})
            | ({"limit": str(limit)} if limit != ops_view.PAGE_SIZE else {})
        )
        older = (
            f"{PREFIX}/ops?" + urlencode(query | cursor_query(page.next_cursor))
            if page.next_cursor is not None
            else ""
        )
        newest = f"{PREFIX}/ops" + (f"?{urlencode(query)}" if query else "")
        return self.desk.page(
            request,
            "desk/ops_activity.html",
            200,
            viewer,
            title="Activity",
            form=dict.fromkeys(ops_view.FILTER_FIELDS, "") | filters.query(),
            session=session,
            limit=str(limit) if limit != ops_view.PAGE_SIZE else "",
            rows=[self._row(s) for s in page.rows],
            sessions=[self._session(s) for s in sessions],
            page=page,
            older=older,
            newest=newest if before is not None else "",
            filtered=bool(query),
        )

    def _row(self, s: ops_view.EntrySummary) -> dict[str, Any]:
        return {
            "href": entry_href(PREFIX, s.session_id, s.seq),
            "at": show_time(s.created_at),
            "created": s.created_at,
            "wire": s.wire,
            "agent": s.agent,
            "tool": s.tool,
            "decision": s.decision,
            "decision_css": s.decision if s.decision in ops_view.OUTCOMES else "other",
            "rules": ", ".join(s.rules),
            "codes": ", ".join(s.reason_codes),
            "step": s.step_type,
            "session": s.session_id,
            "seq": s.seq,
        }

    def _session(self, s: activity_sql.SessionRow) -> dict[str, Any]:
        negotiated = ops_view.parse_json(s.negotiated)
        kind = negotiated.get("kind") if isinstance(negotiated, dict) else None
        return {
            "id": s.session_id,
            "href": f"{PREFIX}/ops?" + urlencode({"session": s.session_id}),
            "agent": s.agent_id,
            "kind": str(kind) if isinstance(kind, str) else "ACS session",
            "at": show_time(s.created_at),
            "entries": s.entries,
            "closed": s.closed,
        }

    # -- one decision ---------------------------------------------------------------------

    async def entry(self, request: Request, session_id: str, seq: str) -> Response:
        viewer = await self.operator(request)
        if not isinstance(viewer, Identity):
            return viewer
        missing = self.desk.problem(
            request,
            404,
            "Audit entry not found",
            f"There is no audit entry {seq} in session {session_id}.",
            viewer,
        )
        if len(session_id) > MAX_SESSION_CHARS or not seq.isdigit() or len(seq) > 12:
            return missing
        try:
            chain = await run_in_threadpool(
                activity_sql.entry_chain, self.runtime.store, session_id, int(seq)
            )
        except IntegrityError as exc:
            # A row the export code cannot turn into a record (not JSON, columns that
            # disagree with the entry): what `warden export` and `verify` would refuse.
            return self.desk.problem(
                request,
                409,
                "Audit entry damaged",
                f"The audit entry cannot be read as stored ({exc.reason}): {exc.message}. "
                "Run `warden verify` on this database.",
                viewer,
            )
        if chain is None:
            return missing
        context = decision_context(chain, PREFIX, self.runtime.bundle, self.runtime.keys.ikm)
        context["at"] = show_time(context["created_at"])
        context["task_href"] = task_href(context["task_id"]) if context["task_id"] else ""
        context["session_href"] = f"{PREFIX}/ops?" + urlencode({"session": session_id})
        return self.desk.page(
            request,
            "desk/ops_entry.html",
            200,
            viewer,
            title=f"Decision {seq} of session {session_id}",
            d=context,
        )

    # -- agents and budgets ---------------------------------------------------------------

    async def agents(self, request: Request) -> Response:
        viewer = await self.operator(request)
        if not isinstance(viewer, Identity):
            return viewer
        runtime = self.runtime
        now = runtime.spend.now().astimezone(UTC)

        def read() -> dict[str, Any]:
            registry = runtime.agents
            agents = registry.list() if registry is not None else []
            levels = metrics_sql.budget_levels(runtime.store, now, BUDGETS_SHOWN)
            holds = activity_sql.held_reservations(runtime.store, limit=HOLDS_SHOWN)
            since = ops_view.store_time(now - timedelta(hours=BURN_HOURS + 1))
            events = activity_sql.spend_events_since(runtime.store, since, limit=BURN_SCAN)
            return {"agents": agents, "levels": levels, "holds": holds, "events": events}

        data = await run_in_threadpool(read)
        burn = ops_view.burn_by_hour(data["events"], now, BURN_HOURS)
        start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=BURN_HOURS - 1)
        hour_labels = [
            (start + timedelta(hours=i)).strftime("%m-%d %H:00") for i in range(BURN_HOURS)
        ]
        budgets = []
        for level in data["levels"]:
            series = burn.get(level.budget_id, [Decimal(0)] * BURN_HOURS)
            used = level.cap - level.remaining
            budgets.append(
                {
                    "id": level.budget_id,
                    "currency": level.currency,
                    "cap": f"{level.cap.normalize():f}",
                    "held": f"{level.held.normalize():f}",
                    "remaining": f"{level.remaining.normalize():f}",
                    "used_percent": round(float(100 * used / level.cap), 1) if level.cap else 0,
                    "spark": svg_charts.spark_columns(series, hour_labels),
                }
            )
        holds = []
        for h in data["holds"]:
            rec = ops_view.parse_json(h.record)
            rec = rec if isinstance(rec, dict) else {}
            holds.append(
                {
                    "id": h.reservation_id,
                    "budget": h.budget_id,
                    "amount": str(rec.get("amount", "")),
                    "currency": str(rec.get("currency", "")),
                    "action": str(rec.get("action", "")),
                    "principal": h.principal or "",
                    "expires": show_time(h.expires_at),
                }
            )
        left = {b["id"]: f"{b['remaining']} {b['currency']}" for b in budgets}
        agents = [
            {
                "id": a.agent_id,
                "owner": a.owner,
                "groups": ", ".join(a.groups),
                "budgets": ", ".join(
                    f"{b} ({left[b]} left)" if b in left else b for b in a.budgets
                ),
                "created": show_time(a.created_at),
                "revoked": show_time(a.revoked_at) if a.revoked_at else "",
                "href": f"{PREFIX}/ops?" + urlencode({"agent": a.agent_id}),
            }
            for a in data["agents"]
        ]
        return self.desk.page(
            request,
            "desk/ops_agents.html",
            200,
            viewer,
            title="Agents and budgets",
            agents=agents,
            budgets=budgets,
            holds=holds,
            burn_hours=BURN_HOURS,
            budgets_limit=BUDGETS_SHOWN,
            holds_limit=HOLDS_SHOWN,
        )

    # -- charts ---------------------------------------------------------------------------

    async def charts(self, request: Request) -> Response:
        viewer = await self.operator(request)
        if not isinstance(viewer, Identity):
            return viewer
        runtime = self.runtime
        now = runtime.desk.now()

        def read() -> tuple[ops_view.ChartData, list[float]]:
            data = ops_view.chart_data(runtime.store, now, CHART_MINUTES)
            latencies = metrics_sql.recent_approval_latencies(runtime.store, LATENCY_TASKS)
            return data, latencies

        data, latencies = await run_in_threadpool(read)
        totals: Counter[str] = Counter()
        for counts in data.per_minute.values():
            totals.update(counts)
        return self.desk.page(
            request,
            "desk/ops_charts.html",
            200,
            viewer,
            title="Charts",
            window=CHART_MINUTES,
            columns=svg_charts.stacked_columns(data.minutes, data.per_minute, ops_view.OUTCOMES),
            outcomes=[(o, totals.get(o, 0)) for o in ops_view.OUTCOMES[:-1]],
            top_rules=svg_charts.horizontal_bars(data.top_rules),
            top_tools=svg_charts.horizontal_bars(data.top_tools),
            scanned=data.scanned,
            capped=data.capped,
            latency=svg_charts.latency_histogram(latencies),
            latency_count=len(latencies),
            latency_median=svg_charts.duration(svg_charts.quantile(latencies, 0.5)),
            latency_p90=svg_charts.duration(svg_charts.quantile(latencies, 0.9)),
        )


def add_ops_routes(router: APIRouter, desk: _Desk) -> None:
    """Add the operator pages to the desk's router (before its catch-all 404)."""
    pages = OpsPages(desk)

    @router.get("/ops")
    async def activity(request: Request) -> Response:
        return await pages.activity(request)

    @router.get("/ops/entries/{session_id}/{seq}")
    async def entry(request: Request, session_id: str, seq: str) -> Response:
        return await pages.entry(request, session_id, seq)

    @router.get("/ops/agents")
    async def agents(request: Request) -> Response:
        return await pages.agents(request)

    @router.get("/ops/charts")
    async def charts(request: Request) -> Response:
        return await pages.charts(request)
