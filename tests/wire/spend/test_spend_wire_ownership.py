"""Issue 14 item 1: the spend wire has owners. Budgets are spendable only by the principals
they are bound to (``principals``, groups as ``group:<name>``); reservations and receipts
belong to the principal that took the hold; another's answers exactly as a missing one
does (the same 404 body); admin keys read everything and never spend as someone else; an
AdCP plan's budget is reachable only by its plan's owner. Every test runs on SQLite and
PostgreSQL (docs/decisions.md, "Hardening (issue 14): spend ownership")."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from conftest import ROOT, ensure_agent
from fastapi.testclient import TestClient
from spend_wire_helpers import Api, Reply, assert_error, db_rows

from warden.adcp.state import budget_id_for
from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.server.app import create_app
from warden.spend import Budget, BudgetKind, Period
from warden.spend.binding import GROUP, PRINCIPAL


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    """Every test here runs on SQLite and on PostgreSQL."""
    return make_backend_runtime


def key(rt: Runtime, client: TestClient, principal: str, *groups: str, admin: bool = False) -> Api:
    ensure_agent(rt, principal, "admin" if admin else "agent")
    _, token = rt.api_keys.create(principal, Role.ADMIN if admin else Role.AGENT, groups)
    return Api(client, token)


def budgets(rt: Runtime, *specs: tuple[str, tuple[str, ...]], cap: str = "100") -> None:
    """Org budgets ``(id, principals)``."""
    for bid, principals in specs:
        rt.spend.define_budget(
            Budget(bid, BudgetKind.ORG, "USD", Decimal(cap), Period.NONE, principals=principals)
        )


def same_as_missing(theirs: Reply, missing: Reply, real_id: str, fake_id: str) -> None:
    """``theirs`` is byte for byte the answer for a missing id (with the id substituted)."""
    assert theirs.status == missing.status == 404, (theirs.body, missing.body)
    assert json.dumps(theirs.body) == json.dumps(missing.body).replace(fake_id, real_id)


def fake(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def usage(rt: Runtime, budget_id: str) -> tuple[str, str]:
    rows = db_rows(
        rt, f"SELECT reserved, settled FROM budget_usage WHERE budget_id = '{budget_id}'"
    )
    return (rows[0][0], rows[0][1]) if rows else ("0", "0")


def test_anothers_reservation_and_receipt_answer_as_missing_ones(
    runtime: Runtime, app_client: TestClient
) -> None:
    budgets(runtime, ("a-budget", ("alice",)), ("b-budget", ("bob",)))
    alice, bob = key(runtime, app_client, "alice"), key(runtime, app_client, "bob")
    held = alice.reserve("a-budget", "10")
    settled = alice.reserve("a-budget", "20")
    receipt = alice.post(f"/v1/reservations/{settled}/commit", {"actualAmount": "20"}).data[
        "receipt"
    ]["receiptId"]
    before = usage(runtime, "a-budget")
    nores, norcp = fake("res"), fake("rcp")

    same_as_missing(
        bob.get(f"/v1/reservations/{held}"), bob.get(f"/v1/reservations/{nores}"), held, nores
    )
    same_as_missing(
        bob.post(f"/v1/reservations/{held}/commit", {"actualAmount": "0"}),
        bob.post(f"/v1/reservations/{nores}/commit", {"actualAmount": "0"}),
        held,
        nores,
    )
    same_as_missing(
        bob.post(f"/v1/reservations/{held}/release"),
        bob.post(f"/v1/reservations/{nores}/release"),
        held,
        nores,
    )
    same_as_missing(
        bob.post(f"/v1/receipts/{receipt}/undo"),
        bob.post(f"/v1/receipts/{norcp}/undo"),
        receipt,
        norcp,
    )
    # Nothing changed: A's hold is held, its spend stands, and A can still conclude both.
    assert usage(runtime, "a-budget") == before == ("10", "20")
    assert alice.get(f"/v1/reservations/{held}").data["reservation"]["status"] == "held"
    assert alice.post(f"/v1/reservations/{held}/release").status == 200
    assert alice.post(f"/v1/receipts/{receipt}/undo").status == 200
    # The hold and its receipt record who took them.
    assert db_rows(
        runtime, f"SELECT principal FROM reservations WHERE reservation_id = '{held}'"
    ) == [("alice",)]
    assert db_rows(runtime, f"SELECT principal FROM receipts WHERE receipt_id = '{receipt}'") == [
        ("alice",)
    ]


def test_a_receipt_is_read_by_its_owner_and_admin_only(
    runtime: Runtime, app_client: TestClient
) -> None:
    """Review L2 (decision 928): ``GET /v1/receipts/{id}`` is scoped as reservations are:
    another principal's receipt answers exactly as a missing one; an admin reads all."""
    budgets(runtime, ("a-budget", ("alice",)), ("b-budget", ("bob",)))
    alice, bob = key(runtime, app_client, "alice"), key(runtime, app_client, "bob")
    rid = alice.reserve("a-budget", "20")
    resources = [{"kind": "domain", "provider": "namecheap", "externalId": "example.org"}]
    committed = alice.post(
        f"/v1/reservations/{rid}/commit", {"actualAmount": "12.5", "resources": resources}
    ).data["receipt"]
    rcp = committed["receiptId"]
    own = alice.get(f"/v1/receipts/{rcp}")
    assert own.status == 200, own.body
    assert own.data["receipt"] == committed  # the receipt its commit answered
    assert (own.data["budgetId"], own.data["receipt"]["amount"]) == ("a-budget", "12.5")
    assert "undoneAt" not in own.data and own.data["createdAt"].endswith("Z")
    norcp = fake("rcp")
    same_as_missing(bob.get(f"/v1/receipts/{rcp}"), bob.get(f"/v1/receipts/{norcp}"), rcp, norcp)
    admin = Api(app_client, runtime.api_token).get(f"/v1/receipts/{rcp}")
    assert admin.status == 200 and admin.data == own.data
    assert alice.post(f"/v1/receipts/{rcp}/undo").status == 200
    assert alice.get(f"/v1/receipts/{rcp}").data["undoneAt"].endswith("Z")


