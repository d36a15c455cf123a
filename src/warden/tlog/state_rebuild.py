"""Rebuild the state the log's events imply and compare it with every state table
(issue 17 item 5; docs/decisions.md 420–425).

The events are the verified leaves (``warden verify`` runs this after the chains and
the tree checked out): the Warden-authored chain entries ``warden/approval.*`` (the
desk), ``warden/spend.*`` (one chain per budget tree) and ``warden/agents.*``, and the
``keys.*`` rows of ``log_events``. From them :func:`rebuild` replays, in leaf order:

==================  ========================================================================
table               what is compared (the column, or the field of the stored JSON record)
==================  ========================================================================
``api_keys``        principal, role, groups, credential digest, revoked or not
``agents``          owner, groups, budgets, created_at, revoked or not
``agent_keys``      agent, revoked or not
``tasks``           kind, state, status, scope, action hash, expiry, approver group (columns
                    and record); approvals required, timeout disposition, requester, action,
                    detail, the votes (record)
``approval_votes``  one row per voter: key id, decision, reason
``budgets``         kind, parent, currency, cap, period, name, principals
``budget_usage``    reserved and settled per budget and period bucket (absent = zero)
``reservations``    budget, status, expiry, owner (columns); amount, path, buckets,
                    currency, action, settled amount, receipt, reason (record)
``receipts``        reservation, amount, undone or not, owner
``kla_records``     the digest its stored record hashes to (recomputed) and the ``digest``
                    column, kind, status, principal, signatures, the execution's chain
                    (decision 912)
``adcp_plans``      version, plan hash (the column, and recomputed from the stored record),
                    budget: the plan chain's latest ``plan_synced`` (decision 914)
``policy_bundles``  the source parses and hashes to the row's digest, as ``warden serve``
                    checks the active one at start (decision 914)
``policy_active``   digest and generation: the latest ``policy.activate`` leaf
==================  ========================================================================

Every row that disagrees is one :class:`Mismatch` naming the table, the row, the column,
and the leaf that last set it — or none, when no leaf explains the row at all (inserted
by hand). Rows the events imply but the table lacks are mismatches too (a deleted hold).

A field an older Warden did not record in its event (a budget's ``name``, a task's
``timeout_disposition`` and ``detail`` before issue 17) is not compared for rows whose
events lack it; everything else is. What is not compared, and why: timestamps other
than the ones the events carry (``updated_at``: a refusal reported once moves it and
``consumed_by`` without an entry, which only decides whether the refusal is reported
again), a hold's ``meta`` and ``created_at`` (the caller's correlation), a KLA record's
``created_at``, and the tables docs/audit-chain.md lists as outside verify's coverage
(decision 913).

All rows and events are read in one read-only snapshot (PostgreSQL ``REPEATABLE
READ``; SQLite one read transaction), so a Warden still running does not make rows and
events disagree.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy import Engine

from warden.ledger.warden_chain import chain_session_id

#: At most this many mismatches are listed (the count is still exact).
MAX_LISTED = 200


@dataclass(frozen=True)
class Mismatch:
    """One table row that the events contradict; ``index`` the leaf that last set the
    row (None: no leaf explains it)."""

    table: str
    row: str
    message: str
    index: int | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "row": self.row,
            "message": self.message,
            "log_index": self.index,
        }


@dataclass
class StateReport:
    """What the comparison saw: rows checked per table and every mismatch, in table order."""

    rows: dict[str, int] = field(default_factory=dict)
    mismatches: list[Mismatch] = field(default_factory=list)

    def add(self, table: str, row: str, message: str, index: int | None) -> None:
        self.mismatches.append(Mismatch(table, row, f"{table} row {row}: {message}", index))


@dataclass
class _Implied:
    """The state of one row as the events built it, with the leaf that last set it."""

    index: int
    values: dict[str, Any]


Rows = dict[str, list[tuple[Any, ...]]]


# -- reading --------------------------------------------------------------------------

_TABLES = {
    "api_keys": "SELECT key_id, principal, role, groups, secret_hash, revoked_at FROM api_keys",
    "agents": "SELECT agent_id, owner, groups, budgets, created_at, revoked_at FROM agents",
    "agent_keys": "SELECT key_id, agent_id, revoked_at FROM agent_keys",
    "tasks": (
        "SELECT task_id, kind, status, record, state, action_hash, session_id, expires_at, "
        "approver_group FROM tasks"
    ),
    "approval_votes": "SELECT task_id, principal, key_id, decision, reason FROM approval_votes",
    "budgets": (
        "SELECT budget_id, kind, parent_id, currency, cap, period, name, principals FROM budgets"
    ),
    "budget_usage": "SELECT budget_id, bucket, reserved, settled FROM budget_usage",
    "reservations": (
        "SELECT reservation_id, budget_id, status, expires_at, record, principal FROM reservations"
    ),
    "receipts": "SELECT receipt_id, reservation_id, record, principal FROM receipts",
    "kla_records": (
        "SELECT record_id, kind, action_request_id, execution_id, principal, digest, record, "
        "signature, kid, status, created_at, signatures FROM kla_records"
    ),
    "adcp_plans": (
        "SELECT principal, plan_id, version, budget_id, plan_hash, record FROM adcp_plans"
    ),
    "policy_bundles": "SELECT digest, source FROM policy_bundles",
    "policy_active": "SELECT digest, generation FROM policy_active",
}

#: Warden-chain entries (their text, as stored; a JSON string cannot contain this with
#: its quotes unescaped, so only a structural ``step_type`` key matches, and the parsed
#: top-level one is checked again).
_CHAIN_EVENTS = (
    "SELECT log_index, entry FROM entries WHERE log_index IS NOT NULL AND "
    'entry LIKE \'%"step_type":"warden/%\' ORDER BY log_index'
)
_KEY_EVENTS = (
    "SELECT log_index, event FROM log_events WHERE kind LIKE 'keys.%' "
    "OR kind = 'policy.activate' ORDER BY log_index"
)


@contextmanager
def _snapshot(engine: Engine) -> Iterator[Any]:
    """A DB-API cursor in one read-only snapshot, rolled back at the end."""
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        if engine.dialect.name == "postgresql":
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        else:  # Warden's SQLite connections leave transactions to the caller
            cur.execute("BEGIN")
        try:
            yield cur
        finally:
            cur.close()
            raw.rollback()
    finally:
        raw.close()


def read(engine: Engine) -> tuple[Rows, list[tuple[int, dict[str, Any]]], list[Any]]:
    """``(rows by table, chain events (index, entry), key events (index, event))``."""
    with _snapshot(engine) as cur:
        rows: Rows = {}
        for table, sql in _TABLES.items():
            cur.execute(sql)
            rows[table] = [tuple(r) for r in cur.fetchall()]
        cur.execute(_CHAIN_EVENTS)
        chain = []
        for index, text in cur.fetchall():
            entry = json.loads(text)
            if isinstance(entry, dict) and str(entry.get("step_type", "")).startswith("warden/"):
                chain.append((int(index), entry))
        cur.execute(_KEY_EVENTS)
        keys = [(int(i), json.loads(t)) for i, t in cur.fetchall()]
    return rows, chain, keys


# -- replay ---------------------------------------------------------------------------


@dataclass
class _State:
    keys: dict[str, _Implied] = field(default_factory=dict)
    agents: dict[str, _Implied] = field(default_factory=dict)
    agent_keys: dict[str, _Implied] = field(default_factory=dict)
    tasks: dict[str, _Implied] = field(default_factory=dict)
    budgets: dict[str, _Implied] = field(default_factory=dict)
    usage: dict[tuple[str, str], _Implied] = field(default_factory=dict)
    holds: dict[str, _Implied] = field(default_factory=dict)
    receipts: dict[str, _Implied] = field(default_factory=dict)
    #: By (principal, record_id): rows are keyed per principal (migration 0015).
    kla: dict[tuple[str, str], _Implied] = field(default_factory=dict)
    #: By the plan chain's session id (its name is ``principal/plan_id``).
    plans: dict[str, _Implied] = field(default_factory=dict)
    #: The latest ``policy.activate`` leaf, as the ``policy_active`` row (id 1).
    active: dict[int, _Implied] = field(default_factory=dict)
    #: API keys an agent's revocation revoked (no ``keys.revoked`` leaf of their own).
    keys_revoked_by_agents: dict[str, int] = field(default_factory=dict)
    spend_chains: set[str] = field(default_factory=set)


def _key_event(st: _State, index: int, event: dict[str, Any]) -> None:
    if event.get("kind") == "policy.activate":
        st.active[1] = _Implied(
            index, {"digest": event.get("digest"), "generation": event.get("generation")}
        )
        return
    key_id = event.get("key_id")
    if not isinstance(key_id, str):
        return
    if event.get("kind") in ("keys.created", "keys.registered", "keys.existing"):
        st.keys[key_id] = _Implied(
            index,
            {
                "principal": event["principal"],
                "role": event["role"],
                "groups": list(event["groups"]),
                "secret": event["secret"],
                "revoked": event.get("revoked_at") is not None,
            },
        )
    elif event.get("kind") == "keys.revoked" and key_id in st.keys:
        found = st.keys[key_id]
        st.keys[key_id] = _Implied(index, found.values | {"revoked": True})


def _agents_event(st: _State, index: int, name: str, sid: str, d: dict[str, Any]) -> None:
    agent_id = d.get("agent_id")
    if not isinstance(agent_id, str) or sid != chain_session_id("agents", agent_id):
        return  # not this agent's chain: no Warden write made it
    if name == "registered":
        st.agents[agent_id] = _Implied(
            index,
            {
                "owner": d["owner"],
                "groups": list(d["groups"]),
                "budgets": list(d["budgets"]),
                "created_at": d.get("created_at"),
                "revoked": False,
            },
        )
        # An agent registered with a public key only has no HMAC key (issue 21).
        if isinstance(d.get("key_id"), str):
            st.agent_keys[d["key_id"]] = _Implied(index, {"agent_id": agent_id, "revoked": False})
        public = d.get("public_key")
        if isinstance(public, dict) and isinstance(public.get("key_id"), str):
            st.agent_keys[public["key_id"]] = _Implied(
                index, {"agent_id": agent_id, "revoked": False}
            )
    elif name == "key_added" and isinstance(d.get("key_id"), str):
        # A public key added beside the agent's other keys (issue 21).
        st.agent_keys[d["key_id"]] = _Implied(index, {"agent_id": agent_id, "revoked": False})
    elif name == "rotated":
        for old in d.get("revoked_keys", ()):
            if old in st.agent_keys:
                st.agent_keys[old] = _Implied(index, st.agent_keys[old].values | {"revoked": True})
        st.agent_keys[d["key_id"]] = _Implied(index, {"agent_id": agent_id, "revoked": False})
    elif name == "revoked":
        if agent_id in st.agents:
            st.agents[agent_id] = _Implied(index, st.agents[agent_id].values | {"revoked": True})
        # Every key of the agent is revoked with it (the event lists the active ones).
        for key_id, implied in st.agent_keys.items():
            if implied.values["agent_id"] == agent_id:
                st.agent_keys[key_id] = _Implied(index, implied.values | {"revoked": True})
        for key_id in d.get("api_keys", ()):
            st.keys_revoked_by_agents[key_id] = index


def _vote_of(event: str, d: dict[str, Any]) -> tuple[str, str, str, str] | None:
    """``(principal, key_id, decision, reason)`` of the vote an event records, if any."""
    by = d.get("by")
    if not isinstance(by, dict):
        return None  # a transition no approver made (expiry, release, consumption)
    if event in ("voted", "approved"):
        return (by["principal"], by["key_id"], "approve", d.get("reason", ""))
    if event == "denied":
        return (by["principal"], by["key_id"], "deny", d.get("reason", ""))
    return None


def _desk_event(st: _State, index: int, event: str, sid: str, d: dict[str, Any]) -> None:
    if sid != chain_session_id("approval", "desk"):
        return
    task_id = d.get("task_id")
    if not isinstance(task_id, str):
        return
    before = st.tasks.get(task_id)
    if event == "requested":
        values: dict[str, Any] = {
            "kind": d["kind"],
            "wire": d.get("wire"),
            "approvals_required": d.get("approvals_required"),
            "requester": d.get("requester"),
            "action": d.get("action"),
            # Recorded since issue 17 (decision 421); None: not known, not compared.
            "timeout_disposition": d.get("timeout_disposition"),
            "detail": d.get("detail"),
            "votes": [],
            "vote_rows": {},
        }
    elif before is None:
        return  # a transition of a task no request filed: the task row is then unexplained
    else:
        values = dict(before.values)
        values["votes"] = list(values["votes"])
        values["vote_rows"] = dict(values["vote_rows"])
        if (
            event == "expired"
            and before.values["state"] == "approved"
            and values["timeout_disposition"] is not None
        ):
            values["timeout_disposition"] = "deny"  # an unused grant that lapsed
    for column in ("state", "scope", "action_hash", "approver_group", "expires_at"):
        values[column] = d[column]
    if event == "rerouted":
        values["votes"] = []
        values["vote_rows"] = {}
    vote = _vote_of(event, d)
    if vote is not None:
        values["votes"].append(vote)
        # The table keeps one vote per principal (a revoked key's vote is replaced).
        values["vote_rows"][vote[0]] = vote
    st.tasks[task_id] = _Implied(index, values)


def _budget_usage(st: _State, index: int, d: dict[str, Any], reserved: int, settled: Any) -> None:
    """Move every bucket on a hold's path: ``reserved`` ±1/0 times the amount; ``settled``
    a Decimal to add."""
    amount = Decimal(d["amount"])
    for budget_id, bucket in zip(d["path"], d["buckets"], strict=True):
        at = st.usage.get((budget_id, bucket))
        r, s = (at.values["reserved"], at.values["settled"]) if at else (Decimal(0), Decimal(0))
        st.usage[(budget_id, bucket)] = _Implied(
            index, {"reserved": r + reserved * amount, "settled": s + settled}
        )


def _spend_event(st: _State, index: int, event: str, sid: str, d: dict[str, Any]) -> None:
    if event == "budget":
        budget_id = d["budget_id"]
        if d.get("kind") == "org":
            st.spend_chains.add(chain_session_id("spend", budget_id))
        if sid not in st.spend_chains:
            return
        st.budgets[budget_id] = _Implied(
            index,
            {
                "kind": d["kind"],
                "parent_id": d.get("parent_id"),
                "currency": d["currency"],
                "cap": Decimal(d["cap"]),
                "period": d["period"],
                "name": d.get("name"),  # recorded since issue 17 (decision 421)
                "principals": list(d.get("principals", ())),
            },
        )
        return
    if sid not in st.spend_chains:
        return
    if event == "reserve":
        st.holds[d["reservation_id"]] = _Implied(
            index,
            {
                "budget_id": d["budget_id"],
                "path": list(d["path"]),
                "buckets": list(d["buckets"]),
                "amount": Decimal(d["amount"]),
                "currency": d["currency"],
                "action": d["action"],
                "expires_at": d["expires_at"],
                "principal": d.get("principal"),
                "status": "held",
                "settled_amount": None,
                "receipt_id": None,
                "reason": None,
            },
        )
        _budget_usage(st, index, d, 1, Decimal(0))
    elif event == "settle":
        hold = st.holds.get(d["reservation_id"])
        actual = Decimal(d["actual"])
        if hold is not None:
            st.holds[d["reservation_id"]] = _Implied(
                index,
                hold.values
                | {"status": "settled", "settled_amount": actual, "receipt_id": d["receipt_id"]},
            )
        _budget_usage(st, index, d, -1, actual)
        st.receipts[d["receipt_id"]] = _Implied(
            index,
            {
                "reservation_id": d["reservation_id"],
                "amount": actual,
                "undone": False,
                "principal": d.get("principal"),
                "path": list(d["path"]),
                "buckets": list(d["buckets"]),
            },
        )
    elif event in ("release", "expire"):
        hold = st.holds.get(d["reservation_id"])
        if hold is not None:
            status = "expired" if event == "expire" else "released"
            st.holds[d["reservation_id"]] = _Implied(
                index, hold.values | {"status": status, "reason": d.get("reason")}
            )
        _budget_usage(st, index, d, -1, Decimal(0))
    elif event == "undo":
        receipt = st.receipts.get(d["receipt_id"])
        if receipt is None:
            return
        st.receipts[d["receipt_id"]] = _Implied(index, receipt.values | {"undone": True})
        back = {
            "amount": d["amount"],
            "path": receipt.values["path"],
            "buckets": receipt.values["buckets"],
        }
        _budget_usage(st, index, back, 0, -Decimal(d["amount"]))
    # refused, settle_refused, policy: audit only, no state


def _kla_event(st: _State, index: int, sid: str, d: dict[str, Any]) -> None:
    """A ``warden/kla.*`` entry: the record it carries, as the row must store it."""
    from warden.store.kla_sql import request_id_of

    record_id = d.get("record_id")
    if not isinstance(record_id, str):
        return
    st.kla[(str(d.get("principal")), record_id)] = _Implied(
        index,
        {
            "digest of record": d.get("digest"),
            "digest": d.get("digest"),
            "kind": d.get("kind"),
            "status": d.get("status"),
            "principal": d.get("principal"),
            "signature": d.get("signature"),
            "kid": d.get("kid"),
            "signatures": d.get("signatures"),
            "action_request_id": request_id_of(d.get("record")),
            "chain": sid,
        },
    )


def rebuild(chain: list[tuple[int, dict[str, Any]]], keys: list[tuple[int, Any]]) -> _State:
    """Replay the events (each list in leaf order) into the state they imply."""
    st = _State()
    for index, event in keys:
        if isinstance(event, dict):
            _key_event(st, index, event)
    for index, entry in chain:
        kind, _, name = str(entry["step_type"])[len("warden/") :].partition(".")
        detail = entry.get(kind)
        if not isinstance(detail, dict):
            continue
        sid = str(entry.get("session_id", ""))
        if kind == "agents":
            _agents_event(st, index, name, sid, detail)
        elif kind == "approval":
            _desk_event(st, index, name, sid, detail)
        elif kind == "spend":
            _spend_event(st, index, name, sid, detail)
        elif kind == "kla":
            _kla_event(st, index, sid, detail)
        elif kind == "adcp" and name == "plan_synced":
            st.plans[sid] = _Implied(
                index,
                {
                    "plan_id": detail.get("plan_id"),
                    "version": detail.get("version"),
                    "plan_hash": detail.get("plan_hash"),
                    "plan_hash of record": detail.get("plan_hash"),
                    "budget_id": detail.get("budget_id"),
                },
            )
    for key_id, index in st.keys_revoked_by_agents.items():
        if key_id in st.keys:
            st.keys[key_id] = _Implied(index, st.keys[key_id].values | {"revoked": True})
    return st


# -- comparing ------------------------------------------------------------------------


def _json(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return f"<not JSON: {text!r}>"


def _dec(value: Any) -> Any:
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return value


class _Compare:
    def __init__(self, report: StateReport, table: str, implied: dict[Any, _Implied]) -> None:
        self.report = report
        self.table = table
        self.implied = implied
        self.seen: set[Any] = set()
        report.rows[table] = 0

    def row(self, key: Any, shown: str, have: dict[str, Any]) -> None:
        """Compare one stored row (``have``: column -> value) with what the events say."""
        self.report.rows[self.table] += 1
        self.seen.add(key)
        found = self.implied.get(key)
        if found is None:
            self.report.add(self.table, shown, "no leaf explains it", None)
            return
        for column, value in have.items():
            want = found.values.get(column)
            if want is None and column.removeprefix("record.") in _OPTIONAL:
                continue  # an older event did not record it
            if value != want:
                self.report.add(
                    self.table,
                    shown,
                    f"{column} is {_show(value)}, the log (leaf {found.index}) says {_show(want)}",
                    found.index,
                )
                return  # the first column that differs names the row

    def missing(
        self, shown: Callable[[Any], str], skip: Callable[[_Implied], bool] | None = None
    ) -> None:
        """Rows the events imply that the table lacks."""
        for key in sorted(set(self.implied) - self.seen, key=str):
            found = self.implied[key]
            if skip is not None and skip(found):
                continue
            self.report.add(
                self.table,
                shown(key),
                f"is gone, the log (leaf {found.index}) says it exists",
                found.index,
            )


#: Values an older Warden's events may lack (compared only when recorded).
_OPTIONAL = frozenset({"name", "timeout_disposition", "detail", "created_at"})


def _show(value: Any) -> str:
    if isinstance(value, Decimal):
        return repr(str(value))
    return repr(value)


def compare(rows: Rows, st: _State) -> StateReport:
    """Every row of ``rows`` against ``st``; the report lists each disagreement."""
    from warden.identity.api_keys import secret_digest

    report = StateReport()

    c = _Compare(report, "api_keys", st.keys)
    for key_id, principal, role, groups, secret_hash, revoked_at in rows["api_keys"]:
        c.row(
            key_id,
            str(key_id),
            {
                "principal": principal,
                "role": role,
                "groups": _json(groups),
                "secret": secret_digest(secret_hash),
                "revoked": revoked_at is not None,
            },
        )
    c.missing(str)

    c = _Compare(report, "agents", st.agents)
    for agent_id, owner, groups, budgets, created_at, revoked_at in rows["agents"]:
        c.row(
            agent_id,
            str(agent_id),
            {
                "owner": owner,
                "groups": _json(groups),
                "budgets": _json(budgets),
                "created_at": created_at,
                "revoked": revoked_at is not None,
            },
        )
    c.missing(str)

    c = _Compare(report, "agent_keys", st.agent_keys)
    for key_id, agent_id, revoked_at in rows["agent_keys"]:
        c.row(key_id, str(key_id), {"agent_id": agent_id, "revoked": revoked_at is not None})
    c.missing(str)

    _compare_tasks(report, rows, st)
    _compare_spend(report, rows, st)
    _compare_kla(report, rows, st)
    _compare_adcp_and_policy(report, rows, st)
    return report


def _compare_kla(report: StateReport, rows: Rows, st: _State) -> None:
    """Each stored KLA record against the chain entry that carried it: the digest is
    recomputed from the stored record, so an edit with or without its ``digest`` column
    is named (``warden export-evidence`` refuses the same rows)."""
    from warden.kla.evidence import Placement
    from warden.store.kla_sql import KlaRow

    c = _Compare(report, "kla_records", st.kla)
    for r in rows["kla_records"]:
        row = KlaRow(*r)
        # The execution's plain chain or, when another principal used its execution_id
        # first, the principal's own chain (decision 930): either is the row's.
        chains = [
            Placement(row.principal, row.execution_id, owned).session_id for owned in (False, True)
        ]
        key = _kla_key(st, row.principal, row.record_id)
        implied = st.kla.get(key)
        chained = implied.values["chain"] if implied is not None else None
        c.row(
            key,
            str(row.record_id),
            {
                "digest of record": row.recomputed_digest(),
                "digest": row.digest,
                "kind": row.kind,
                "status": row.status,
                "principal": row.principal,
                "signature": row.signature,
                "kid": row.kid,
                "signatures": _json(row.signatures),
                "action_request_id": row.filed_under(),
                "chain": chained if chained in chains else chains[0],
            },
        )
    c.missing(lambda key: str(key[1]))


def _kla_key(st: _State, principal: str, record_id: str) -> tuple[str, str]:
    """The event a row is compared with: its principal's record of that id or, when
    none and exactly one principal's carries the id, that one (so a row whose principal
    was edited is named by the column that differs)."""
    if (principal, record_id) in st.kla:
        return principal, record_id
    others = [k for k in st.kla if k[1] == record_id]
    return others[0] if len(others) == 1 else (principal, record_id)


#: The fields of a task's JSON record compared with the events.
_TASK_RECORD = (
    "kind",
    "state",
    "status",
    "scope",
    "action_hash",
    "expires_at",
    "approver_group",
    "approvals_required",
    "timeout_disposition",
    "requester",
    "action",
    "detail",
)


def _compare_tasks(report: StateReport, rows: Rows, st: _State) -> None:
    from warden.approvals.tasks import ApprovalState

    statuses = {s.value: s.status.value for s in ApprovalState}
    implied = {}
    for task_id, found in st.tasks.items():
        v = found.values
        want = v | {"status": statuses.get(v["state"])}
        want |= {f"record.{k}": v[k] for k in _TASK_RECORD if k != "status"}
        want["record.status"] = want["status"]
        want["record.votes"] = [tuple(x) for x in v["votes"]]
        implied[task_id] = _Implied(found.index, want)
    c = _Compare(report, "tasks", implied)
    for task_id, kind, status, record, state, action_hash, scope, expires_at, group in rows[
        "tasks"
    ]:
        rec = _json(record)
        rec = rec if isinstance(rec, dict) else {}
        have: dict[str, Any] = {
            "kind": kind,
            "state": state,
            "status": status,
            "scope": scope,
            "action_hash": action_hash,
            "expires_at": expires_at,
            "approver_group": group,
        }
        # The JSON record is what the desk reads back: its copies must agree too.
        for column in _TASK_RECORD:
            have[f"record.{column}"] = rec.get(column)
        have["record.votes"] = [
            (v.get("principal"), v.get("key_id"), v.get("decision"), v.get("reason"))
            for v in rec.get("votes") or ()
            if isinstance(v, dict)
        ]
        c.row(task_id, str(task_id), have)
    c.missing(str)

    c = _Compare(report, "approval_votes", {})
    for (task_id, principal), vote in (
        ((t, p), _Implied(i.index, {"key_id": v[1], "decision": v[2], "reason": v[3]}))
        for t, i in st.tasks.items()
        for p, v in i.values["vote_rows"].items()
    ):
        c.implied[(task_id, principal)] = vote
    for task_id, principal, key_id, decision, reason in rows["approval_votes"]:
        c.row(
            (task_id, principal),
            f"{task_id}/{principal}",
            {"key_id": key_id, "decision": decision, "reason": reason},
        )
    c.missing(lambda k: f"{k[0]}/{k[1]}")


def _compare_spend(report: StateReport, rows: Rows, st: _State) -> None:
    c = _Compare(report, "budgets", st.budgets)
    for budget_id, kind, parent_id, currency, cap, period, name, principals in rows["budgets"]:
        c.row(
            budget_id,
            str(budget_id),
            {
                "kind": kind,
                "parent_id": parent_id,
                "currency": currency,
                "cap": _dec(cap),
                "period": period,
                "name": name,
                "principals": _json(principals),
            },
        )
    c.missing(str)

    c = _Compare(report, "budget_usage", st.usage)
    zero = {"reserved": Decimal(0), "settled": Decimal(0)}
    for budget_id, bucket, reserved, settled in rows["budget_usage"]:
        key = (budget_id, bucket)
        have = {"reserved": _dec(reserved), "settled": _dec(settled)}
        if key not in st.usage and have == zero:
            # PostgreSQL creates a zero row to lock it before the cap check.
            report.rows["budget_usage"] += 1
            c.seen.add(key)
            continue
        c.row(key, f"{budget_id}/{bucket}", have)
    c.missing(lambda k: f"{k[0]}/{k[1]}", skip=lambda i: i.values == zero)

    c = _Compare(report, "reservations", st.holds)
    for reservation_id, budget_id, status, expires_at, record, principal in rows["reservations"]:
        rec = _json(record)
        rec = rec if isinstance(rec, dict) else {}
        have = {
            "budget_id": budget_id,
            "status": status,
            "expires_at": expires_at,
            "principal": principal,
            "record.status": rec.get("status"),
            "record.budget_id": rec.get("budget_id"),
            "record.expires_at": rec.get("expires_at"),
            "record.path": rec.get("path"),
            "record.buckets": rec.get("buckets"),
            "record.amount": _dec(rec.get("amount")),
            "record.currency": rec.get("currency"),
            "record.action": rec.get("action"),
            "record.settled_amount": (
                _dec(rec["settled_amount"]) if rec.get("settled_amount") is not None else None
            ),
            "record.receipt_id": rec.get("receipt_id"),
            "record.reason": rec.get("reason"),
        }
        found = st.holds.get(reservation_id)
        if found is not None:
            c.implied[reservation_id] = _Implied(
                found.index,
                found.values
                | {
                    f"record.{k}": found.values[k]
                    for k in (
                        "status",
                        "budget_id",
                        "expires_at",
                        "path",
                        "buckets",
                        "amount",
                        "currency",
                        "action",
                        "settled_amount",
                        "receipt_id",
                        "reason",
                    )
                },
            )
        c.row(reservation_id, str(reservation_id), have)
    c.missing(str)

    c = _Compare(report, "receipts", st.receipts)
    for receipt_id, reservation_id, record, principal in rows["receipts"]:
        rec = _json(record)
        rec = rec if isinstance(rec, dict) else {}
        c.row(
            receipt_id,
            str(receipt_id),
            {
                "reservation_id": reservation_id,
                "amount": _dec(rec.get("amount")),
                "undone": rec.get("undone_at") is not None,
                "principal": principal,
            },
        )
    c.missing(str)


def _compare_adcp_and_policy(report: StateReport, rows: Rows, st: _State) -> None:
    """Each AdCP plan against its chain's latest ``plan_synced`` (its hash recomputed from
    the stored record); each stored bundle's source against its digest; the active row
    against the latest activation."""
    from warden.adcp.plan_hash import plan_hash
    from warden.errors import WardenError
    from warden.policy.bundle import parse_bundle

    c = _Compare(report, "adcp_plans", st.plans)
    for principal, plan_id, version, budget_id, stored_hash, record in rows["adcp_plans"]:
        try:
            recomputed = plan_hash(json.loads(record))
        except (WardenError, ValueError, TypeError, KeyError) as exc:
            recomputed = f"<not a plan: {exc}>"
        c.row(
            chain_session_id("adcp", f"{principal}/{plan_id}"),
            f"{principal}/{plan_id}",
            {
                "plan_hash of record": recomputed,
                "plan_hash": stored_hash,
                "plan_id": plan_id,
                "version": version,
                "budget_id": budget_id,
            },
        )
    # A plan chain is named by its session id only: a deleted row is named by that id.
    c.missing(lambda sid: f"of plan chain {sid}")

    report.rows["policy_bundles"] = 0
    for digest, source in rows["policy_bundles"]:
        report.rows["policy_bundles"] += 1
        try:
            got = parse_bundle(str(source), source=f"<stored {str(digest)[:19]}>").ref.digest
        except WardenError as exc:
            got = f"<no bundle: {exc.message[:200]}>"
        if got != digest:
            report.add("policy_bundles", str(digest), f"the stored source hashes to {got}", None)

    c = _Compare(report, "policy_active", st.active)
    for digest, generation in rows["policy_active"]:
        c.row(1, "1", {"digest": digest, "generation": int(generation)})
    c.missing(str)


def check(engine: Engine) -> StateReport:
    """Read the tables and the events in one snapshot, rebuild, compare."""
    rows, chain, keys = read(engine)
    return compare(rows, rebuild(chain, keys))
