"""A gate that files a task or holds money runs in the transaction that writes its step's
audit entry (issue 16 item 1): the spend wire's quote desk ask, KLA's require_approval
task, AdCP's review task and plan hold.

Failures are real store failures: a SQLite trigger refuses one insert (the step's audit
entry, or the gate's own task, desk entry or hold) in the middle of the step. Whatever
the step wrote before it must be gone too, and the observers (metrics, traces) must
hear of nothing: they are told only once the transaction has committed. Then, without
the trigger, the same step writes its gate's state and its entry together.
"""

from __future__ import annotations

import ast
import itertools
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import DEFAULT_POLICY, ROOT, ensure_agent
from fastapi.testclient import TestClient

from warden.adcp.check_gates import METHOD, Judgement, PlanHold
from warden.adcp.state import budget_id_for
from warden.adcp.verdicts import CheckInput, Evaluation
from warden.approvals.tasks import ApprovalState
from warden.core.pipeline import Pipeline
from warden.core.types import ActionRequest, Effect, Verdict
from warden.errors import StoreUnavailable
from warden.gates.quote_hold import HoldTerms, QuoteHold
from warden.identity.api_keys import Identity, Role
from warden.runtime import Runtime
from warden.server.app import create_app
from warden.spend.budgets import Budget, BudgetKind, Period

sys.path.insert(0, str(ROOT / "tests" / "adcp"))
from adcp_helpers import intent  # noqa: E402  (the 3.2 intent check the AdCP tests send)

BIG = "5000"
_names = itertools.count()


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime()  # examples/policies/default.yaml: asks above 1000 / 10000 / 250000


@pytest.fixture
def heard(rt: Runtime) -> list[tuple[str, str]]:
    """Every ``(wire, decision)`` the Guardian's observers are told about."""
    seen: list[tuple[str, str]] = []
    rt.guardian.observers.add(lambda wire, decision, rule, seconds: seen.append((wire, decision)))
    return seen


def rows(rt: Runtime, sql: str) -> list[Any]:
    with rt.store.engine.connect() as conn:
        return list(conn.exec_driver_sql(sql).all())


def count(rt: Runtime, sql: str) -> int:
    return int(rows(rt, sql)[0][0])


def entries(rt: Runtime, step_type: str) -> int:
    return count(rt, f"SELECT count(*) FROM entries WHERE step_type LIKE '{step_type}'")


class Refusing:
    """A trigger that makes the store refuse inserts into ``table`` matching ``when``."""

    def __init__(self, rt: Runtime, table: str, when: str) -> None:
        self.rt = rt
        self.name = f"refuse_{next(_names)}"
        with rt.store.engine.begin() as conn:
            conn.exec_driver_sql(
                f"CREATE TRIGGER {self.name} BEFORE INSERT ON {table} WHEN {when} "
                "BEGIN SELECT RAISE(ABORT, 'injected store failure'); END"
            )

    def lift(self) -> None:
        with self.rt.store.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TRIGGER {self.name}")


def agent(rt: Runtime, principal: str) -> tuple[str, Identity]:
    ensure_agent(rt, principal)
    _, token = rt.api_keys.create(principal, Role.AGENT, ())
    who = rt.api_keys.authenticate(token)
    assert who is not None
    return token, who


# -- the spend wire: a quote the policy asks a human about ------------------------------


@pytest.fixture
def spend(rt: Runtime) -> Iterator[tuple[TestClient, str]]:
    rt.spend.define_budget(
        Budget("gate-org", BudgetKind.ORG, "USD", Decimal(BIG), Period.NONE, principals=("admin",))
    )
    # A refused entry is no answer a route maps: the client sees the server's 500.
    with TestClient(create_app(rt), raise_server_exceptions=False) as client:
        yield client, rt.api_token


def quote(client: TestClient, token: str, amount: str) -> Any:
    return client.post(
        "/v1/quotes",
        json={"budgetId": "gate-org", "action": "buy", "amount": amount, "currency": "USD"},
        headers={"authorization": f"Bearer {token}", "idempotency-key": str(uuid.uuid4())},
    )