def test_a_quote_against_anothers_budget_is_refused_and_holds_nothing(
    runtime: Runtime, app_client: TestClient
) -> None:
    budgets(runtime, ("a-budget", ("alice",)), ("b-budget", ("bob",)))
    bob = key(runtime, app_client, "bob")
    entries = len(list(runtime.store.iter_records()))
    missing = "no-such-budget"
    same_as_missing(bob.quote("a-budget", "5"), bob.quote(missing, "5"), "a-budget", missing)
    same_as_missing(
        bob.get("/v1/budgets/a-budget"), bob.get(f"/v1/budgets/{missing}"), "a-budget", missing
    )
    ask = {"cap": "500", "reason": "more"}
    same_as_missing(
        bob.post("/v1/budget-requests", {"budgetId": "a-budget", **ask}),
        bob.post("/v1/budget-requests", {"budgetId": missing, **ask}),
        "a-budget",
        missing,
    )
    assert usage(runtime, "a-budget") == ("0", "0")
    assert db_rows(runtime, "SELECT count(*) FROM reservations") == [(0,)]
    assert db_rows(runtime, "SELECT count(*) FROM tasks") == [(0,)]
    assert len(list(runtime.store.iter_records())) == entries  # not even an audit entry
    assert bob.quote("b-budget", "5").status == 200  # its own budget works


