"""PostgreSQL round trips per ACS decision (issue 16 item 4).

A Warden with the peers' scenario bundle (``bench/scenario-20-rules.yaml``) on the
real PostgreSQL (default ``postgresql://postgres@127.0.0.1:5432/test``, in a fresh
schema dropped afterwards) decides, in process through ``AcsService.handle``:

- ``allow``: ``payments.transfer`` of $50 in production (rule r18);
- ``ask-first``: the scenario's request ($2,500, production, rule r19), which files a
  desk task;
- ``ask``: the same request again: the approval gate finds the task pending (the
  steady state the side-by-side benchmark times);
- ``grant``: an ask for a new action files its task, an approver approves it through
  the desk (``ApprovalDesk.approve``, as the desk API and the tests do) on this
  replica, and the identical step is resubmitted: the step that consumes the grant
  (measured: the resubmission only);
- ``grant-elsewhere``: the same, but the approval is made as if on another replica
  (this replica's desk still remembers the task as pending, as filed);
- ``spend-quote``: ``POST /v1/quotes`` on the spend wire (in process through the ASGI
  app, an agent API key of the scenario's agent, $5 on a budget bound to it, a fresh
  ``Idempotency-Key`` each time), whatever the bundle decides for it; the app's
  background workers (webhook delivery, expiry) share the trace, so the minimum is the
  figure;
- ``kla-request``: ``POST /v1/action-requests`` (the same way: the KLA schema's
  ``basic-read`` example with a fresh id, one execution throughout);
- ``adcp-check``: AdCP ``check_governance`` (``POST /adcp/check_governance``, an intent
  check of a $10 ``create_media_buy`` against a plan synced once).

Every psycopg connection the process opens is traced with libpq's own protocol trace
(``PGconn.trace``), so whatever layer sends SQL (the store's raw connection, an engine,
a pool, a pre-ping) is seen. For each decision the trace lines written while it ran are
counted:

- ``statements``: simple ``Query`` messages plus extended-protocol ``Execute`` messages,
  so ``BEGIN``, ``COMMIT`` and ``ROLLBACK`` count like any other statement;
- ``round_trips``: runs of consecutive client→server messages, i.e. the times the
  client sent and then waited for the server (a pipeline of several statements is one);
- ``sql``: the SQL statements those messages carry (a ``Query`` string of several
  statements separated by ``;`` counts each), so a round trip that folds many
  statements into one string shows how many it folds.

Each kind is decided ``--repeat`` times after ``--warmup`` decisions; the minimum is
reported (the steady state) with the maximum beside it: psycopg prepares a statement on
its fifth use with a ``Parse`` round trip of its own, and a background thread's query
can only add. The statements of a decision that took the fewest are listed as sent.

    python bench/pg_round_trips.py
    python bench/pg_round_trips.py --warden-src ../wt-before/src --warden-src src --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"

ASK = {
    "agent_id": "agent-7",
    "tool": "payments.transfer",
    "args": {"amount_usd": 2500.0, "currency": "USD", "to": "acct-42", "memo": "invoice 1187"},
    "env": "production",
}
ALLOW = {**ASK, "args": {**ASK["args"], "amount_usd": 50.0}}
#: (kind, request, expected decision), in the order they are measured.
KINDS = (("allow", ALLOW, "allow"), ("ask-first", ASK, "ask"), ("ask", ASK, "ask"))


class ProtocolTrace:
    """libpq traces of every psycopg connection opened after :meth:`install`.

    Each connection writes to its own file under ``folder``; :meth:`mark` notes where
    every file ends, :meth:`since` returns the lines written after a mark. libpq flushes
    a client message as it sends it, so every client message of a finished decision is
    in the file (server replies may still sit in its buffer: they are not needed).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: list[Path] = []
        self._handles: list[Any] = []
        self._lock = threading.Lock()

    def install(self) -> None:
        import psycopg
        from psycopg import pq

        original = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]
        trace = self

        def connect(cls: Any, *args: Any, **kwargs: Any) -> Any:
            conn = original(cls, *args, **kwargs)
            with trace._lock:
                path = trace.folder / f"conn-{len(trace.files)}.trace"
                handle = path.open("w")
                trace.files.append(path)
                trace._handles.append(handle)
            conn.pgconn.trace(handle.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            return conn

        psycopg.Connection.connect = classmethod(connect)  # type: ignore[method-assign,assignment]
        psycopg.connect = psycopg.Connection.connect

    @staticmethod
    def _flush() -> None:
        """libpq writes its trace through a buffered C ``FILE``: a long message can sit
        in the buffer after it was sent, so every C stream is flushed before a read."""
        import ctypes

        ctypes.CDLL(None).fflush(None)

    def mark(self) -> dict[Path, int]:
        self._flush()
        with self._lock:
            return {p: p.stat().st_size for p in self.files}

    def since(self, mark: dict[Path, int]) -> list[tuple[list[str], dict[str, str]]]:
        """Per connection with traffic: the trace lines written after ``mark``, and the
        SQL of every statement the connection had prepared before it (by name; ``""`` is
        the unnamed one), so that a prepared statement's ``Bind`` can be named."""
        self._flush()
        with self._lock:
            files = list(self.files)
        out = []
        for path in files:
            everything = path.read_bytes()
            start = mark.get(path, 0)
            lines = records(everything[start:].decode("utf-8", "replace"))
            if lines:
                out.append((lines, prepared_sql(everything[:start].decode("utf-8", "replace"))))
        return out


_RECORD = re.compile(r"^[FB]\t\d+\t")


def records(trace: str) -> list[str]:
    """The messages of a trace, one string each: libpq prints a statement's text as it
    is, so a multi-line SQL statement continues on lines of its own."""
    out: list[str] = []
    for line in trace.splitlines():
        if _RECORD.match(line) or not out:
            out.append(line)
        else:
            out[-1] += "\n" + line
    return out


def _fields(rest: str) -> list[str]:
    """The quoted and bare words of a trace line's message body."""
    import shlex

    try:
        return shlex.split(rest)
    except ValueError:
        return rest.split()


def prepared_sql(trace: str) -> dict[str, str]:
    """Statement name → SQL from a connection's ``Parse`` lines (the last one wins, as
    on the server: the unnamed statement is replaced by each unnamed Parse)."""
    names: dict[str, str] = {}
    for line in records(trace):
        parts = line.split("\t", 3)
        if len(parts) == 4 and parts[0] == "F" and parts[2] == "Parse":
            words = _fields(parts[3])
            if len(words) >= 2:
                names[words[0]] = words[1]
    return names


def count(connections: list[tuple[list[str], dict[str, str]]]) -> dict[str, Any]:
    """``statements``, ``round_trips`` and the statements' SQL from trace lines."""
    statements = round_trips = sql = 0
    sent: list[str] = []
    for lines, names in connections:
        previous = "B"
        bound = ""
        for line in lines:
            parts = line.split("\t", 3)
            if len(parts) < 3:
                continue
            direction, message = parts[0], parts[2]
            body = parts[3] if len(parts) == 4 else ""
            if direction == "F":
                if previous != "F":
                    round_trips += 1
                if message == "Query":
                    statements += 1
                    sql += sql_statements(body)
                    sent.append(" ".join(_fields(body)[:1]))
                elif message == "Parse":
                    words = _fields(body)
                    if len(words) >= 2:
                        names[words[0]] = words[1]
                elif message == "Bind":
                    words = _fields(body)
                    bound = words[1] if len(words) >= 2 else ""
                elif message == "Execute":
                    statements += 1
                    sql += 1
                    sent.append(names.get(bound, f"(prepared {bound})"))
            previous = direction
    return {"statements": statements, "round_trips": round_trips, "sql": sql, "sent": sent}


def sql_statements(body: str) -> int:
    """How many statements a traced ``Query`` string holds: its ``;`` outside
    single-quoted literals, plus one unless it ends with one."""
    text = body.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    count, quoted = 0, False
    for ch in text:
        if ch == "'":
            quoted = not quoted
        elif ch == ";" and not quoted:
            count += 1
    return count + (0 if text.rstrip().endswith(";") else 1)


def measure(database_url: str, repeat: int, warmup: int) -> dict[str, Any]:
    """Run in the process whose ``warden`` is measured (see the module doc)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    sys.path.insert(0, str(HERE))
    schema = f"bench_rt_{uuid.uuid4().hex[:12]}"
    admin = create_engine(make_url(database_url).set(drivername="postgresql+psycopg"))
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(database_url).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        with tempfile.TemporaryDirectory(prefix="warden-pg-rt-") as tmp:
            trace = ProtocolTrace(Path(tmp))
            trace.install()
            from warden_case import ScenarioWarden

            import warden

            scenario_warden = ScenarioWarden(
                Path(tmp),
                HERE / "scenario-20-rules.yaml",
                database_url=url.render_as_string(hide_password=False),
            )
            try:
                results: dict[str, Any] = {}
                for _ in range(warmup):
                    scenario_warden.decide(ALLOW)
                for kind, request, expected in KINDS:
                    rows = []
                    for _ in range(1 if kind == "ask-first" else repeat):
                        mark = trace.mark()
                        got, _cited = scenario_warden.decide(request)
                        if got != expected:
                            raise SystemExit(f"{kind}: Warden answered {got}, not {expected}")
                        rows.append(count(trace.since(mark)))
                        if os.environ.get("BENCH_RT_DEBUG"):
                            print(kind, rows[-1], file=sys.stderr)
                    results[kind] = _summary(rows)
                for kind, elsewhere in (("grant", False), ("grant-elsewhere", True)):
                    results[kind] = measure_grant(scenario_warden, trace, repeat, elsewhere)
                results["spend-quote"] = measure_quote(scenario_warden, trace, repeat)
                results["kla-request"] = measure_kla(scenario_warden, trace, repeat)
                results["adcp-check"] = measure_adcp(scenario_warden, trace, repeat)
            finally:
                scenario_warden.close()
            return {"warden": str(Path(warden.__file__).resolve().parent), "kinds": results}
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The fewest round trips of ``rows`` (the steady state), the most beside them, and
    the statements of a decision that took the fewest."""
    trips = [r["round_trips"] for r in rows]
    return {
        "round_trips": min(trips),
        "round_trips_max": max(trips),
        "statements": min(r["statements"] for r in rows),
        "statements_max": max(r["statements"] for r in rows),
        "sql": min(r["sql"] for r in rows),
        "decisions": len(rows),
        "sent": rows[trips.index(min(trips))]["sent"],
    }


def measure_grant(
    scenario_warden: Any, trace: ProtocolTrace, repeat: int, elsewhere: bool
) -> dict[str, Any]:
    """Round trips of the resubmission that consumes an approved grant (module doc)."""
    from warden.identity.api_keys import Role

    rt = scenario_warden.runtime
    who, _ = rt.api_keys.create(f"bench-approver-{uuid.uuid4().hex[:6]}", Role.APPROVER,
                                ("finance",))  # fmt: skip
    desk = rt.desk
    rows = []
    for _ in range(repeat):
        request = {**ASK, "args": {**ASK["args"], "memo": f"grant {uuid.uuid4().hex}"}}
        asked = scenario_warden.handle(scenario_warden.body(request))["result"]
        if asked["decision"] != "ask":
            raise SystemExit(f"grant: the first ask was answered {asked['decision']}")
        # (A checkout older than decision 268 keeps no memory: both cases are the same.)
        memory = getattr(desk, "_pending_by_action", None)
        remembered = dict(memory) if memory is not None else {}
        desk.approve(asked["ask_details"]["task_id"], who, "bench")
        if elsewhere and memory is not None:
            # Approved on another replica: this desk still remembers the task as filed.
            memory.clear()
            memory.update(remembered)
        mark = trace.mark()
        got, _cited = scenario_warden.decide(request)
        if got != "allow":
            raise SystemExit(f"grant: the approved step was answered {got}, not allow")
        rows.append(count(trace.since(mark)))
        if os.environ.get("BENCH_RT_DEBUG"):
            print("grant", elsewhere, rows[-1], file=sys.stderr)
    return _summary(rows)


def measure_quote(scenario_warden: Any, trace: ProtocolTrace, repeat: int) -> dict[str, Any]:
    """Round trips of ``POST /v1/quotes`` (see the module doc)."""
    from decimal import Decimal

    from fastapi.testclient import TestClient
    from warden_case import AGENT_ID

    from warden.identity.api_keys import Role
    from warden.server.app import create_app
    from warden.spend import Budget, BudgetKind, Period

    rt = scenario_warden.runtime
    rt.spend.define_budget(
        Budget("bench", BudgetKind.ORG, "USD", Decimal(10**9), Period.NONE, None,
               principals=(AGENT_ID,))
    )  # fmt: skip
    _, token = rt.api_keys.create(AGENT_ID, Role.AGENT)
    body = {"budgetId": "bench", "action": "buy", "amount": "5", "currency": "USD"}
    rows, statuses = [], []
    with TestClient(create_app(rt)) as client:
        for i in range(repeat + 2):
            headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": uuid.uuid4().hex}
            mark = trace.mark()
            answer = client.post("/v1/quotes", json=body, headers=headers)
            counted = count(trace.since(mark))
            if i < 2:
                continue  # the app's first requests warm its caches
            statuses.append(f"{answer.status_code} {answer.json().get('data', {}).get('decision')}")
            rows.append(counted)
    return {**_summary(rows), "answers": sorted(set(statuses))}


def _http_rows(
    client: Any, trace: ProtocolTrace, repeat: int, send: Any, answer_of: Any
) -> dict[str, Any]:
    """Round trips of ``send(client, i)`` (one request) ``repeat`` times after two that
    warm the app's caches; ``answer_of(response)`` names each answer."""
    rows, answers = [], []
    for i in range(repeat + 2):
        mark = trace.mark()
        response = send(client, i)
        counted = count(trace.since(mark))
        if i < 2:
            continue
        answers.append(f"{response.status_code} {answer_of(response)}")
        rows.append(counted)
    return {**_summary(rows), "answers": sorted(set(answers))}


def measure_kla(scenario_warden: Any, trace: ProtocolTrace, repeat: int) -> dict[str, Any]:
    """Round trips of ``POST /v1/action-requests`` (a KLA action request v1, the schema's
    ``basic-read`` example with a fresh id, one execution throughout), whatever the
    bundle decides for it."""
    from datetime import UTC, datetime

    from fastapi.testclient import TestClient
    from warden_case import AGENT_ID

    from warden.identity.api_keys import Role
    from warden.server.app import create_app

    rt = scenario_warden.runtime
    example = Path(__import__("warden").__file__).parent / "schemas/kla/examples/basic-read.json"
    record = json.loads(example.read_text(encoding="utf-8"))
    execution = f"exec_bench_{uuid.uuid4().hex[:12]}"
    _, token = rt.api_keys.create(AGENT_ID, Role.AGENT)

    def send(client: Any, i: int) -> Any:
        body = {
            **record,
            "action_request_id": f"req_bench_{uuid.uuid4().hex}",
            "correlation": {**record["correlation"], "execution_id": execution},
            "requested_at": datetime.now(UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
        }
        headers = {"Authorization": f"Bearer {token}"}
        return client.post("/v1/action-requests", json=body, headers=headers)

    def answer_of(response: Any) -> Any:
        data = response.json().get("data") or {}
        return (data.get("decision") or {}).get("decision")

    with TestClient(create_app(rt)) as client:
        return _http_rows(client, trace, repeat, send, answer_of)


def measure_adcp(scenario_warden: Any, trace: ProtocolTrace, repeat: int) -> dict[str, Any]:
    """Round trips of AdCP ``check_governance`` (``POST /adcp/check_governance``, an
    intent check of a $10 ``create_media_buy`` against a plan synced once), whatever the
    bundle decides for it."""
    from fastapi.testclient import TestClient
    from warden_case import AGENT_ID

    from warden.identity.api_keys import Role
    from warden.server.app import create_app

    rt = scenario_warden.runtime
    _, token = rt.api_keys.create(AGENT_ID, Role.AGENT)
    headers = {"Authorization": f"Bearer {token}"}
    plan_id = f"plan-bench-{uuid.uuid4().hex[:8]}"
    plan = {
        "plan_id": plan_id,
        "brand": {"domain": "acmeoutdoor.example"},
        "objectives": "bench",
        "budget": {"total": 10**9, "currency": "USD", "reallocation_threshold": 10**9},
        "flight": {"start": "2020-01-01T00:00:00Z", "end": "2099-06-30T23:59:59Z"},
        "countries": ["US"],
    }

    def send(client: Any, i: int) -> Any:
        body = {
            "plan_id": plan_id,
            "caller": "https://pinnacle-agency.example",
            "target_agent": "https://seller.example.com",
            "tool": "create_media_buy",
            "purchase_type": "media_buy",
            "proposed_commitment": {"amount": 10, "currency": "USD"},
            "payload": {
                "brand": {"domain": "acmeoutdoor.example"},
                "total_budget": {"amount": 10, "currency": "USD"},
                "start_time": "asap",
                "end_time": "2099-06-30T23:59:59Z",
                "packages": [{"product_id": "p1", "budget": 10, "pricing_option_id": "cpm"}],
                "idempotency_key": f"cmb-{uuid.uuid4().hex}",
            },
        }
        return client.post("/adcp/check_governance", json=body, headers=headers)

    with TestClient(create_app(rt)) as client:
        synced = client.post(
            "/adcp/sync_plans",
            json={"idempotency_key": str(uuid.uuid4()), "plans": [plan]},
            headers=headers,
        )
        if synced.status_code != 200:
            raise SystemExit(f"adcp: sync_plans answered {synced.status_code}: {synced.text}")
        return _http_rows(client, trace, repeat, send, lambda r: r.json().get("verdict"))


def run_checkout(src: Path, ns: argparse.Namespace) -> dict[str, Any]:
    """:func:`measure` in a child process importing Warden from ``src``."""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE}"}
    args = [sys.executable, str(Path(__file__).resolve()), "--inner", "--database-url",
            ns.database_url, "--repeat", str(ns.repeat), "--warmup", str(ns.warmup)]  # fmt: skip
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"measuring {src} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    if not Path(result["warden"]).is_relative_to(src):
        raise SystemExit(f"the child imported {result['warden']}, not {src}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--warden-src",
        type=Path,
        action="append",
        help="a checkout's src folder, once per checkout (default: this one's)",
    )
    ap.add_argument("--label", action="append", help="a name per --warden-src")
    ap.add_argument("--database-url", default=DEFAULT_URL)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.inner:
        print(json.dumps(measure(ns.database_url, ns.repeat, ns.warmup)))
        return
    srcs = [p.resolve() for p in (ns.warden_src or [ROOT / "src"])]
    labels = ns.label or (
        ["warden"] if len(srcs) == 1 else ["before", "after"] if len(srcs) == 2 else
        [f"w{i + 1}" for i in range(len(srcs))]
    )  # fmt: skip
    if len(labels) != len(srcs):
        raise SystemExit("give one --label per --warden-src")
    out = {label: run_checkout(src, ns) for label, src in zip(labels, srcs, strict=True)}
    print(f"{'checkout':10} {'decision':15} {'round trips':>12} {'statements':>11} {'SQL':>5}")
    for label, result in out.items():
        for kind, r in result["kinds"].items():
            spread = (
                f" (max {r['round_trips_max']})" if r["round_trips_max"] != r["round_trips"] else ""
            )
            print(
                f"{label:10} {kind:15} {r['round_trips']:>12} {r['statements']:>11} "
                f"{r.get('sql', r['statements']):>5}{spread}"
            )
    for label, result in out.items():
        print(f"\n{label}, statements of one steady ask ({result['warden']}):")
        for sql in result["kinds"]["ask"]["sent"]:
            print(f"  {' '.join(sql.split())[:110]}")
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
