"""Helpers for the AdCP wire tests: a real uvicorn server on loopback around a started
:class:`Runtime`, REST and MCP clients that validate every response, and a movable clock.

Validation is independent of the runtime: python-jsonschema (not jsonschema-rs) over the
seed ``001_…`` (the protocol envelope, read from /work/shared/seeds) and the task schemas
read from the shared spec tree (``shared/specs/files/adcp/schemas-3.2.0-beta.0``), plus the
two files Warden ships that the tree lacks (``enums/specialism.json`` and the marked
stand-in ``protocol/get-adcp-capabilities-response.json``).

Documented deviation: ``protocol/get-task-status-response.json`` closes ``task_type`` to
media-buy/creative/signals task names; there is none for ``check_governance``. Warden
answers ``task_type: check_governance`` and these tests validate get_task_status replies
against that schema with ``task_type`` opened to a string (and assert its value).
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import uvicorn
from conftest import ASSETS, ROOT, SHARED, ensure_agent, free_port
from jsonschema import Draft7Validator, FormatChecker
from referencing import Registry, Resource

from warden.runtime import Runtime
from warden.server.app import create_app
from warden.store.idempotency import Idempotency

SHIPPED = ROOT / "src" / "warden" / "schemas" / "adcp"
#: The task schemas: Warden's shipped copies of the 3.2.0-beta.0 tree, which
#: tests/approvals/test_notifier.py proves byte-identical to ../shared's originals
#: whenever ../shared is at hand (CI's clean clone may not have it).
SHARED_SCHEMAS = SHIPPED
#: The seed 001 (the AdCP 3.2.0-beta.0 protocol envelope), copied verbatim to the assets.
SEED = ASSETS / "adcp" / "001_de5576be13e92cd9.txt"
#: The storyboards, copied verbatim from ../shared (tests/adcp/runner/README.md).
COMPLIANCE = ROOT / "tests" / "adcp" / "runner" / "compliance-3.2.0-beta.0"
SHARED_COMPLIANCE = SHARED / "specs" / "files" / "adcp" / "compliance-3.2.0-beta.0"
PFX = "https://adcontextprotocol.org/schemas/3.2.0-beta.0/"


def _registry() -> Registry:
    reg: Registry = Registry()
    docs: dict[str, Any] = {}
    for path in SHARED_SCHEMAS.rglob("*.json"):
        doc = json.loads(path.read_text())
        docs[doc["$id"]] = doc
    for rel in ("enums/specialism.json", "protocol/get-adcp-capabilities-response.json"):
        doc = json.loads((SHIPPED / rel).read_text())
        docs.setdefault(doc["$id"], doc)
    seed = json.loads(SEED.read_text())
    docs[seed["$id"]] = seed  # the seed is the envelope's authority
    status = copy.deepcopy(docs[PFX + "protocol/get-task-status-response.json"])
    status["$id"] = PFX + "warden-test/get-task-status-response.json"
    status["properties"]["task_type"] = {"type": "string"}
    docs[status["$id"]] = status
    for uri, doc in docs.items():
        reg = reg.with_resource(uri, Resource.from_contents(doc))
    return reg


REGISTRY = _registry()
RESPONSE_SCHEMAS = {
    "get_adcp_capabilities": "protocol/get-adcp-capabilities-response.json",
    "sync_plans": "governance/sync-plans-response.json",
    "check_governance": "governance/check-governance-response.json",
    "report_plan_outcome": "governance/report-plan-outcome-response.json",
    "get_plan_audit_logs": "governance/get-plan-audit-logs-response.json",
    "get_task_status": "warden-test/get-task-status-response.json",
}


def validator(path: str) -> Draft7Validator:
    return Draft7Validator({"$ref": PFX + path}, registry=REGISTRY, format_checker=FormatChecker())


ENVELOPE = validator("core/protocol-envelope.json")
SUBMITTED = validator("core/compact-task-submitted.json")
ERROR = validator("core/error.json")
TASKS = {task: validator(path) for task, path in RESPONSE_SCHEMAS.items()}
ERROR_CODES = json.loads((SHARED_SCHEMAS / "enums" / "error-code.json").read_text())


def problems(v: Draft7Validator, instance: Any) -> list[str]:
    return [f"/{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(instance)]


def check_response(task: str, body: dict[str, Any], *, failed: bool) -> None:
    """``body`` validates against the seed envelope and, by its kind, the task schema
    (a success), ``compact-task-submitted`` (an async submission) or the two-layer error
    model (a failure)."""
    assert not problems(ENVELOPE, body), (problems(ENVELOPE, body), body)
    assert "task_status" not in body and "response_status" not in body
    assert isinstance(body.get("timestamp"), str) and body.get("context_id")
    assert isinstance(body.get("replayed"), bool)
    if failed:
        assert body["status"] == "failed", body
        assert body["errors"] and body["adcp_error"] == body["errors"][0], body
        err = body["adcp_error"]
        assert not problems(ERROR, err), err
        assert err["code"] in ERROR_CODES["enum"], err
        assert err["recovery"] == ERROR_CODES["enumMetadata"][err["code"]]["recovery"], err
        return
    assert "adcp_error" not in body, body
    if body["status"] == "submitted" and task != "get_task_status":
        assert not problems(SUBMITTED, body), (problems(SUBMITTED, body), body)
        return
    if task in TASKS:
        assert not problems(TASKS[task], body), (problems(TASKS[task], body), body)


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += timedelta(**kw)


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    raw: bytes

    @property
    def failed(self) -> bool:
        return self.body.get("status") == "failed"

    @property
    def code(self) -> str | None:
        err = self.body.get("adcp_error")
        return err.get("code") if isinstance(err, dict) else None


@dataclass
class Rest:
    """``POST /adcp/<task>`` with one API key; every reply is validated."""

    client: httpx.Client
    token: str | None

    def call(
        self, task: str, body: Any = None, *, raw: bytes | None = None, **headers: str
    ) -> Reply:
        h = {"content-type": "application/json", **headers}
        if self.token is not None:
            h.setdefault("authorization", f"Bearer {self.token}")
        content = raw if raw is not None else json.dumps(body if body is not None else {}).encode()
        r = self.client.post(f"/adcp/{task}", content=content, headers=h)
        parsed = r.json()
        assert r.headers["x-adcp-status"] == parsed["status"]
        failed = parsed.get("status") == "failed"
        assert failed == (r.status_code >= 400), (r.status_code, parsed)
        check_response(task, parsed, failed=failed)
        return Reply(r.status_code, parsed, r.content)


@dataclass
class Live:
    """A started runtime served by uvicorn on 127.0.0.1."""

    rt: Runtime
    url: str
    agent_token: str
    http: httpx.Client

    def rest(self, token: str | None = "agent") -> Rest:
        return Rest(self.http, self.agent_token if token == "agent" else token)

    def key(self, principal: str, role: str, groups: tuple[str, ...] = ()) -> str:
        ensure_agent(self.rt, principal, role)
        return self.rt.api_keys.create(principal, role, groups)[1]


@contextmanager
def live(rt: Runtime, clock: Clock | None = None) -> Iterator[Live]:
    """Serve ``rt`` (``create_app``) with uvicorn on a free loopback port until exit."""
    idem = Idempotency(rt.settings.idempotency_ttl_seconds, clock=clock)
    if clock is not None:
        assert rt.adcp is not None
        rt.adcp.state.clock = clock
    app = create_app(rt, idempotency=idem)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        assert thread.is_alive(), "uvicorn exited"
        time.sleep(0.02)
    url = f"http://127.0.0.1:{port}"
    ensure_agent(rt, "buyer-agent")
    _, token = rt.api_keys.create("buyer-agent", "agent")
    try:
        with httpx.Client(base_url=url, timeout=30) as http:
            yield Live(rt, url, token, http)
    finally:
        server.should_exit = True
        thread.join(20)


def plan(plan_id: str = "plan-q2", total: float = 100000, **extra: Any) -> dict[str, Any]:
    """A sync_plans ``plans[]`` item (storyboard-shaped)."""
    out: dict[str, Any] = {
        "plan_id": plan_id,
        "brand": {"domain": "acmeoutdoor.example"},
        "objectives": "Q2 outdoor lifestyle campaign",
        "budget": {"total": total, "currency": "USD", "reallocation_threshold": total},
        "flight": {"start": "2020-01-01T00:00:00Z", "end": "2099-06-30T23:59:59Z"},
        "countries": ["US"],
    }
    out.update(extra)
    return out


def intent(plan_id: str, amount: float, **extra: Any) -> dict[str, Any]:
    """A modern (3.2) intent check for a create_media_buy of ``amount`` USD."""
    body: dict[str, Any] = {
        "plan_id": plan_id,
        "caller": "https://pinnacle-agency.example",
        "target_agent": "https://seller.example.com",
        "tool": "create_media_buy",
        "purchase_type": "media_buy",
        "proposed_commitment": {"amount": amount, "currency": "USD"},
        "payload": {
            "brand": {"domain": "acmeoutdoor.example"},
            "total_budget": {"amount": amount, "currency": "USD"},
            "start_time": "asap",
            "end_time": "2099-06-30T23:59:59Z",
            "packages": [{"product_id": "p1", "budget": amount, "pricing_option_id": "cpm"}],
            "idempotency_key": "cmb-" + "0" * 20 + str(int(amount)),
        },
    }
    body.update(extra)
    return body


def adcp_entries(rt: Runtime) -> list[dict[str, Any]]:
    """Every ``warden/adcp.*`` audit entry in the store."""
    return [
        r["entry"]
        for r in rt.store.iter_records()
        if r["kind"] == "entry" and str(r["entry"]["step_type"]).startswith("warden/adcp.")
    ]


@asynccontextmanager
async def mcp_session(url: str, token: str) -> Any:
    """An MCP ClientSession (official SDK) on ``url``/mcp with the API key."""
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, streamable_http_client(url + "/mcp", http_client=http) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


def run(coro: Any) -> Any:
    return asyncio.run(coro)