def test_the_budget_list_shows_the_callers_budgets_and_admin_sees_all(
    runtime: Runtime, app_client: TestClient
) -> None:
    budgets(
        runtime,
        ("a-budget", ("alice",)),
        ("b-budget", ("bob",)),
        ("shared", ("group:ops",)),
        ("unbound", ()),
    )
    bob = key(runtime, app_client, "bob", "ops")
    listed = {b["budgetId"]: b for b in bob.get("/v1/budgets").data["budgets"]}
    assert set(listed) == {"b-budget", "shared"}
    assert listed["shared"]["principals"] == ["group:ops"]
    admin = Api(app_client, runtime.api_token)
    assert {b["budgetId"] for b in admin.get("/v1/budgets").data["budgets"]} == {
        "a-budget",
        "b-budget",
        "shared",
        "unbound",
    }
    assert key(runtime, app_client, "carol").get("/v1/budgets").data["budgets"] == []


def test_admin_reads_everything_but_never_spends_as_someone_else(
    runtime: Runtime, app_client: TestClient
) -> None:
    budgets(runtime, ("a-budget", ("alice",)), ("unbound", ()))
    alice = key(runtime, app_client, "alice")
    admin = Api(app_client, runtime.api_token)
    boss = key(
        runtime, app_client, "boss", "ops", admin=True
    )  # an admin in a group: not bound by it
    held = alice.reserve("a-budget", "10")
    settled = alice.reserve("a-budget", "20")
    receipt = alice.post(f"/v1/reservations/{settled}/commit", {"actualAmount": "20"}).data[
        "receipt"
    ]["receiptId"]
    for who in (admin, boss):
        assert who.budget("a-budget")["reserved"] == "10"
        assert who.get(f"/v1/reservations/{held}").data["reservation"]["status"] == "held"
        assert who.budget("unbound")["principals"] == []
        for reply in (
            who.quote("a-budget", "1"),
            who.quote("unbound", "1"),
            who.post(f"/v1/reservations/{held}/commit", {"actualAmount": "0"}),
            who.post(f"/v1/reservations/{held}/release"),
            who.post(f"/v1/receipts/{receipt}/undo"),
        ):
            assert_error(reply, "auth:forbidden", 403, resolution="authenticate")
    assert usage(runtime, "a-budget") == ("10", "20")
    assert usage(runtime, "unbound") == ("0", "0")
    assert alice.get(f"/v1/reservations/{held}").data["reservation"]["status"] == "held"
    # An agent key is refused the unbound budget as if it did not exist.
    assert_error(alice.quote("unbound", "1"), "input:unknown_budget", 404, resolution="retry")
    # Binding the admin's own principal lets it spend there, as itself.
    budgets(runtime, ("admin-budget", ("admin",)))
    assert admin.quote("admin-budget", "1").status == 200


def test_groups_bind_and_bindings_are_not_inherited(
    runtime: Runtime, app_client: TestClient
) -> None:
    runtime.spend.define_budget(
        Budget("org", BudgetKind.ORG, "USD", Decimal(100), Period.NONE, principals=("cfo",))
    )
    runtime.spend.define_budget(
        Budget("org.t", BudgetKind.TEAM, "USD", Decimal(50), Period.NONE, "org", "", ("group:t",))
    )
    runtime.spend.define_budget(
        Budget("org.t.a", BudgetKind.AGENT, "USD", Decimal(20), Period.NONE, "org.t", "", ("bot",))
    )
    member = key(runtime, app_client, "tina", "t")
    bot = key(runtime, app_client, "bot")
    assert member.quote("org.t", "5").status == 200  # through the group
    assert bot.quote("org.t.a", "5").status == 200  # charges org.t and org through its own
    assert usage(runtime, "org") == ("10", "0")
    # Not inherited either way: the bot may not quote against its team, the team's
    # members not against the bot's budget.
    assert_error(bot.quote("org.t", "1"), "input:unknown_budget", 404, resolution="retry")
    assert_error(member.quote("org.t.a", "1"), "input:unknown_budget", 404, resolution="retry")