def test_a_quote_whose_policy_entry_fails_leaves_no_task(
    rt: Runtime, spend: tuple[TestClient, str], heard: list[tuple[str, str]]
) -> None:
    client, token = spend
    refusing = Refusing(rt, "entries", "NEW.step_type = 'warden/spend.policy'")
    r = quote(client, token, "2000")
    assert r.status_code == 500, r.text
    # The desk ask ran (it files before the policy entry is written) and was undone.
    assert count(rt, "SELECT count(*) FROM tasks") == 0
    assert entries(rt, "warden/approval.%") == 0
    assert entries(rt, "warden/spend.policy") == 0
    assert ("spend", "ask") not in heard
    refusing.lift()
    r = quote(client, token, "2000")
    assert r.status_code == 403 and r.json()["blockedBy"] == "approval:required", r.text
    task_id = r.json()["resolution"]["taskId"]
    assert [t[0] for t in rows(rt, "SELECT task_id FROM tasks")] == [task_id]
    assert entries(rt, "warden/approval.%") == 1
    assert entries(rt, "warden/spend.policy") == 1
    assert heard.count(("spend", "ask")) == 1


def test_a_quote_whose_desk_entry_fails_writes_no_policy_entry(
    rt: Runtime, spend: tuple[TestClient, str], heard: list[tuple[str, str]]
) -> None:
    client, token = spend
    # The task row is inserted, then its desk chain entry is refused.
    Refusing(rt, "entries", "NEW.step_type LIKE 'warden/approval.%'")
    r = quote(client, token, "2000")
    assert r.status_code == 500, r.text
    assert count(rt, "SELECT count(*) FROM tasks") == 0
    assert entries(rt, "warden/spend.policy") == 0
    assert count(rt, "SELECT count(*) FROM idempotency_keys") == 0
    assert heard == []


# -- KLA: an action request that requires approval ---------------------------------------


def credit(rid: str) -> dict[str, Any]:
    path = ROOT / "src" / "warden" / "schemas" / "kla" / "examples" / "credit-disposition.json"
    record: dict[str, Any] = json.loads(path.read_text())
    record["action_request_id"] = rid
    return record


def test_an_action_request_whose_records_fail_leaves_no_task(
    rt: Runtime, heard: list[tuple[str, str]]
) -> None:
    assert rt.kla is not None
    _, who = agent(rt, "kla-bot")
    refusing = Refusing(rt, "entries", "NEW.step_type = 'warden/kla.policy_decision'")
    with pytest.raises(Exception, match="injected store failure"):
        rt.kla.submit(credit("req_gate_0001"), None, None, who)
    assert count(rt, "SELECT count(*) FROM tasks") == 0
    assert count(rt, "SELECT count(*) FROM kla_records") == 0
    assert entries(rt, "warden/approval.%") == 0
    assert entries(rt, "warden/kla.%") == 0
    assert heard == []
    refusing.lift()
    answer = rt.kla.submit(credit("req_gate_0001"), None, None, who)
    data = answer.body["data"]
    assert data["decision"]["decision"] == "require_approval"
    # The task named in the signed decision record is the one filed, in its transaction.
    assert [t[0] for t in rows(rt, "SELECT task_id FROM tasks")] == [data["task"]["id"]]
    assert data["decision"]["task_id"] == data["task"]["id"]
    assert count(rt, "SELECT count(*) FROM kla_records") == 2
    assert entries(rt, "warden/approval.%") == 1
    assert heard == [("kla", "ask")]


def test_an_action_request_whose_task_fails_writes_no_records(
    rt: Runtime, heard: list[tuple[str, str]]
) -> None:
    assert rt.kla is not None
    _, who = agent(rt, "kla-bot")
    Refusing(rt, "tasks", "1")
    with pytest.raises(StoreUnavailable):
        rt.kla.submit(credit("req_gate_0002"), None, None, who)
    assert count(rt, "SELECT count(*) FROM kla_records") == 0
    assert entries(rt, "warden/kla.%") == 0
    assert heard == []


# -- AdCP: an intent check's plan hold and review task -----------------------------------


def plan(plan_id: str, total: float) -> dict[str, Any]:
    return {
        "plan_id": plan_id,
        "brand": {"domain": "acmeoutdoor.example"},
        "objectives": "Q2 outdoor lifestyle campaign",
        "budget": {"total": total, "currency": "USD", "reallocation_threshold": total},
        "flight": {"start": "2020-01-01T00:00:00Z", "end": "2099-06-30T23:59:59Z"},
        "countries": ["US"],
    }


