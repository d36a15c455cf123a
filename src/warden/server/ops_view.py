"""What the desk's operator pages show, computed from the store's rows (issue 18 item 4).

Every audit entry, whichever chain holds it, is summarised the same way
(:class:`EntrySummary`): the wire, the agent, the tool or action, the decision, the
rules and reason codes. An ACS entry keeps its verdict in the hashed entry and its tool
in the stored request; Warden's own chains (``warden/<kind>.<event>``) keep both in the
entry's ``<kind>`` detail (spend: ``decision``/``rules``/``action``; approval desk: the
task's ``policy`` and ``action``; KLA: the record). A row that is not readable JSON is
shown as ``unreadable`` rather than failing the page: the decision page's verification
says what is wrong with it.

Filters match exactly (case-sensitive, whole values; a rule matches when it is one of
the entry's rules); the store's ``LIKE`` prefilter only narrows the scan
(:func:`warden.store.activity_sql.entries_page`). A page scans at most
:data:`MAX_SCAN` rows: when a rare filter leaves it short, the page says so and its
"older" link continues the scan where it stopped.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from warden.store.activity_sql import EntryCursor, StoredEntry, entries_page

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

#: Rows shown on one activity page unless ``?limit=`` asks for 1 to :data:`MAX_PAGE_SIZE`.
PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
#: Rows one activity page reads at most (in batches of :data:`BATCH`).
MAX_SCAN = 5000
BATCH = 250
#: Longest filter value accepted (agent ids are at most 128, rules and tools shorter).
MAX_FILTER_CHARS = 200
#: Rows the charts read at most from their window.
CHART_SCAN = 20000

#: The decision shown for a row whose entry is not readable JSON.
UNREADABLE = "unreadable"
#: The activity form's fields (query parameters).
FILTER_FIELDS = ("agent", "tool", "decision", "rule", "wire", "since", "until", "session")
#: Every query parameter of the activity page: each takes one value (decision 1035).
QUERY_FIELDS = (*FILTER_FIELDS, "limit", "before_at", "before_session", "before_seq")


def entry_href(prefix: str, session_id: str, seq: int) -> str:
    """The decision page of entry ``seq`` of ``session_id``."""
    return f"{prefix}/ops/entries/{quote(session_id, safe='')}/{seq}"


def parse_json(text: str | None) -> Any:
    """Stored JSON text, or None when it is missing or unreadable."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _ids(value: Any, key: str) -> tuple[str, ...]:
    """A list of names, each a string or an object naming it under ``key`` (KLA records
    list rules as ``{"rule_id": …}``)."""
    if not isinstance(value, list):
        return ()
    out = []
    for item in value:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict) and isinstance(item.get(key), str):
            out.append(item[key])
    return tuple(out)


@dataclass(frozen=True)
class EntrySummary:
    """One audit entry as the activity list shows it. ``wire`` is ``acs``, ``mcp`` or
    the Warden chain's kind (``spend``, ``approval``, ``kla``, ``agents``, ``adcp``);
    ``decision`` the verdict (or, on a Warden chain without one, the event)."""

    session_id: str
    seq: int
    created_at: str
    step_type: str
    wire: str
    agent: str
    tool: str
    decision: str
    rules: tuple[str, ...]
    reason_codes: tuple[str, ...]
    readable: bool = True


def _acs_tool(request: Any) -> str:
    payload = _dict(_dict(request).get("payload"))
    tool = payload.get("tool")
    if isinstance(tool, dict) and isinstance(tool.get("name"), str):
        return str(tool["name"])
    params = _dict(payload.get("params"))
    for candidate in (params.get("name"), params.get("uri"), payload.get("name")):
        if isinstance(candidate, str):
            return candidate
    return ""