def test_an_adcp_plan_budget_is_reachable_only_by_its_owner(
    runtime: Runtime, app_client: TestClient
) -> None:
    ensure_agent(runtime, "buyer-a")
    owner_token = runtime.api_keys.create("buyer-a", "agent")[1]
    adcp_headers = {"authorization": f"Bearer {owner_token}", "content-type": "application/json"}
    plan = {
        "plan_id": "q2",
        "brand": {"domain": "acmeoutdoor.example"},
        "objectives": "Q2 outdoor lifestyle campaign",
        "budget": {"total": 1000, "currency": "USD", "reallocation_threshold": 1000},
        "flight": {"start": "2020-01-01T00:00:00Z", "end": "2099-06-30T23:59:59Z"},
        "countries": ["US"],
    }
    synced = app_client.post(
        "/adcp/sync_plans",
        json={"idempotency_key": str(uuid.uuid4()), "plans": [plan]},
        headers=adcp_headers,
    )
    assert synced.status_code == 200, synced.text
    intent: dict[str, Any] = {
        "plan_id": "q2",
        "caller": "https://pinnacle-agency.example",
        "target_agent": "https://seller.example.com",
        "tool": "create_media_buy",
        "purchase_type": "media_buy",
        "proposed_commitment": {"amount": 400, "currency": "USD"},
        "payload": {
            "brand": {"domain": "acmeoutdoor.example"},
            "total_budget": {"amount": 400, "currency": "USD"},
            "start_time": "asap",
            "end_time": "2099-06-30T23:59:59Z",
            "packages": [{"product_id": "p1", "budget": 400, "pricing_option_id": "cpm"}],
            "idempotency_key": "cmb-" + "0" * 20 + "400",
        },
    }
    checked = app_client.post("/adcp/check_governance", json=intent, headers=adcp_headers)
    assert checked.status_code == 200 and checked.json()["verdict"] == "approved", checked.text
    plan_budget = budget_id_for("buyer-a", "q2")
    (hold,) = db_rows(runtime, "SELECT reservation_id, principal FROM reservations")
    assert hold[1] == "buyer-a"

    other = key(runtime, app_client, "buyer-b")
    assert plan_budget not in {b["budgetId"] for b in other.get("/v1/budgets").data["budgets"]}
    missing = "adcp:" + "0" * 40
    same_as_missing(
        other.get(f"/v1/budgets/{plan_budget}"),
        other.get(f"/v1/budgets/{missing}"),
        plan_budget,
        missing,
    )
    same_as_missing(other.quote(plan_budget, "1"), other.quote(missing, "1"), plan_budget, missing)
    nores = fake("res")
    same_as_missing(
        other.get(f"/v1/reservations/{hold[0]}"),
        other.get(f"/v1/reservations/{nores}"),
        hold[0],
        nores,
    )
    assert usage(runtime, plan_budget) == ("400", "0")
    # Its owner sees it; the hold AdCP took is concluded by AdCP, not here.
    owner = Api(app_client, owner_token)
    assert plan_budget in {b["budgetId"] for b in owner.get("/v1/budgets").data["budgets"]}
    assert owner.budget(plan_budget)["principals"] == ["buyer-a"]
    assert_error(
        owner.post(f"/v1/reservations/{hold[0]}/commit", {"actualAmount": "0"}),
        "reservation:other_wire",
        409,
    )
    assert usage(runtime, plan_budget) == ("400", "0")
    # Fresh-user review M4 (decision 923): the plan's money is AdCP's alone. Its owner
    # cannot quote around check_governance, an admin cannot redefine it (nor create an
    # adcp: budget), and nobody asks the spend desk to raise it.
    refusals = [
        owner.quote(plan_budget, "1"),
        Api(app_client, runtime.api_token).put(
            f"/v1/budgets/{plan_budget}",
            {"kind": "org", "currency": "USD", "cap": "100", "period": "none"},
        ),
        Api(app_client, runtime.api_token).put(
            f"/v1/budgets/{missing}",
            {"kind": "org", "currency": "USD", "cap": "100", "period": "none"},
        ),
        owner.post(
            "/v1/budget-requests", {"budgetId": plan_budget, "cap": "5000", "reason": "more"}
        ),
        # nor a budget under the plan's, whose quotes would hold on the plan's path
        Api(app_client, runtime.api_token).put(
            "/v1/budgets/under-the-plan",
            {
                "kind": "team",
                "parent": plan_budget,
                "currency": "USD",
                "cap": "10",
                "period": "none",
                "principals": ["buyer-a"],
            },
        ),
    ]
    for refused in refusals:
        body = assert_error(refused, "budget:other_wire", 409)
        assert "AdCP plan's budget" in body["message"], body
    assert usage(runtime, plan_budget) == ("400", "0")
    assert owner.budget(plan_budget)["cap"] == "1000"
    # One defined under it anyway (not through the spend wire) is not spent through it.
    runtime.spend.define_budget(
        Budget("under", BudgetKind.TEAM, "USD", Decimal(10), Period.NONE, plan_budget,
               principals=("buyer-a",))
    )  # fmt: skip
    assert_error(owner.quote("under", "1"), "budget:other_wire", 409)
    assert usage(runtime, plan_budget) == ("400", "0")
    assert runtime.desk is None or runtime.desk.list() == []