@pytest.fixture
def buyer(rt: Runtime) -> Identity:
    assert rt.adcp is not None
    _, who = agent(rt, "buyer-agent")
    synced = rt.adcp.call(
        "sync_plans",
        {"idempotency_key": str(uuid.uuid4()), "plans": [plan("gate-plan", 1_000_000)]},
        who,
    )
    assert not synced.failed, synced.body
    return who


def holds(rt: Runtime) -> int:
    return count(rt, "SELECT count(*) FROM reservations")


def test_a_check_whose_entry_fails_holds_no_money(
    rt: Runtime, buyer: Identity, heard: list[tuple[str, str]]
) -> None:
    assert rt.adcp is not None
    refusing = Refusing(rt, "entries", "NEW.step_type = 'warden/adcp.check'")
    with pytest.raises(Exception, match="injected store failure"):
        rt.adcp.call("check_governance", intent("gate-plan", 600), buyer)
    assert holds(rt) == 0
    assert count(rt, "SELECT count(*) FROM adcp_checks") == 0
    assert entries(rt, "warden/spend.reserve") == 0
    assert ("adcp", "allow") not in heard
    refusing.lift()
    r = rt.adcp.call("check_governance", intent("gate-plan", 600), buyer)
    assert not r.failed and r.body["verdict"] == "approved", r.body
    [(rid, check_id)] = rows(rt, "SELECT reservation_id, check_id FROM adcp_checks")
    assert [h[0] for h in rows(rt, "SELECT reservation_id FROM reservations")] == [rid]
    assert check_id == r.body["check_id"]
    assert heard.count(("adcp", "allow")) == 1


def test_a_check_whose_hold_fails_writes_no_check(
    rt: Runtime, buyer: Identity, heard: list[tuple[str, str]]
) -> None:
    assert rt.adcp is not None
    Refusing(rt, "reservations", "1")
    r = rt.adcp.call("check_governance", intent("gate-plan", 600), buyer)
    assert r.failed and r.body["errors"][0]["code"] == "GOVERNANCE_UNAVAILABLE", r.body
    assert count(rt, "SELECT count(*) FROM adcp_checks") == 0
    assert entries(rt, "warden/adcp.check") == 0
    assert heard == []


def test_a_reviewed_check_whose_entry_fails_files_no_task(
    rt: Runtime, buyer: Identity, heard: list[tuple[str, str]]
) -> None:
    assert rt.adcp is not None
    refusing = Refusing(rt, "entries", "NEW.step_type = 'warden/adcp.check'")
    with pytest.raises(Exception, match="injected store failure"):
        rt.adcp.call("check_governance", intent("gate-plan", 300_000), buyer)
    assert count(rt, "SELECT count(*) FROM tasks") == 0
    assert entries(rt, "warden/approval.%") == 0
    assert heard == []
    refusing.lift()
    r = rt.adcp.call("check_governance", intent("gate-plan", 300_000), buyer)
    assert not r.failed and r.body["status"] == "submitted", r.body
    [(task_id,)] = rows(rt, "SELECT task_id FROM adcp_checks")
    assert task_id == r.body["task_id"]
    assert [t[0] for t in rows(rt, "SELECT task_id FROM tasks")] == [task_id]
    assert holds(rt) == 0  # a review holds nothing until a human approves it
    assert heard == [("adcp", "ask")]


def test_a_hold_the_ledger_refuses_tightens_the_verdict_to_a_deny(
    rt: Runtime, buyer: Identity
) -> None:
    """The plan allowed the check when it looked; a concurrent commitment took the room
    before the hold: the gate denies (reason ``budget_exceeded``, a ``budget_authority``
    finding), holds nothing, and the final verdict the observers get is that deny."""
    assert rt.adcp is not None
    st = rt.adcp.state
    budget = budget_id_for(buyer.principal, "gate-plan")
    rt.spend.reserve(budget, Decimal(999_500), "USD", action="elsewhere", principal=buyer.principal)
    request = ActionRequest(
        method=METHOD,
        payload={},
        metadata={},
        tool={"name": "create_media_buy"},
        args={"amount": 600},
        raw_command="",
        session={},
    )
    with rt.store.transaction() as tx:
        plan_row = st.plan(tx, buyer.principal, "gate-plan")
        check = CheckInput("intent", "create_media_buy", {}, Decimal(600), "USD", None)
        judge = Judgement(Evaluation("approved", "The plan allows it."), {})
        hold = PlanHold(st, tx, plan_row, check, "chk_gate", judge, modern=True)
        decided = Pipeline(rt.guardian).run(buyer.as_principal(), request, gates=[hold])
    assert decided.verdict.decision is Effect.DENY
    assert decided.verdict.reason_codes == ("budget_exceeded",)
    assert hold.reservation_id is None and hold.refused is not None
    assert [f["category_id"] for f in hold.refused.findings] == ["budget_authority"]
    assert holds(rt) == 1  # only the concurrent commitment


