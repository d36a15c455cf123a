"""Every /v1 route in process: the happy paths (each a mutating or read-only success that
validates against the seed, see spend_wire_helpers.check_envelope) and every error path's
blockedBy, HTTP status, retryable flag and resolution."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from spend_wire_helpers import Api, Reply, assert_error, db_rows, open_api, tree

from warden.runtime import Runtime
from warden.spend import Budget, BudgetKind, Period


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime()


@pytest.fixture
def api(rt: Runtime) -> Iterator[Api]:
    yield from open_api(rt)


def usage(api: Api, budget: str) -> tuple[str, str, str]:
    b = api.budget(budget)
    return b["reserved"], b["settled"], b["remaining"]


# -- quote → commit → undo ----------------------------------------------------------------


def test_quote_reserves_against_the_whole_path(rt: Runtime, api: Api) -> None:
    bot = tree(rt)  # 100 ⊃ 60 ⊃ 50
    r = api.quote(bot, "12.50", action="buy_domain")
    assert r.status == 200
    q = r.data["quote"]
    assert q["verdict"] == "ALLOW"
    assert (q["budgetId"], q["action"], q["amount"], q["currency"]) == (
        bot,
        "buy_domain",
        "12.50",
        "USD",
    )
    rid = q["reservation"]["reservationId"]
    assert datetime.fromisoformat(q["reservation"]["expiresAt"]) > datetime.now(UTC)
    assert r.data["receipt"] == {
        "action": "reserve",
        "oneTimeUsd": 0,
        "monthlyDeltaUsd": 0,
        "resources": [{"kind": "reservation", "provider": "warden", "externalId": rid}],
        "reservationId": rid,
    }
    assert r.data["undo"] == {
        "command": f"POST /v1/reservations/{rid}/release",
        "irreversible": False,
    }
    assert (r.data["budgetRemainingUsd"], r.data["budgetRemaining"]) == (37.5, "37.50")
    assert r.data["currency"] == "USD"
    assert any(f"/v1/reservations/{rid}/commit" in step for step in r.body["nextActions"])
    assert "replayed" not in r.body
    for budget in ("acme", "acme.ops", bot):
        assert api.budget(budget)["reserved"] == "12.50"
    # the undo it names is a real call that works
    undone = api.run(r.data["undo"]["command"])
    assert undone.status == 200
    assert usage(api, bot) == ("0.00", "0", "50.00")


def test_commit_settles_and_its_undo_command_restores_the_budget(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    rid = api.reserve(bot, "20")
    resources = [{"kind": "domain", "provider": "namecheap", "externalId": "example.org"}]
    r = api.post(
        f"/v1/reservations/{rid}/commit", {"actualAmount": "17.25", "resources": resources}
    )
    assert r.status == 200
    rc = r.data["receipt"]
    assert (rc["action"], rc["oneTimeUsd"], rc["monthlyDeltaUsd"]) == ("buy", 17.25, 0)
    assert (rc["amount"], rc["currency"], rc["reservationId"]) == ("17.25", "USD", rid)
    assert rc["resources"] == resources
    assert r.data["undo"] == {
        "command": f"POST /v1/receipts/{rc['receiptId']}/undo",
        "irreversible": False,
    }
    assert (r.data["budgetRemainingUsd"], r.data["budgetRemaining"]) == (32.75, "32.75")
    assert r.data["reservation"]["status"] == "settled"
    assert usage(api, bot) == ("0", "17.25", "32.75")
    assert api.budget("acme")["settled"] == "17.25"

    u = api.run(r.data["undo"]["command"])
    assert u.status == 200
    assert u.data["undo"] == {"command": None, "irreversible": True}
    assert u.data["receipt"]["action"] == "undo"
    assert (u.data["receipt"]["refund"], u.data["receipt"]["refundUsd"]) == ("17.25", 17.25)
    assert u.data["budgetRemainingUsd"] == 50
    assert usage(api, bot) == ("0", "0.00", "50.00")
    assert usage(api, "acme") == ("0", "0.00", "100.00")

    again = api.run(r.data["undo"]["command"])
    assert_error(again, "receipt:already_undone", 409)


def test_release_returns_the_hold_and_cannot_be_undone(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    rid = api.reserve(bot, "30")
    r = api.post(f"/v1/reservations/{rid}/release", {"reason": "cancelled by the user"})
    assert r.status == 200
    assert r.data["undo"] == {"command": None, "irreversible": True}
    assert r.data["receipt"]["oneTimeUsd"] == 0
    assert r.data["reservation"]["status"] == "released"
    assert r.data["reservation"]["reason"] == "cancelled by the user"
    assert r.data["budgetRemainingUsd"] == 50
    assert usage(api, bot)[0] == "0"
    # a released hold cannot be committed; a new quote is the way forward
    late = api.post(f"/v1/reservations/{rid}/commit", {"actualAmount": "1"})
    body = assert_error(late, "reservation:not_held", 409, resolution="retry")
    assert "/v1/quotes" in body["resolution"]["hint"]
    # releasing without a body works too
    rid2 = api.reserve(bot, "1")
    assert api.post(f"/v1/reservations/{rid2}/release").status == 200


def test_a_settled_reservation_is_not_held_and_has_no_way_forward(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    rid = api.reserve(bot, "5")
    assert api.post(f"/v1/reservations/{rid}/commit", {"actualAmount": "5"}).status == 200
    for verb, body in (("commit", {"actualAmount": "5"}), ("release", None)):
        r = api.post(f"/v1/reservations/{rid}/{verb}", body)
        assert_error(r, "reservation:not_held", 409, resolution=None)
    assert usage(api, bot) == ("0", "5", "45")


def test_settling_more_than_reserved_is_refused_and_keeps_the_hold(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    rid = api.reserve(bot, "10")
    r = api.post(f"/v1/reservations/{rid}/commit", {"actualAmount": "10.01"})
    body = assert_error(r, "budget:settlement_exceeds_reservation", 409)
    assert (body["limit"], body["requested"]) == (10, 10.01)
    assert usage(api, bot) == ("10", "0", "40")
    assert api.get(f"/v1/reservations/{rid}").data["reservation"]["status"] == "held"


def test_reservation_read(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    rid = api.reserve(bot, "3", extra={"holdSeconds": 60})
    r = api.get(f"/v1/reservations/{rid}")
    assert r.status == 200
    res = r.data["reservation"]
    assert (res["status"], res["amount"], res["budgetId"], res["action"]) == (
        "held",
        "3",
        bot,
        "buy",
    )
    created = datetime.fromisoformat(res["createdAt"])
    expires = datetime.fromisoformat(res["expiresAt"])
    assert (expires - created).total_seconds() == 60
    assert_error(
        api.get("/v1/reservations/res_nope"), "input:unknown_reservation", 404, resolution="retry"
    )


# -- budget:exceeded ---------------------------------------------------------------------


def test_budget_exceeded_names_what_is_left_and_a_smaller_amount(rt: Runtime, api: Api) -> None:
    bot = tree(rt, team="30")  # the team is the tightest budget
    api.reserve(bot, "20")
    r = api.quote(bot, "15")
    body = assert_error(r, "budget:exceeded", 402, retryable=True, resolution="retry")
    assert (body["limit"], body["requested"]) == (10, 15)
    assert "acme.ops" in body["message"]
    assert "10" in body["resolution"]["hint"]
    assert "/v1/budget-requests" in body["resolution"]["note"]
    # nothing was held by the refusal
    assert usage(api, bot) == ("20", "0", "10")


def test_budget_exceeded_with_nothing_left_points_to_a_budget_request(
    rt: Runtime, api: Api
) -> None:
    bot = tree(rt, agent="10")
    rid = api.reserve(bot, "10")
    api.post(f"/v1/reservations/{rid}/commit", {"actualAmount": "10"})
    r = api.quote(bot, "1")
    # period none and nothing held: the same request can never fit without a human
    body = assert_error(r, "budget:exceeded", 402, retryable=False, resolution="human_approval")
    assert (body["limit"], body["requested"]) == (0, 1)
    assert body["resolution"]["path"] == "/v1/budget-requests"
    assert "taskId" not in body["resolution"]


@pytest.mark.parametrize(
    ("period", "amount", "retryable"),
    [
        (Period.DAY, "40", True),  # fits after midnight UTC
        (Period.MONTH, "40", True),  # fits after the 1st
        (Period.DAY, "51", False),  # more than the cap: never
        (Period.NONE, "40", True),  # a hold may lapse (one is held)
    ],
)
def test_budget_exceeded_is_retryable_only_when_waiting_can_help(
    rt: Runtime, api: Api, period: Period, amount: str, retryable: bool
) -> None:
    bot = tree(rt, period=period)
    api.reserve(bot, "30")  # held, not settled
    body = assert_error(
        api.quote(bot, amount),
        "budget:exceeded",
        402,
        retryable=retryable,
        resolution="retry",
    )
    if period is not Period.NONE:
        assert "resets at" in body["message"]


# -- input errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "gate"),
    [
        ("abc", "input:invalid_amount"),
        ("-1", "input:invalid_amount"),
        ("0", "input:invalid_amount"),
        ("1.1234567", "input:invalid_amount"),
        ("NaN", "input:invalid_amount"),
        ("1e15", "input:invalid_amount"),
        (2**60, "input:invalid"),  # outside the JCS (I-JSON) domain
        (1.5, "input:invalid"),
        (True, "input:invalid"),
        (None, "input:invalid"),
        ({"value": "1"}, "input:invalid"),
    ],
)
def test_bad_amounts_are_refused_and_nothing_is_held(
    rt: Runtime, api: Api, amount: Any, gate: str
) -> None:
    bot = tree(rt)
    body = assert_error(api.quote(bot, amount), gate, 400, resolution="retry")
    assert body["resolution"]["hint"]
    assert usage(api, bot)[0] == "0"
    assert db_rows(rt, "SELECT count(*) FROM reservations") == [(0,)]


def test_a_float_amount_gets_one_clear_message(rt: Runtime, api: Api) -> None:
    body = assert_error(api.quote(tree(rt), 1.5), "input:invalid", 400, resolution="retry")
    assert body["message"] == (
        'invalid request: amount: must be a decimal string ("12.50") or an integer; '
        "floats are refused"
    )


@pytest.mark.parametrize(
    ("amount", "gate", "message"),
    [
        # Plain digits get the specific refusal however many there are (review L3).
        ("999999999999999999", "input:invalid_amount", "amount is too large"),
        ("9999999999999999", "input:invalid_amount", "amount is too large"),
        ("1000000000000000.5", "input:invalid_amount", "amount is too large"),
        ("0.0000000000000000001", "input:invalid_amount", "more than 6 fractional digits"),
        ("0.0000001", "input:invalid_amount", "more than 6 fractional digits"),
        ("1x", "input:invalid_amount", "is not a decimal string"),
        (True, "input:invalid", "or an integer; not a boolean"),
        (None, "input:invalid", "or an integer; not null"),
        ([1], "input:invalid", "or an integer; not an array"),
    ],
)
def test_an_amount_refusal_names_what_is_wrong_with_it(
    rt: Runtime, api: Api, amount: Any, gate: str, message: str
) -> None:
    body = assert_error(api.quote(tree(rt), amount), gate, 400, resolution="retry")
    assert message in body["message"], body


def test_long_plain_amounts_within_the_limits_are_amounts(rt: Runtime, api: Api) -> None:
    """Zeros either side do not count against the digit limits."""
    bot = tree(rt)
    ok = api.quote(bot, "000000000000000000012.500000000000")
    assert ok.status == 200, ok.body
    assert Decimal(ok.data["quote"]["amount"]) == Decimal("12.5")
    # Second review (decision 941): stored and echoed as a plain "12.5" quote is, so no
    # answer shows more than 6 fractional digits (it showed "12.500000000000").
    ref = api.quote(tree(rt, prefix="beta"), "12.5")
    assert ok.data["quote"]["amount"] == ref.data["quote"]["amount"] == "12.5"
    rid = ok.data["quote"]["reservation"]["reservationId"]
    held = api.get(f"/v1/reservations/{rid}").data["reservation"]
    assert held["amount"] == "12.5", held
    assert api.budget(bot)["reserved"] == "12.5"
    again = api.quote(bot, "0006.0000000")
    assert again.data["quote"]["amount"] == "6"
    assert api.budget(bot)["reserved"] == "18.5"
    refused = api.quote(bot, "0040.000000000")
    assert refused.status == 402, refused.body
    assert re.search(r"\.[0-9]{7}", refused.body["message"]) is None, refused.body
    assert "31.5 of 50 USD left" in refused.body["message"], refused.body


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"budgetId": "acme", "action": "x", "amount": "1"}, "currency"),
        ({"budgetId": "acme", "action": "x", "amount": "1", "currency": "usd"}, "currency"),
        ({"budgetId": "acme", "action": "", "amount": "1", "currency": "USD"}, "action"),
        ({"budgetId": 7, "action": "x", "amount": "1", "currency": "USD"}, "budgetId"),
        (
            {"budgetId": "acme", "action": "x", "amount": "1", "currency": "USD", "amonut": 1},
            "amonut",
        ),
        (
            {"budgetId": "acme", "action": "x", "amount": "1", "currency": "USD", "holdSeconds": 0},
            "holdSeconds",
        ),
        (
            {
                "budgetId": "acme",
                "action": "x",
                "amount": "1",
                "currency": "USD",
                "holdSeconds": 7 * 86400 + 1,
            },
            "holdSeconds",
        ),
        ([], "body"),
        ("quote", "body"),
    ],
)
def test_schema_invalid_bodies_get_the_error_envelope_not_422(
    rt: Runtime, api: Api, body: Any, needle: str
) -> None:
    tree(rt)
    r = api.post("/v1/quotes", body)
    got = assert_error(r, "input:invalid", 400, resolution="retry")
    assert needle in got["message"]
    assert db_rows(rt, "SELECT count(*) FROM reservations") == [(0,)]


@pytest.mark.parametrize(
    ("content", "content_type", "gate"),
    [
        (b'{"budgetId": "acme",', "application/json", "input:invalid_json"),
        (b"\xff\xfe{}", "application/json", "input:invalid_json"),
        (
            b'{"budgetId":"acme","budgetId":"x","action":"a","amount":"1","currency":"USD"}',
            "application/json",
            "input:invalid_json",
        ),
        (
            b'{"budgetId":"acme","action":"a","amount":NaN,"currency":"USD"}',
            "application/json",
            "input:invalid_json",
        ),
        (b'{"budgetId":"acme","action":"a","amount":"1","currency":"USD"}', None, "input:invalid"),
        (
            b'{"budgetId":"acme","action":"a","amount":"1","currency":"USD"}',
            "text/plain",
            "input:invalid",
        ),
        (b"", "application/json", "input:invalid"),
    ],
)
def test_bad_json_and_content_types_get_the_error_envelope(
    rt: Runtime, api: Api, content: bytes, content_type: str | None, gate: str
) -> None:
    tree(rt)
    headers = {"content-type": content_type} if content_type else {}
    r = api.post("/v1/quotes", content=content, headers=headers)
    assert_error(r, gate, 400, resolution="retry")
    assert db_rows(rt, "SELECT count(*) FROM reservations") == [(0,)]


#: Every /v1 route that reads a body (the ids need not exist: the body is read first).
BODY_ROUTES = [
    ("POST", "/v1/quotes"),
    ("POST", "/v1/budget-requests"),
    ("POST", "/v1/reservations/res_x/commit"),
    ("POST", "/v1/reservations/res_x/release"),
    ("PUT", "/v1/budgets/x"),
    ("POST", "/v1/approvals/task_x/approve"),
    ("POST", "/v1/approvals/task_x/reroute"),
]


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "arrays and objects are nested deeper than 128 levels"),
        (b'{"a":' + b"[" * 128 + b"]" * 128 + b"}", "nested deeper than 128 levels"),
        (b'{"budgetId": "\xff"}', "body is not valid UTF-8"),
        (b"\xff\xfe{}", "body is not valid UTF-8"),
    ],
    ids=["deep_100000", "deep_129", "bad_utf8_string", "bad_utf8_bom"],
)
def test_unreadable_bodies_name_the_problem_on_every_route(
    rt: Runtime, api: Api, method: str, path: str, content: bytes, problem: str
) -> None:
    # The words /v1/action-requests uses (warden.crypto.canonical.parse_request_json),
    # never FastAPI's "There was an error parsing the body".
    tree(rt)
    before = db_rows(rt, "SELECT count(*) FROM budgets")
    reply = api.request(method, path, content=content, headers={"content-type": "application/json"})
    body = assert_error(reply, "input:invalid_json", 400, resolution="retry")
    assert problem in body["message"], body
    assert "could not be read" not in body["message"]
    assert db_rows(rt, "SELECT count(*) FROM budgets") == before


def test_oversized_bodies_are_refused_unread(rt: Runtime, api: Api) -> None:
    tree(rt)
    big = b'{"pad": "' + b"x" * (1 << 20) + b'"}'
    r = api.post("/v1/quotes", content=big, headers={"content-type": "application/json"})
    assert_error(r, "input:body_too_large", 413, resolution="retry")

    def chunks() -> Iterator[bytes]:  # no content-length: the cap applies while reading
        yield b'{"pad": "'
        for _ in range(17):
            yield b"x" * 65536
        yield b'"}'

    r2 = api.client.post(
        "/v1/quotes",
        content=chunks(),
        headers={"content-type": "application/json", "Authorization": f"Bearer {api.token}"},
    )
    assert r2.status_code == 413
    assert r2.json()["blockedBy"] == "input:body_too_large"


def test_unknown_ids_are_404_with_a_hint(rt: Runtime, api: Api) -> None:
    tree(rt)
    for reply, gate in (
        (api.quote("nope", "1"), "input:unknown_budget"),
        (api.get("/v1/budgets/nope"), "input:unknown_budget"),
        (
            api.post("/v1/reservations/res_x/commit", {"actualAmount": "1"}),
            "input:unknown_reservation",
        ),
        (api.post("/v1/reservations/res_x/release"), "input:unknown_reservation"),
        (api.post("/v1/receipts/rcp_x/undo"), "input:unknown_receipt"),
        (api.get("/v1/tasks/task_x"), "input:unknown_task"),
        (
            api.post("/v1/budget-requests", {"budgetId": "nope", "cap": "5", "reason": "r"}),
            "input:unknown_budget",
        ),
    ):
        body = assert_error(reply, gate, 404, resolution="retry")
        assert body["resolution"]["hint"]


def test_commit_amount_is_checked_before_anything_changes(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    rid = api.reserve(bot, "5")
    for bad in ("-1", "x", "1.0000001"):
        r = api.post(f"/v1/reservations/{rid}/commit", {"actualAmount": bad})
        assert_error(r, "input:invalid_amount", 400, resolution="retry")
    assert_error(
        api.post(f"/v1/reservations/{rid}/commit", {"actualAmount": "1", "resources": [{}]}),
        "input:invalid",
        400,
        resolution="retry",
    )
    assert api.get(f"/v1/reservations/{rid}").data["reservation"]["status"] == "held"


# -- currencies -------------------------------------------------------------------------


def test_the_wire_is_usd_only(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    eur = tree(rt, currency="EUR", prefix="euro")
    # a USD budget asked in another currency: sending USD works
    r = api.quote(bot, "1", extra={"currency": "EUR"})
    assert_error(r, "input:currency_not_supported", 400, resolution="retry")
    # a EUR budget: nothing on this wire can use it (ACS can)
    for reply in (
        api.quote(eur, "1"),
        api.get(f"/v1/budgets/{eur}"),
        api.post("/v1/budget-requests", {"budgetId": eur, "cap": "500", "reason": "more"}),
        api.put(
            "/v1/budgets/euro",
            {"kind": "org", "currency": "EUR", "cap": "5", "period": "none"},
        ),
    ):
        assert_error(reply, "input:currency_not_supported", 400, resolution=None)
    # a EUR reservation (owned by the caller) cannot be committed or released here
    res = rt.spend.reserve(eur, "1", "EUR", action="send_money", principal="admin")
    for reply in (
        api.post(f"/v1/reservations/{res.id}/commit", {"actualAmount": "1"}),
        api.post(f"/v1/reservations/{res.id}/release"),
        api.get(f"/v1/reservations/{res.id}"),
    ):
        assert_error(reply, "input:currency_not_supported", 400, resolution=None)
    receipt = rt.spend.settle(res.id, "1")
    assert_error(
        api.post(f"/v1/receipts/{receipt.id}/undo"),
        "input:currency_not_supported",
        400,
        resolution=None,
    )
    # the listing shows USD budgets only
    listed = {b["budgetId"] for b in api.get("/v1/budgets").data["budgets"]}
    assert listed == {"acme", "acme.ops", bot}
    # a new budget in another currency: defining it in USD works
    r = api.put("/v1/budgets/yen", {"kind": "org", "currency": "JPY", "cap": "5", "period": "day"})
    assert_error(r, "input:currency_not_supported", 400, resolution="retry")
    # a stored USD budget defined again in EUR: the message names each currency rightly
    # (review L4: it said the budget was in EUR)
    r = api.put(
        f"/v1/budgets/{bot}",
        {"kind": "agent", "parent": "acme.ops", "currency": "EUR", "cap": "5", "period": "none"},
    )
    body = assert_error(r, "input:currency_not_supported", 400, resolution="retry")
    assert body["message"].startswith(f"this definition of USD budget {bot} is in EUR;"), body
    assert api.budget(bot)["currency"] == "USD"


# -- budgets ------------------------------------------------------------------------------


def test_list_and_read_budgets(rt: Runtime, api: Api) -> None:
    bot = tree(rt, org="100", team="30", agent="50", period=Period.MONTH)
    api.reserve(bot, "5")
    r = api.get("/v1/budgets")
    assert r.status == 200
    by_id = {b["budgetId"]: b for b in r.data["budgets"]}
    assert set(by_id) == {"acme", "acme.ops", bot}
    agent = by_id[bot]
    assert (agent["cap"], agent["reserved"], agent["settled"], agent["available"]) == (
        "50",
        "5",
        "0",
        "45",
    )
    # remaining is the tightest cap along the path (the team's 30 − 5)
    assert (agent["remaining"], agent["remainingUsd"]) == ("25", 25)
    assert agent["bucket"] == datetime.now(UTC).strftime("%Y-%m")
    assert agent["periodEndsAt"].endswith("T00:00:00Z")
    assert (agent["kind"], agent["parent"], agent["period"]) == ("agent", "acme.ops", "month")

    one = api.get(f"/v1/budgets/{bot}")
    assert one.data["path"] == [bot, "acme.ops", "acme"]
    assert (one.data["budgetRemaining"], one.data["budgetRemainingUsd"]) == ("25", 25)
    assert one.data["budget"] == agent


def test_define_and_update_budgets_with_a_working_undo(rt: Runtime, api: Api) -> None:
    org = {"kind": "org", "currency": "USD", "cap": "100", "period": "month", "name": "Acme"}
    r = api.put("/v1/budgets/acme", org)
    assert r.status == 201
    assert r.data["undo"] == {"command": None, "irreversible": True}
    assert r.data["receipt"]["action"] == "budget.create"
    assert r.data["receipt"]["resources"] == [
        {"kind": "budget", "provider": "warden", "externalId": "acme"}
    ]
    assert (r.data["budget"]["cap"], r.data["budgetRemainingUsd"]) == ("100", 100)
    team = {"kind": "team", "parent": "acme", "currency": "USD", "cap": 40, "period": "day"}
    assert api.put("/v1/budgets/acme.ops", team).status == 201

    up = api.put("/v1/budgets/acme", {**org, "cap": "20.5", "name": "Acme (tight)"})
    assert up.status == 200
    assert up.data["receipt"]["action"] == "budget.update"
    assert up.data["budgetRemainingUsd"] == 20.5
    assert api.budget("acme.ops")["remaining"] == "20.5"  # the org now binds
    assert up.data["undo"]["irreversible"] is False
    restored = api.run(up.data["undo"]["command"])
    assert restored.status == 200
    assert (api.budget("acme")["cap"], api.budget("acme")["name"]) == ("100", "Acme")


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        (
            "/v1/budgets/Bad%20Id",
            {"kind": "org", "currency": "USD", "cap": "1", "period": "day"},
            "id",
        ),
        (
            "/v1/budgets/t",
            {"kind": "team", "currency": "USD", "cap": "1", "period": "day"},
            "parent",
        ),
        (
            "/v1/budgets/t",
            {"kind": "team", "parent": "nope", "currency": "USD", "cap": "1", "period": "day"},
            "parent",
        ),
        (
            "/v1/budgets/acme.ops",
            {"kind": "org", "currency": "USD", "cap": "1", "period": "day"},
            "only cap, period, name and principals",
        ),
        (
            "/v1/budgets/a2",
            {"kind": "agent", "parent": "acme", "currency": "USD", "cap": "1", "period": "day"},
            "needs a parent of kind team",
        ),
    ],
)
def test_bad_budget_definitions_are_refused(
    rt: Runtime, api: Api, path: str, body: dict[str, Any], needle: str
) -> None:
    tree(rt)
    before = db_rows(rt, "SELECT budget_id, cap FROM budgets ORDER BY budget_id")
    got = assert_error(api.put(path, body), "input:invalid_budget", 400, resolution="retry")
    assert needle in got["message"]
    assert db_rows(rt, "SELECT budget_id, cap FROM budgets ORDER BY budget_id") == before


def test_bad_budget_fields(rt: Runtime, api: Api) -> None:
    for body in (
        {"kind": "galaxy", "currency": "USD", "cap": "1", "period": "day"},
        {"kind": "org", "currency": "USD", "cap": "1", "period": "weekly"},
        {"kind": "org", "currency": "USD", "cap": 1.0, "period": "day"},
    ):
        assert_error(api.put("/v1/budgets/x", body), "input:invalid", 400, resolution="retry")
    assert_error(
        api.put("/v1/budgets/x", {"kind": "org", "currency": "USD", "cap": "-1", "period": "day"}),
        "input:invalid_amount",
        400,
        resolution="retry",
    )


# -- budget requests and tasks -----------------------------------------------------------


def test_budget_request_creates_a_task_and_answers_approval_required(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    r = api.post("/v1/budget-requests", {"budgetId": bot, "cap": "80", "reason": "launch week"})
    body = assert_error(r, "approval:required", 403, resolution="human_approval")
    task_id = body["resolution"]["taskId"]
    assert (body["limit"], body["requested"]) == (50, 80)
    assert "needs a human approval (group finance)" in body["message"]
    t = api.get(f"/v1/tasks/{task_id}")
    assert t.status == 200
    task = t.data["task"]
    assert task == {
        "taskId": task_id,
        "kind": "budget_increase",
        "status": "input_required",
        "terminal": False,
        "createdAt": task["createdAt"],
        "updatedAt": task["createdAt"],
        "budgetId": bot,
        "currentCap": "50",
        "requestedCap": "80",
        "currency": "USD",
        "reason": "launch week",
        "state": "pending",
    }
    assert t.body["nextActions"]
    assert db_rows(rt, "SELECT task_id, kind, status, state FROM tasks") == [
        (task_id, "budget_increase", "input_required", "pending")
    ]
    assert api.budget(bot)["cap"] == "50"  # nothing changes until a human decides


def test_budget_request_must_ask_for_more(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    for cap in ("50", "10"):
        r = api.post("/v1/budget-requests", {"budgetId": bot, "cap": cap, "reason": "r"})
        assert_error(r, "input:not_an_increase", 400, resolution="retry")
    r = api.post("/v1/budget-requests", {"budgetId": bot, "cap": "60", "reason": ""})
    assert_error(r, "input:invalid", 400, resolution="retry")
    assert db_rows(rt, "SELECT count(*) FROM tasks") == [(0,)]


# -- routing and the document -------------------------------------------------------------


def test_unknown_routes_and_methods_get_envelopes(rt: Runtime, api: Api) -> None:
    assert_error(api.get("/v1/nothing-here"), "input:unknown_route", 404, resolution="retry")
    r = api.get("/v1/quotes")
    assert_error(r, "input:method_not_allowed", 405, resolution="retry")
    assert r.headers["allow"] == "POST"
    r = api.request("DELETE", "/v1/budgets/acme")
    assert_error(r, "input:method_not_allowed", 405, resolution="retry")
    assert r.headers["allow"] == "GET, PUT"


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
@pytest.mark.parametrize(
    "path", ["/v1", "/v1?x=1", "/v1/", "/v1/quotes/", "/v1/budgets/", "/v1/approvals/"]
)
def test_unknown_v1_paths_are_answered_in_the_v1_format_not_redirected(
    rt: Runtime, api: Api, method: str, path: str
) -> None:
    """``/v1`` itself and trailing slashes: the /v1 error envelope, never FastAPI's
    ``{"detail": …}`` nor a bare 307 (issue 14 item 6)."""
    r = api.client.request(
        method, path, headers={"Authorization": f"Bearer {api.token}"}, follow_redirects=False
    )
    assert "location" not in r.headers, (r.status_code, r.headers)
    assert r.headers["content-type"].startswith("application/json"), r.text
    body = assert_error(
        Reply(r.status_code, r.json(), r.headers), "input:unknown_route", 404, resolution="retry"
    )
    assert "detail" not in body
    assert db_rows(rt, "SELECT count(*) FROM reservations") == [(0,)]


ROUTES = {
    ("post", "/v1/quotes"): "Success_QuoteData_",
    ("post", "/v1/reservations/{reservation_id}/commit"): "Success_CommitData_",
    ("post", "/v1/reservations/{reservation_id}/release"): "Success_ReleaseData_",
    ("get", "/v1/reservations/{reservation_id}"): "Success_ReservationData_",
    ("get", "/v1/receipts/{receipt_id}"): "Success_ReceiptData_",
    ("post", "/v1/receipts/{receipt_id}/undo"): "Success_UndoData_",
    ("get", "/v1/budgets"): "Success_BudgetListData_",
    ("get", "/v1/budgets/{budget_id}"): "Success_BudgetData_",
    ("put", "/v1/budgets/{budget_id}"): "Success_BudgetDefineData_",
    ("post", "/v1/budget-requests"): "ErrorEnvelope",
    ("get", "/v1/tasks/{task_id}"): "Success_TaskData_",
    ("get", "/v1/approvals"): "Success_ApprovalList_",
    ("get", "/v1/approvals/{task_id}"): "Success_ApprovalData_",
    ("post", "/v1/approvals/{task_id}/approve"): "Success_ApprovalData_",
    ("post", "/v1/approvals/{task_id}/deny"): "Success_ApprovalData_",
    ("post", "/v1/approvals/{task_id}/reroute"): "Success_ApprovalData_",
    ("post", "/v1/action-requests"): "Success_SubmitData_",
    ("get", "/v1/action-requests/{action_request_id}"): "Success_ActionRequestData_",
    ("post", "/v1/action-requests/{action_request_id}/outcome"): "Success_OutcomeData_",
    ("get", "/v1/kla-records/{record_id}"): "Success_RecordData_",
    ("get", "/v1/executions/{execution_id}/evidence"): "Success_EvidenceData_",
    ("get", "/v1/keys"): "Success_KeysData_",
    ("get", "/v1/agents"): "Success_AgentList_",
    ("post", "/v1/agents"): "Success_AgentCreated_",
    ("get", "/v1/agents/{agent_id}"): "Success_AgentData_",
    ("post", "/v1/agents/{agent_id}/rotate"): "Success_KeyIssued_",
    ("post", "/v1/agents/{agent_id}/revoke"): "Success_AgentData_",
}


def test_every_route_is_in_the_openapi_document_with_response_models(api: Api) -> None:
    doc = api.client.get("/openapi.json").json()
    # The transparency log's routes (/v1/log, issue 17) are public and key-less by design
    # (anyone verifies the log); tests/tlog covers them.
    found = {
        (m, p)
        for p, ops in doc["paths"].items()
        if p.startswith("/v1") and not p.startswith("/v1/log/")
        for m in ops
    }
    assert found == set(ROUTES)
    for (method, path), model in ROUTES.items():
        op = doc["paths"][path][method]
        success = "403" if model == "ErrorEnvelope" else "200"
        ref = op["responses"][success]["content"]["application/json"]["schema"]["$ref"]
        assert ref == f"#/components/schemas/{model}"
        assert op["responses"]["4XX"]["content"]["application/json"]["schema"]["$ref"] == (
            "#/components/schemas/ErrorEnvelope"
        )
        assert "422" not in op["responses"]
        assert op["security"] == [{"HTTPBearer": []}]
        if method in ("post", "put") and not path.startswith(
            ("/v1/approvals", "/v1/action-requests", "/v1/agents")
        ):
            # Approval decisions need no key: deciding twice is a 409, never a second effect.
            # Action requests neither: the action_request_id is the idempotency key (the
            # same record replays its answer), and an outcome is recorded once. Agents
            # (admin): a second add is a 409 and revoke is idempotent (decision 229).
            names = {p["name"] for p in op.get("parameters", [])}
            assert "Idempotency-Key" in names
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_decimal_strings_stay_exact(rt: Runtime, api: Api) -> None:
    rt.spend.define_budget(
        Budget("tiny", BudgetKind.ORG, "USD", Decimal("1"), Period.NONE, principals=("admin",))
    )
    for _ in range(3):
        r = api.quote("tiny", "0.1")
    assert r.data["budgetRemaining"] == "0.7"  # not 0.7000000000000001
    assert r.data["budgetRemainingUsd"] == 0.7
    assert api.budget("tiny")["reserved"] == "0.3"