def _warden_fields(
    detail: dict[str, Any], event: str
) -> tuple[str, str, tuple[str, ...], tuple[str, ...], str]:
    """(decision, tool, rules, reason codes, agent) of a Warden chain entry's detail."""
    policy = _dict(detail.get("policy"))
    verdict = _dict(detail.get("verdict"))
    record = _dict(detail.get("record"))
    decision = next(
        (
            str(d)
            for d in (detail.get("decision"), verdict.get("decision"), record.get("decision"))
            if isinstance(d, str) and d
        ),
        event,
    )
    action = detail.get("action")
    tool = ""
    if isinstance(action, dict) and isinstance(action.get("name"), str):
        tool = str(action["name"])
    elif isinstance(action, str):
        tool = action
    elif isinstance(record.get("action"), str):
        tool = str(record["action"])
    rules = (
        _ids(detail.get("rules"), "rule_id")
        or _ids(policy.get("rules"), "rule_id")
        or _ids(record.get("rules"), "rule_id")  # a KLA policy decision record
    )
    codes = (
        _ids(detail.get("reason_codes"), "code")
        or _ids(policy.get("reason_codes"), "code")
        or _ids(record.get("reasons"), "code")
    )
    requester = _dict(detail.get("requester"))
    agent = next(
        (
            str(a)
            for a in (requester.get("agent_id"), detail.get("agent_id"), detail.get("principal"))
            if isinstance(a, str) and a
        ),
        "",
    )
    return decision, tool, rules, codes, agent


def summarize(row: StoredEntry) -> EntrySummary:
    """The activity-list view of one stored entry (never raises)."""
    entry = parse_json(row.entry)
    step = row.step_type
    if not isinstance(entry, dict):
        wire, agent, tool, decision = "", row.agent_id, "", UNREADABLE
        rules: tuple[str, ...] = ()
        codes: tuple[str, ...] = ()
    elif step.startswith("warden/") and "." in step:
        wire, event = step[len("warden/") :].split(".", 1)
        decision, tool, rules, codes, agent = _warden_fields(_dict(entry.get(wire)), event)
        agent = agent or row.agent_id
    else:
        verdict = _dict(entry.get("verdict"))
        refs = verdict.get("policy_references")
        rules = tuple(
            str(r["rule_id"]) for r in refs or () if isinstance(r, dict) and "rule_id" in r
        )
        wire = "mcp" if step.startswith("protocols/MCP/") else "acs"
        agent = row.agent_id
        tool = _acs_tool(parse_json(row.request))
        decision = str(verdict.get("decision") or "")
        codes = _strs(verdict.get("reason_codes"))
    return EntrySummary(
        session_id=row.session_id,
        seq=row.seq,
        created_at=row.created_at,
        step_type=step,
        wire=wire,
        agent=agent,
        tool=tool,
        decision=decision,
        rules=rules,
        reason_codes=codes,
        readable=isinstance(entry, dict),
    )


