"""Helpers for the spend wire tests: a client that validates every response against the
seed schema branch it claims, budget trees, a movable clock, and a real-server wrapper.

Validation uses python-jsonschema (not the runtime's code) against the shipped copy of the
seed (``src/warden/schemas/spend/envelope.schema.json``) and, for mutating successes, also
against SproutPad's stricter upstream v1 schema (tests/conformance/vectors/).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from conftest import ROOT, ensure_agent
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource

from warden.runtime import Runtime
from warden.server.app import create_app
from warden.spend import Budget, BudgetKind, Period
from warden.store.idempotency import Idempotency

SEED_COPY = ROOT / "src" / "warden" / "schemas" / "spend" / "envelope.schema.json"
UPSTREAM_V1 = ROOT / "tests" / "conformance" / "vectors" / "spend-envelope.schema.v1-initial.json"
SCHEMA_ID = "https://sproutpad.ai/spec/envelope.schema.json"


def _validators(path: Path) -> dict[str, Draft202012Validator]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    registry: Registry = Registry().with_resource(SCHEMA_ID, Resource.from_contents(doc))
    out = {"envelope": Draft202012Validator(doc, registry=registry, format_checker=FormatChecker())}
    for name in doc["$defs"]:
        out[name] = Draft202012Validator(
            {"$ref": f"{SCHEMA_ID}#/$defs/{name}"},
            registry=registry,
            format_checker=FormatChecker(),
        )
    return out


SEED = _validators(SEED_COPY)
UPSTREAM = _validators(UPSTREAM_V1)


def problems(validator: Draft202012Validator, instance: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '/'}: {e.message}"
        for e in validator.iter_errors(instance)
    ]


def check_envelope(status: int, body: Any, *, mutating: bool) -> None:
    """The response validates against the seed, in the branch its status claims."""
    assert not problems(SEED["envelope"], body), (problems(SEED["envelope"], body), body)
    if 200 <= status < 300:
        assert not problems(SEED["successEnvelope"], body), body
        assert isinstance(body.get("nextActions"), list) and body["nextActions"], body
        if mutating:
            assert not problems(SEED["mutatingSuccessData"], body["data"]), (
                problems(SEED["mutatingSuccessData"], body["data"]),
                body,
            )
            upstream = problems(UPSTREAM["mutatingSuccessEnvelope"], body)
            assert not upstream, (upstream, body)
    else:
        assert 400 <= status < 600, status
        assert not problems(SEED["errorEnvelope"], body), body
        assert "data" not in body, body
        assert isinstance(body.get("retryable"), bool) and body.get("message"), body


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    headers: httpx.Headers

    @property
    def data(self) -> dict[str, Any]:
        return self.body["data"]  # type: ignore[no-any-return]


MUTATING = {"POST", "PUT", "PATCH", "DELETE"}


@dataclass
class Api:
    """A spend wire client (in process or over HTTP) that checks every response."""

    client: httpx.Client | TestClient
    token: str

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        key: str | None = None,
        auth: str | None = "default",
        content: bytes | None = None,
        headers: dict[str, Any] | None = None,
    ) -> Reply:
        h = dict(headers or {})
        if auth == "default":
            h["Authorization"] = f"Bearer {self.token}"
        elif auth is not None:
            h["Authorization"] = auth
        if key is not None:
            h["Idempotency-Key"] = key
        if content is not None:
            r = self.client.request(method, path, content=content, headers=h)
        elif body is not None:
            r = self.client.request(method, path, json=body, headers=h)
        else:
            r = self.client.request(method, path, headers=h)
        assert r.headers["content-type"].startswith("application/json"), r.text
        parsed = r.json()
        check_envelope(r.status_code, parsed, mutating=method in MUTATING)
        return Reply(r.status_code, parsed, r.headers)

    def get(self, path: str, **kw: Any) -> Reply:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return self.request("POST", path, body, **kw)

    def put(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return self.request("PUT", path, body, **kw)

    # shortcuts
    def quote(self, budget: str, amount: Any, *, action: str = "buy", **kw: Any) -> Reply:
        body = {"budgetId": budget, "action": action, "amount": amount, "currency": "USD"}
        body.update(kw.pop("extra", {}))
        return self.post("/v1/quotes", body, **kw)

    def reserve(self, budget: str, amount: Any, **kw: Any) -> str:
        r = self.quote(budget, amount, **kw)
        assert r.status == 200, r.body
        return str(r.data["quote"]["reservation"]["reservationId"])

    def budget(self, budget_id: str) -> dict[str, Any]:
        r = self.get(f"/v1/budgets/{budget_id}")
        assert r.status == 200, r.body
        return r.data["budget"]  # type: ignore[no-any-return]

    def run(self, command: str) -> Reply:
        """Execute an ``undo.command`` (``METHOD /path [json body]``) as written."""
        method, _, rest = command.partition(" ")
        path, _, body = rest.partition(" ")
        return self.request(method, path, json.loads(body) if body else None)


def assert_error(
    reply: Reply,
    gate: str,
    status: int,
    *,
    retryable: bool = False,
    resolution: str | None = None,
) -> dict[str, Any]:
    """The reply is the error ``gate`` with this status, retryable flag and resolution
    type (None: no resolution at all). Returns the body."""
    assert reply.status == status, reply.body
    assert reply.body["blockedBy"] == gate, reply.body
    assert reply.body["retryable"] is retryable, reply.body
    if resolution is None:
        assert "resolution" not in reply.body, reply.body
    else:
        assert reply.body["resolution"]["type"] == resolution, reply.body
    return reply.body


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += timedelta(**kw)


def tree(
    rt: Runtime,
    *,
    org: str = "100",
    team: str = "60",
    agent: str = "50",
    currency: str = "USD",
    period: Period = Period.NONE,
    prefix: str = "acme",
    principals: tuple[str, ...] = ("admin", "bot-1"),
) -> str:
    """org ⊃ team ⊃ agent budgets defined through the engine, each bound to ``principals``
    (by default the bootstrap admin key's principal and ``bot-1``); returns the agent
    budget id."""
    team_id, agent_id = f"{prefix}.ops", f"{prefix}.ops.bot"
    for budget_id, kind, cap, parent in (
        (prefix, BudgetKind.ORG, org, None),
        (team_id, BudgetKind.TEAM, team, prefix),
        (agent_id, BudgetKind.AGENT, agent, team_id),
    ):
        rt.spend.define_budget(
            Budget(budget_id, kind, currency, Decimal(cap), period, parent, principals=principals)
        )
    return agent_id


def open_api(rt: Runtime, idempotency: Idempotency | None = None) -> Iterator[Api]:
    with TestClient(create_app(rt, idempotency=idempotency)) as client:
        yield Api(client, rt.api_token)


@contextmanager
def server_api(data_dir: Path, url: str, token: str | None = None) -> Iterator[Api]:
    """An :class:`Api` over real HTTP to a ``warden serve`` (by default with the admin
    token read from its data dir)."""
    token = token or (data_dir / "api.token").read_text().strip()
    with httpx.Client(base_url=url, timeout=60) as client:
        yield Api(client, token)


def cli_key(data_dir: Path, principal: str, *groups: str, role: str = "agent") -> str:
    """A new API key's token, made with ``warden keys create`` on a server's data dir."""
    ensure_agent(data_dir, principal, role)
    done = subprocess.run(
        [sys.executable, "-m", "warden", "keys", "create", "--principal", principal]
        + ["--role", role, "--json", "--data-dir", str(data_dir)]
        + [a for g in groups for a in ("--group", g)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["token"])


def db_rows(rt: Runtime, sql: str) -> list[Any]:
    with rt.store.engine.connect() as conn:
        return list(conn.exec_driver_sql(sql).all())