def test_acs_holds_are_owned_by_nobody_on_the_spend_wire(
    runtime: Runtime, app_client: TestClient
) -> None:
    budgets(runtime, ("acs-budget", ("alice",)))
    # The ACS spend gate reserves without a principal (the bundle chose the budget).
    res = runtime.spend.reserve("acs-budget", "3", "USD", action="acs:pay", meta={"wire": "acs"})
    alice = key(runtime, app_client, "alice")
    nores = fake("res")
    same_as_missing(
        alice.post(f"/v1/reservations/{res.id}/release"),
        alice.post(f"/v1/reservations/{nores}/release"),
        res.id,
        nores,
    )
    admin = Api(app_client, runtime.api_token)
    assert admin.get(f"/v1/reservations/{res.id}").data["reservation"]["status"] == "held"
    refused = assert_error(
        admin.post(f"/v1/reservations/{res.id}/release"),
        "auth:forbidden",
        403,
        resolution="authenticate",
    )
    # Owned by nobody, not by "another principal": an admin would look for a key that
    # does not exist (fresh-user review of issue 14).
    assert "another principal" not in refused["message"]
    assert "has no owner on the spend wire" in refused["message"]
    assert "ACS spend gate" in refused["message"]
    assert "principal it belongs to" not in refused["resolution"]["hint"]

    # The same for undoing the receipt of a settled ACS hold.
    receipt = runtime.spend.settle(res.id, "2")
    before = usage(runtime, "acs-budget")
    undo = assert_error(
        admin.post(f"/v1/receipts/{receipt.id}/undo"),
        "auth:forbidden",
        403,
        resolution="authenticate",
    )
    assert "another principal" not in undo["message"]
    assert f"receipt {receipt.id} has no owner on the spend wire" in undo["message"]
    assert "ACS spend gate" in undo["message"]
    assert usage(runtime, "acs-budget") == before  # nothing undone


def test_put_sets_and_keeps_the_binding(runtime: Runtime, app_client: TestClient) -> None:
    admin = Api(app_client, runtime.api_token)
    body: dict[str, Any] = {"kind": "org", "currency": "USD", "cap": "10", "period": "none"}
    created = admin.put("/v1/budgets/b", {**body, "principals": ["zed", "group:ops", "zed"]})
    assert created.status == 201 and created.data["budget"]["principals"] == ["group:ops", "zed"]
    kept = admin.put("/v1/budgets/b", {**body, "cap": "20"})  # omitted: the binding stays
    assert kept.data["budget"]["principals"] == ["group:ops", "zed"]
    assert '"principals":["group:ops","zed"]' in kept.data["undo"]["command"]
    assert key(runtime, app_client, "zed").quote("b", "1").status == 200
    cleared = admin.put("/v1/budgets/b", {**body, "principals": []})
    assert cleared.data["budget"]["principals"] == []
    assert_error(
        key(runtime, app_client, "zed2").quote("b", "1"),
        "input:unknown_budget",
        404,
        resolution="retry",
    )
    for bad in (["has space"], ["group:"], "zed", [1]):
        r = admin.put("/v1/budgets/b", {**body, "principals": bad})
        assert r.status == 400, r.body
    assert admin.budget("b")["principals"] == []