# -- filters ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    """The activity filters; empty strings are no filter. ``since``/``until`` are the
    store's RFC 3339 UTC text (microseconds, ``Z``) or empty; ``since_input`` and
    ``until_input`` what the form shows back."""

    agent: str = ""
    tool: str = ""
    decision: str = ""
    rule: str = ""
    wire: str = ""
    since: str = ""
    until: str = ""
    since_input: str = ""
    until_input: str = ""

    def query(self) -> dict[str, str]:
        """The non-empty filters as query parameters (for links to other pages)."""
        pairs = {
            "agent": self.agent,
            "tool": self.tool,
            "decision": self.decision,
            "rule": self.rule,
            "wire": self.wire,
            "since": self.since_input,
            "until": self.until_input,
        }
        return {k: v for k, v in pairs.items() if v}

    def prefilter(self) -> list[str]:
        """Texts the stored entry or request must contain for a row to possibly match:
        the tool, decision and rule filters that JSON writes verbatim (printable ASCII
        without quote or backslash). Not ``unreadable``, which no stored text says, nor
        the agent, which :meth:`agent_prefilter` narrows."""
        out = []
        for value in (self.tool, self.decision, self.rule):
            if value == UNREADABLE:
                continue
            if _verbatim(value):
                out.append(value)
        return out

    def agent_prefilter(self) -> str | None:
        """The agent filter as the store narrows it (its sessions, or its id in the
        entry's text), None when there is none or JSON would escape it."""
        return self.agent if _verbatim(self.agent) else None

    def step_prefix(self) -> str | None:
        """The step types the ``wire`` filter can be narrowed to in SQL (None: ``acs``,
        whose steps have several prefixes, or no wire filter)."""
        if not self.wire or self.wire == "acs":
            return None
        return "protocols/MCP/" if self.wire == "mcp" else f"warden/{self.wire}."

    def matches(self, s: EntrySummary) -> bool:
        return (
            (not self.agent or s.agent == self.agent)
            and (not self.tool or s.tool == self.tool)
            and (not self.decision or s.decision == self.decision)
            and (not self.rule or self.rule in s.rules)
            and (not self.wire or s.wire == self.wire)
        )


def _verbatim(value: str) -> bool:
    return bool(value) and all(32 <= ord(c) < 127 for c in value) and not set(value) & {'"', "\\"}


class FilterError(ValueError):
    """A filter the page refuses (shown to the operator; nothing is read)."""


def store_time(when: datetime) -> str:
    """``when`` as the store writes ``created_at`` (UTC, microseconds, ``Z``)."""
    return when.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(text: str, name: str) -> str:
    """A form's time (``YYYY-MM-DDTHH:MM[:SS]``, read as UTC, or RFC 3339 with an offset)
    as store text. Raises FilterError naming the field."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(
            f"{name} must be a time like 2026-12-01T13:05 (UTC) or RFC 3339; got {text!r}."
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return store_time(when)


def parse_filters(params: Mapping[str, str]) -> Filters:
    """The activity filters of a query string. Raises FilterError for a value longer
    than :data:`MAX_FILTER_CHARS`, an unreadable time, or ``since`` not before ``until``."""
    values = {
        k: (params.get(k) or "").strip()
        for k in ("agent", "tool", "decision", "rule", "wire", "since", "until")
    }
    for name, value in values.items():
        if len(value) > MAX_FILTER_CHARS:
            raise FilterError(f"The {name} filter is at most {MAX_FILTER_CHARS} characters.")
    since = parse_time(values["since"], "since") if values["since"] else ""
    until = parse_time(values["until"], "until") if values["until"] else ""
    if since and until and since >= until:
        raise FilterError("since must be before until.")
    return Filters(
        agent=values["agent"],
        tool=values["tool"],
        decision=values["decision"],
        rule=values["rule"],
        wire=values["wire"],
        since=since,
        until=until,
        since_input=values["since"],
        until_input=values["until"],
    )


def parse_cursor(params: Mapping[str, str]) -> EntryCursor | None:
    """The ``before_at``/``before_session``/``before_seq`` page cursor, or None.
    Raises FilterError when it is present but malformed."""
    at, sid, seq = (params.get(k) for k in ("before_at", "before_session", "before_seq"))
    if at is None and sid is None and seq is None:
        return None
    if not at or not sid or not seq or not seq.isdigit() or len(at) > 40 or len(sid) > 255:
        raise FilterError("The page link is damaged; start again from the newest page.")
    return EntryCursor(at, sid, int(seq))


def parse_limit(params: Mapping[str, str]) -> int:
    """The ``limit`` query parameter (rows per page), :data:`PAGE_SIZE` when absent.
    Raises FilterError outside 1 to :data:`MAX_PAGE_SIZE`."""
    text = params.get("limit")
    if text is None or text == "":
        return PAGE_SIZE
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE_SIZE:
        raise FilterError(f"limit must be a whole number from 1 to {MAX_PAGE_SIZE}.")
    return int(text)


def cursor_query(cursor: EntryCursor) -> dict[str, str]:
    return {
        "before_at": cursor.created_at,
        "before_session": cursor.session_id,
        "before_seq": str(cursor.seq),
    }


@dataclass
class ActivityPage:
    """One page of matching entries, newest first. ``next_cursor`` continues after the
    last row read (None: nothing older); ``capped`` is True when the page stopped at
    :data:`MAX_SCAN` rows read before it was full."""

    rows: list[EntrySummary] = field(default_factory=list)
    next_cursor: EntryCursor | None = None
    scanned: int = 0
    capped: bool = False


def activity(
    store: SqlStore,
    filters: Filters,
    before: EntryCursor | None,
    page_size: int = PAGE_SIZE,
    *,
    session_id: str | None = None,
) -> ActivityPage:
    """The entries matching ``filters`` (of one session, when ``session_id`` is given)
    older than ``before``, at most ``page_size``."""
    page = ActivityPage()
    cursor = before
    while True:
        batch = entries_page(
            store,
            limit=BATCH,
            before=cursor,
            since=filters.since or None,
            until=filters.until or None,
            contains=filters.prefilter(),
            step_prefix=filters.step_prefix(),
            session_id=session_id,
            agent=filters.agent_prefilter(),
        )
        for row in batch:
            page.scanned += 1
            cursor = EntryCursor(row.created_at, row.session_id, row.seq)
            summary = summarize(row)
            if filters.matches(summary):
                page.rows.append(summary)
                if len(page.rows) == page_size:
                    page.next_cursor = cursor
                    return page
            if page.scanned >= MAX_SCAN:
                page.capped = True
                page.next_cursor = cursor
                return page
        if len(batch) < BATCH:
            return page  # nothing older: no next page


# -- charts -------------------------------------------------------------------------------


@dataclass
class ChartData:
    """What the charts page draws from its window's entries.

    ``per_minute`` maps each minute (``HH:MM`` UTC, oldest first, every minute of the
    window present) to counts by decision; ``top_rules`` and ``top_tools`` are
    ``(name, count)`` pairs, most first; ``scanned`` the rows read (at most
    :data:`CHART_SCAN`; ``capped`` when the window held more)."""

    minutes: list[str]
    per_minute: dict[str, Counter[str]]
    top_rules: list[tuple[str, int]]
    top_tools: list[tuple[str, int]]
    scanned: int
    capped: bool


#: Decisions the per-minute chart stacks, in drawing order; anything else is "other".
OUTCOMES = ("allow", "modify", "ask", "deny", "defer", "other")


def chart_data(store: SqlStore, now: datetime, window_minutes: int, top: int = 8) -> ChartData:
    """Decisions per minute by outcome and the top rules and tools over the last
    ``window_minutes`` minutes before ``now`` (verdicts only: Warden-chain events with
    no verdict, such as a hold being settled, are not decisions)."""
    end = now.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    start = end - timedelta(minutes=window_minutes)
    rows = entries_page(store, limit=CHART_SCAN, since=store_time(start), until=store_time(end))
    minutes = [(start + timedelta(minutes=i)).strftime("%H:%M") for i in range(window_minutes)]
    per_minute: dict[str, Counter[str]] = {m: Counter() for m in minutes}
    rules: Counter[str] = Counter()
    tools: Counter[str] = Counter()
    for row in rows:
        s = summarize(row)
        if s.decision not in OUTCOMES[:-1] or not s.readable:
            continue
        minute = s.created_at[11:16]
        if minute in per_minute:
            per_minute[minute][s.decision] += 1
        rules.update(s.rules)
        if s.tool:
            tools[s.tool] += 1
    return ChartData(
        minutes=minutes,
        per_minute=per_minute,
        top_rules=rules.most_common(top),
        top_tools=tools.most_common(top),
        scanned=len(rows),
        capped=len(rows) >= CHART_SCAN,
    )


def burn_by_hour(rows: list[StoredEntry], now: datetime, hours: int) -> dict[str, list[Decimal]]:
    """Settled spend per budget per hour over the last ``hours`` hours (oldest first):
    each ``warden/spend.settle`` entry's ``actual`` is added to every budget on its
    hold's path (a child's spend is its parent's too). Undone receipts are not
    subtracted: the chart shows what was charged when."""
    end = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - timedelta(hours=hours)
    out: dict[str, list[Decimal]] = {}
    for row in rows:
        if row.step_type != "warden/spend.settle":
            continue
        detail = _dict(_dict(parse_json(row.entry)).get("spend"))
        try:
            amount = Decimal(str(detail.get("actual")))
            when = datetime.fromisoformat(row.created_at.replace("Z", "+00:00"))
        except (InvalidOperation, ValueError):
            continue
        slot = int((when - start).total_seconds() // 3600)
        if not 0 <= slot < hours or not amount.is_finite():
            continue
        for budget in _strs(detail.get("path")) or (str(detail.get("budget_id", "")),):
            out.setdefault(budget, [Decimal(0)] * hours)[slot] += amount
    return out