# -- the spend quote's own hold: a gate in the quote's transaction -----------------------


def spend_entries(rt: Runtime, step_type: str) -> list[dict[str, Any]]:
    return [
        r["entry"]["spend"]
        for r in rt.store.iter_records()
        if r["kind"] == "entry" and r["entry"]["step_type"] == step_type
    ]


def test_a_quote_the_budget_refuses_is_heard_as_the_deny_it_answered(
    rt: Runtime, heard: list[tuple[str, str]]
) -> None:
    """Policy allows the quote; the budget has no room: the hold gate tightens the verdict
    to a deny (``budget_exceeded``), which is what the observers hear, while the budget's
    refused entry keeps the policy's allow for what-if replay."""
    rt.spend.define_budget(
        Budget("tight-org", BudgetKind.ORG, "USD", Decimal(50), Period.NONE, principals=("admin",))
    )
    with TestClient(create_app(rt)) as client:
        r = client.post(
            "/v1/quotes",
            json={"budgetId": "tight-org", "action": "buy", "amount": "80", "currency": "USD"},
            headers={"authorization": f"Bearer {rt.api_token}"},
        )
    assert r.status_code == 402 and r.json()["blockedBy"] == "budget:exceeded", r.text
    assert heard == [("spend", "deny")]
    (refused,) = spend_entries(rt, "warden/spend.refused")
    assert refused["decided"]["verdict"]["decision"] == "allow"
    assert spend_entries(rt, "warden/spend.policy") == []
    assert holds(rt) == 0


def test_a_granted_quote_whose_hold_fails_keeps_its_grant_and_holds_nothing(
    rt: Runtime, spend: tuple[TestClient, str], heard: list[tuple[str, str]]
) -> None:
    client, token = spend
    r = quote(client, token, "2000")
    assert r.status_code == 403 and r.json()["blockedBy"] == "approval:required", r.text
    task_id = r.json()["resolution"]["taskId"]
    _, fay_token = rt.api_keys.create("fay", Role.APPROVER, ("finance",))
    fay = rt.api_keys.authenticate(fay_token)
    assert fay is not None and rt.desk is not None
    rt.desk.approve(task_id, fay, "budgeted")
    # The hold's row is refused mid-step, after the desk ask consumed the grant.
    refusing = Refusing(rt, "reservations", "1")
    r = quote(client, token, "2000")
    assert r.status_code == 503 and r.json()["blockedBy"] == "store:unavailable", r.text
    assert holds(rt) == 0
    assert entries(rt, "warden/spend.reserve") == 0
    assert entries(rt, "warden/spend.policy") == 1  # the first quote's ask, no other
    task = rt.desk.get(task_id)
    assert task is not None and task.state is ApprovalState.APPROVED  # not consumed
    assert heard == [("spend", "ask")]
    refusing.lift()
    r = quote(client, token, "2000")
    assert r.status_code == 200, r.text
    rid = r.json()["data"]["quote"]["reservation"]["reservationId"]
    [(record,)] = rows(rt, f"SELECT record FROM reservations WHERE reservation_id = '{rid}'")
    assert f'"approval_task":"{task_id}"' in record
    task = rt.desk.get(task_id)
    assert task is not None and task.state is ApprovalState.CONSUMED
    assert entries(rt, "warden/spend.policy") == 2  # the granted ask, with its hold
    assert heard == [("spend", "ask"), ("spend", "ask")]