def test_binding_entries_use_the_api_key_syntax() -> None:
    from warden.identity import api_keys

    assert PRINCIPAL.pattern == api_keys._PRINCIPAL.pattern  # noqa: SLF001
    assert GROUP.pattern == api_keys._GROUP.pattern  # noqa: SLF001


def test_migration_0008_binds_plan_budgets_to_their_owner_and_nothing_else(
    database_url: str,
) -> None:
    """Rows written before 0008: a budget is bound to nobody, except an AdCP plan's, bound
    to its plan's owner; a reservation and its receipt are owned by nobody."""
    from alembic import command
    from sqlalchemy import create_engine

    from warden.store import open_store
    from warden.store.sql import _alembic_config

    engine = create_engine(database_url)
    cfg = _alembic_config()
    plan_budget = budget_id_for("buyer-a", "q2")
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0007")
        for bid in ("acme", plan_budget):
            conn.exec_driver_sql(
                "INSERT INTO budgets (budget_id, kind, parent_id, currency, cap, period, name, "
                f"updated_at) VALUES ('{bid}', 'org', NULL, 'USD', '10', 'none', '', 'x')"
            )
        conn.exec_driver_sql(
            "INSERT INTO adcp_plans (principal, plan_id, version, status, budget_id, plan_hash, "
            f"record, updated_at) VALUES ('buyer-a', 'q2', 1, 'active', '{plan_budget}', 'h', "
            "'{}', 'x')"
        )
        conn.exec_driver_sql(
            "INSERT INTO reservations (reservation_id, budget_id, status, expires_at, record) "
            "VALUES ('res_old', 'acme', 'held', 'x', '{}')"
        )
        conn.exec_driver_sql(
            "INSERT INTO receipts (receipt_id, reservation_id, record) "
            "VALUES ('rcp_old', 'res_old', '{}')"
        )
    engine.dispose()
    store = open_store(database_url)  # migrates to head
    try:
        with store.engine.connect() as conn:
            bound = dict(
                conn.exec_driver_sql("SELECT budget_id, principals FROM budgets").fetchall()
            )
            assert {k: json.loads(v) for k, v in bound.items()} == {
                "acme": [],
                plan_budget: ["buyer-a"],
            }
            assert conn.exec_driver_sql("SELECT principal FROM reservations").fetchall() == [
                (None,)
            ]
            assert conn.exec_driver_sql("SELECT principal FROM receipts").fetchall() == [(None,)]
        assert {b.id: b.principals for b in store.budgets()} == {
            "acme": (),
            plan_budget: ("buyer-a",),
        }
    finally:
        store.close()


#: docs/wires.md's sync_plans example (plan q2 of a buyer), as a fresh user sends it.
WIRES_MD_PLAN: dict[str, Any] = {
    "plan_id": "q2",
    "brand": {"domain": "acme.example"},
    "objectives": "Q2 launch",
    "budget": {"total": 100000, "currency": "USD", "reallocation_threshold": 20000},
    "flight": {"start": "2026-01-01T00:00:00Z", "end": "2027-12-31T23:59:59Z"},
    "countries": ["US"],
}


def docs_walkthrough(make_runtime: Callable[..., Runtime]) -> tuple[Runtime, dict[str, str]]:
    """The runtime and keys of docs/spend.md and docs/wires.md: the shipped budgets file,
    deploy-bot registered as docs/identities.md does (group ops, acme.ops.deploy-bot),
    wires.md's buyer-1, and an admin key other than the bootstrap one."""
    rt = make_runtime(budgets=ROOT / "examples" / "budgets" / "default.yaml")
    assert rt.agents is not None
    rt.agents.add("deploy-bot", "alice", ["ops"], ["acme.ops.deploy-bot"])
    rt.agents.add("buyer-1", "media-team")
    tokens = {
        "deploy-bot": rt.api_keys.create("deploy-bot", Role.AGENT, ())[1],
        "buyer-1": rt.api_keys.create("buyer-1", Role.AGENT, ())[1],
        "admin": rt.api_token,
    }
    return rt, tokens