class DeniesEverything:
    """A gate after the hold that denies every step (what a later gate may do)."""

    def wants(self, request: ActionRequest, verdict: Verdict) -> bool:
        return True

    def blocking(self, request: ActionRequest, verdict: Verdict) -> bool:
        return False

    def apply(self, request: ActionRequest, verdict: Verdict) -> Verdict:
        return replace(verdict, decision=Effect.DENY, reason_codes=("later_gate",))

    def holding(self) -> bool:
        return False

    def abandon(self, why: str) -> None:
        """Nothing taken."""


def test_a_quote_hold_a_later_gate_denies_is_released_in_the_same_transaction(
    rt: Runtime,
) -> None:
    rt.spend.define_budget(
        Budget("gate-org", BudgetKind.ORG, "USD", Decimal(BIG), Period.NONE, principals=("admin",))
    )
    request = ActionRequest(
        method="spend/quote",
        payload={},
        metadata={},
        tool={"name": "buy"},
        args={},
        raw_command="",
        session={},
    )
    terms = HoldTerms("gate-org", Decimal(10), "USD", "buy", 900, "admin", {"wire": "spend"})
    with rt.store.spend_transaction() as tx:
        hold = QuoteHold(rt.spend.within(tx), terms, None, lambda v: {"verdict": "allow"})
        decided = Pipeline(rt.guardian).run(
            None,
            request,
            gates=[hold, DeniesEverything()],
            preempt=Verdict(decision=Effect.ALLOW, reasoning="allowed"),
        )
    assert decided.verdict.decision is Effect.DENY
    assert not hold.holding()
    [(status,)] = rows(rt, "SELECT status FROM reservations")
    assert status == "released"
    assert entries(rt, "warden/spend.reserve") == 1 and entries(rt, "warden/spend.release") == 1
    assert rt.spend.remaining("gate-org")[0] == Decimal(BIG)


def test_no_wire_holds_money_or_asks_the_guardian_itself() -> None:
    """Every hold and every policy decision of a wire goes through the pipeline and its
    gates: no module under ``wire/`` calls ``reserve`` or ``Guardian.decide``."""
    found = []
    for path in sorted((ROOT / "src" / "warden" / "wire").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = ast.unparse(node.func.value)
            if node.func.attr in ("reserve", "hold_commitment") or (
                node.func.attr == "decide" and "pipeline" not in owner
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node.func)}")
    assert found == []


# -- AdCP execution checks: verified against the intent's authorization, no policy step ---


def test_an_execution_check_asks_no_rule(
    make_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    """A seller's execution check is verified against what the intent's decision
    authorized (docs/decisions.md 673): a rule on ``adcp/check_governance`` never sees
    it, and the observers hear only the intent's decision."""
    text = DEFAULT_POLICY.read_text(encoding="utf-8")
    anchor = "  - id: adcp-large-commitment-needs-approval\n"
    assert text.count(anchor) == 1
    rule = (
        "  - id: no-executions\n"
        "    description: Would deny every execution check, if policy decided them.\n"
        "    hooks: [adcp/check_governance]\n"
        '    when: args.check_type == "execution"\n'
        "    effect: deny\n"
        "    reasoning: executions are denied\n\n"
    )
    bundle = tmp_path / "no-executions.yaml"
    bundle.write_text(text.replace(anchor, rule + anchor), encoding="utf-8")
    rt = make_runtime(policy=bundle)
    assert rt.adcp is not None
    seen: list[tuple[str, str]] = []
    rt.guardian.observers.add(lambda wire, decision, rule, seconds: seen.append((wire, decision)))
    _, buyer = agent(rt, "buyer-agent")
    synced = rt.adcp.call(
        "sync_plans",
        {"idempotency_key": str(uuid.uuid4()), "plans": [plan("exec-plan", 1_000_000)]},
        buyer,
    )
    assert not synced.failed, synced.body
    approved = rt.adcp.call("check_governance", intent("exec-plan", 600), buyer)
    assert approved.body["verdict"] == "approved", approved.body
    execution = {
        "caller": "https://seller.example.com",
        "governance_context": approved.body["governance_context"],
        "planned_delivery": {"media_buy_id": "mb_1", "total_budget": 600, "currency": "USD"},
    }
    checked = rt.adcp.call("check_governance", execution, buyer)
    assert checked.body["verdict"] == "approved", checked.body
    assert checked.body["check_type"] == "execution"
    assert seen == [("adcp", "allow")]