def sync_plan(client: TestClient, token: str, plan: dict[str, Any]) -> None:
    synced = client.post(
        "/adcp/sync_plans",
        json={"idempotency_key": str(uuid.uuid4()), "plans": [plan]},
        headers={"authorization": f"Bearer {token}"},
    )
    assert synced.status_code == 200 and synced.json()["status"] == "completed", synced.text


def listed(api: Api) -> set[str]:
    return {b["budgetId"] for b in api.get("/v1/budgets").data["budgets"]}


def readable(rt: Runtime, api: Api) -> set[str]:
    """Every stored budget GET /v1/budgets/{id} answers 200 for with ``api``'s key."""
    return {b.id for b in rt.store.budgets() if api.get(f"/v1/budgets/{b.id}").status == 200}


def test_the_budget_list_is_what_the_key_may_read_its_adcp_plan_budget_included(
    make_runtime: Callable[..., Runtime],
) -> None:
    """Decision 1210 (a fresh user's report: after docs/wires.md's sync_plans as
    deploy-bot, GET /v1/budgets listed acme.ops.deploy-bot alone while GET
    /v1/budgets/adcp:… answered 200). docs/spend.md and the 409 budget:other_wire message
    say the spend wire lists and reads a plan's budget: the list is exactly what the key
    may read with GET /v1/budgets/{id}, its own plan budget included."""
    rt, tokens = docs_walkthrough(make_runtime)
    with TestClient(create_app(rt)) as client:
        sync_plan(client, tokens["deploy-bot"], WIRES_MD_PLAN)
        plan_budget = budget_id_for("deploy-bot", "q2")
        bot = Api(client, tokens["deploy-bot"])
        assert bot.budget(plan_budget)["principals"] == ["deploy-bot"]
        assert listed(bot) == {"acme.ops", "acme.ops.deploy-bot", plan_budget}
        for name in tokens:
            api = Api(client, tokens[name])
            assert listed(api) == readable(rt, api), name
        # Listed, not spent here: the 409 that says "it may only list and read it".
        body = assert_error(bot.quote(plan_budget, "1"), "budget:other_wire", 409)
        assert "it may only list and read it" in body["message"]


def test_another_principals_plan_budget_is_not_listed(
    make_runtime: Callable[..., Runtime],
) -> None:
    """Two principals sync the same plan id: each lists and reads its own plan's budget
    only; the other's is absent from the list and read exactly as a missing one; an
    admin key lists both."""
    rt, tokens = docs_walkthrough(make_runtime)
    with TestClient(create_app(rt)) as client:
        sync_plan(client, tokens["deploy-bot"], WIRES_MD_PLAN)
        sync_plan(client, tokens["buyer-1"], WIRES_MD_PLAN)
        bots, buyers = budget_id_for("deploy-bot", "q2"), budget_id_for("buyer-1", "q2")
        bot, buyer = Api(client, tokens["deploy-bot"]), Api(client, tokens["buyer-1"])
        assert buyers not in listed(bot) and bots in listed(bot)
        assert listed(buyer) == {buyers}
        missing = "adcp:" + "0" * 40
        same_as_missing(
            bot.get(f"/v1/budgets/{buyers}"), bot.get(f"/v1/budgets/{missing}"), buyers, missing
        )
        same_as_missing(
            buyer.get(f"/v1/budgets/{bots}"), buyer.get(f"/v1/budgets/{missing}"), bots, missing
        )
        assert {bots, buyers} <= listed(Api(client, tokens["admin"]))
