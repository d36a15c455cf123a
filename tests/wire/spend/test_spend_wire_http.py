"""The spend wire over real HTTP against `warden serve` (issue 3 item 7): budgets from
--budgets, 200 concurrent reservations from several OS processes that never exceed the cap,
expiry, a crash mid-flight that keeps holds and idempotency records, undo, and a refused
start on a bad budgets file."""

from __future__ import annotations

import copy
import multiprocessing as mp
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from conftest import DEFAULT_POLICY, ROOT, Server, asset, start_server, write_key
from spend_wire_helpers import assert_error, check_envelope, cli_key, server_api

from warden.store import open_store

DEFAULT_BUDGETS = ROOT / "examples" / "budgets" / "default.yaml"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "srv", DEFAULT_POLICY, "--budgets", str(DEFAULT_BUDGETS))
    yield srv
    srv.stop()


def test_budgets_file_and_token_at_start(server: Server) -> None:
    token = server.data_dir / "api.token"
    assert oct(token.stat().st_mode & 0o777) == "0o600"
    with server_api(server.data_dir, server.url) as api:
        listed = {b["budgetId"]: b for b in api.get("/v1/budgets").data["budgets"]}
        assert set(listed) == {
            "acme",
            "acme.ops",
            "acme.ops.deploy-bot",
            "acme.research",
            "acme.research.buyer",
        }
        bot = listed["acme.ops.deploy-bot"]
        assert (bot["cap"], bot["period"], bot["parent"]) == ("25.00", "day", "acme.ops")
        assert listed["acme.research.buyer"]["period"] == "none"
    r = httpx.get(server.url + "/v1/budgets")
    assert r.status_code == 401
    check_envelope(401, r.json(), mutating=False)
    assert r.json()["blockedBy"] == "auth:required"


def test_quote_commit_undo_over_http(server: Server) -> None:
    # examples/budgets/default.yaml binds the deploy bot's budget to principal deploy-bot
    bot_key = cli_key(server.data_dir, "deploy-bot")
    with server_api(server.data_dir, server.url, bot_key) as api:
        q = api.quote(
            "acme.ops.deploy-bot", "19.99", action="buy_domain", key="flow-quote-000000001"
        )
        assert q.status == 200 and q.data["budgetRemainingUsd"] == 5.01
        rid = q.data["quote"]["reservation"]["reservationId"]
        c = api.post(f"/v1/reservations/{rid}/commit", {"actualAmount": "12"})
        assert c.status == 200 and c.data["budgetRemaining"] == "13.00"
        u = api.run(c.data["undo"]["command"])
        assert u.status == 200 and u.data["budgetRemaining"] == "25.00"
        b = api.budget("acme.ops.deploy-bot")
        assert (b["reserved"], b["settled"]) == ("0.00", "0")


# -- 200 concurrent reservations from 4 processes ---------------------------------------------

CAP = Decimal("50.00")
PRICE = Decimal("0.37")  # 135 × 0.37 = 49.95 fits, the 136th does not


def _reserve_many(url: str, token: str, n: int, out: Any) -> None:
    """A worker process: n quotes over HTTP from 5 threads; reports (status, body) pairs."""

    def one(_: int) -> tuple[int, dict[str, Any]]:
        with httpx.Client(base_url=url, timeout=120) as client:
            r = client.post(
                "/v1/quotes",
                json={"budgetId": "race", "action": "p", "amount": str(PRICE), "currency": "USD"},
                headers={"Authorization": f"Bearer {token}"},
            )
            return r.status_code, r.json()

    with ThreadPoolExecutor(5) as pool:
        out.put(list(pool.map(one, range(n))))


def test_concurrent_reservations_from_processes_never_exceed_the_cap(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "race")
    try:
        with server_api(srv.data_dir, srv.url) as api:
            org = {"kind": "org", "currency": "USD", "cap": str(CAP), "period": "none"}
            org["principals"] = ["admin"]  # the admin key spends only where it is bound
            assert api.put("/v1/budgets/race", org).status == 201
            token = api.token
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            procs = [
                ctx.Process(target=_reserve_many, args=(srv.url, token, 50, q)) for _ in range(4)
            ]
            for p in procs:
                p.start()
            results = [item for _ in procs for item in q.get(timeout=240)]
            for p in procs:
                p.join(60)
                assert p.exitcode == 0
            assert len(results) == 200
            for status, body in results:
                check_envelope(status, body, mutating=True)
            admitted = [b for s, b in results if s == 200]
            refused = [b for s, b in results if s != 200]
            fits = int(CAP // PRICE)
            assert len(admitted) == fits == 135  # the maximum that fits, no more, no fewer
            assert len(refused) == 200 - fits
            for body in refused:
                assert body["blockedBy"] == "budget:exceeded"
                assert body["requested"] == float(PRICE)
                assert Decimal(str(body["limit"])) < PRICE
            b = api.budget("race")
            reserved, settled = Decimal(b["reserved"]), Decimal(b["settled"])
            assert reserved == fits * PRICE == Decimal("49.95")
            assert reserved + settled <= CAP

            ids = [a["data"]["quote"]["reservation"]["reservationId"] for a in admitted]
            assert len(set(ids)) == fits

            def commit(rid: str) -> int:
                with server_api(srv.data_dir, srv.url) as c:
                    return c.post(
                        f"/v1/reservations/{rid}/commit", {"actualAmount": str(PRICE)}
                    ).status

            with ThreadPoolExecutor(8) as pool:
                assert set(pool.map(commit, ids)) == {200}
            b = api.budget("race")
            assert (Decimal(b["reserved"]), Decimal(b["settled"])) == (0, Decimal("49.95"))
            assert Decimal(b["reserved"]) + Decimal(b["settled"]) <= CAP
            assert_error(api.quote("race", str(PRICE)), "budget:exceeded", 402, resolution="retry")
    finally:
        srv.stop()
    # every reservation, refusal and settlement is in a chain that verifies
    done = subprocess.run(
        [sys.executable, "-m", "warden", "verify", "--data-dir", str(srv.data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# -- expiry, crash and restart ----------------------------------------------------------------


def test_an_expired_hold_is_released(server: Server) -> None:
    bot_key = cli_key(server.data_dir, "deploy-bot")
    with server_api(server.data_dir, server.url, bot_key) as api:
        bot = "acme.ops.deploy-bot"
        rid = api.reserve(bot, "20", extra={"holdSeconds": 1})
        assert api.budget(bot)["reserved"] == "20"
        time.sleep(1.3)
        assert api.budget(bot)["reserved"] == "0"
        assert api.get(f"/v1/reservations/{rid}").data["reservation"]["status"] == "expired"
        late = api.post(f"/v1/reservations/{rid}/commit", {"actualAmount": "20"})
        assert_error(late, "reservation:not_held", 409, resolution="retry")
        assert api.quote(bot, "25").status == 200  # the whole cap is free again


def test_a_crash_mid_flight_keeps_holds_and_idempotency_records(tmp_path: Path) -> None:
    data = tmp_path / "srv"
    srv = start_server(data, DEFAULT_POLICY, "--budgets", str(DEFAULT_BUDGETS))
    key = "crash-test-key-000001"
    # bound to acme.research.buyer through its group (examples/budgets/default.yaml)
    buyer = cli_key(data, "buyer-2", "research")
    try:
        with server_api(data, srv.url, buyer) as api:
            first = api.quote("acme.research.buyer", "60", key=key)
            rid = first.data["quote"]["reservation"]["reservationId"]
        srv.proc.kill()  # SIGKILL: no shutdown work at all
        srv.proc.wait(10)
    finally:
        srv.stop()
    srv = start_server(data, DEFAULT_POLICY, "--budgets", str(DEFAULT_BUDGETS))
    try:
        with server_api(data, srv.url, buyer) as api:
            b = api.budget("acme.research.buyer")
            assert (b["reserved"], b["remaining"]) == ("60", "40")
            assert api.get(f"/v1/reservations/{rid}").data["reservation"]["status"] == "held"
            again = api.quote("acme.research.buyer", "60", key=key)
            assert again.body["replayed"] is True
            assert again.data["quote"]["reservation"]["reservationId"] == rid
            assert api.budget("acme.research.buyer")["reserved"] == "60"
            c = api.post(f"/v1/reservations/{rid}/commit", {"actualAmount": "55"})
            assert c.status == 200 and c.data["budgetRemaining"] == "45"
    finally:
        srv.stop()


# -- refused starts -----------------------------------------------------------------------------


def _serve(data: Path, budgets: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    write_key(data / "ikm.key")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "warden",
            "serve",
            "--port",
            "0",
            "--data-dir",
            str(data),
            "--policy",
            str(DEFAULT_POLICY),
            "--budgets",
            str(budgets),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.parametrize(
    ("name", "needles"),
    [
        ("budgets_float_cap.yaml", ["budget #1 (acme)", "YAML float", "quoted decimal string"]),
        ("budgets_unknown_field.yaml", ["budget #1", "limit", "Extra inputs"]),
        ("budgets_duplicate_id.yaml", ["budget #2", "defined twice"]),
        ("budgets_duplicate_key.yaml", ["not valid YAML", "duplicate key 'cap'"]),
        ("budgets_mixed_currency.yaml", ["acme.eu", "currencies never mix"]),
        ("budgets_bad_period.yaml", ["budget #1", "period"]),
        ("budgets_not_a_list.yaml", ["non-empty YAML list"]),
        (
            "budgets_several_problems.yaml",
            ["budget #1", "Acme Corp", "budget #2", "'usd'", "budget #3", "cap must be"],
        ),
    ],
)
def test_a_bad_budgets_file_stops_the_start(tmp_path: Path, name: str, needles: list[str]) -> None:
    done = _serve(tmp_path / "d", asset(f"spend/{name}"))
    assert done.returncode == 2, done.stdout + done.stderr
    text = " ".join(done.stderr.split())
    assert "budgets" in text
    for needle in needles:
        assert needle in text, text
    assert not (tmp_path / "d" / "warden.db").exists()  # refused before the database opened


def test_a_parent_missing_from_file_and_database_stops_the_start(tmp_path: Path) -> None:
    done = _serve(tmp_path / "d", asset("spend/budgets_missing_parent.yaml"))
    assert done.returncode == 2
    text = " ".join(done.stderr.split())
    assert "team budget acme.ops needs an existing parent org budget" in text


def test_a_parent_missing_from_file_and_new_database_is_refused_before_writing(
    tmp_path: Path,
) -> None:
    """Decision 1141: the refusal came from the stored budgets' check, after the key files
    and the database were made; with no database yet nothing can hold the parent, so the
    start is refused before anything is written (decision 990)."""
    data = tmp_path / "d"
    done = _serve(data, asset("spend/budgets_missing_parent.yaml"))
    assert done.returncode == 2
    text = " ".join(done.stderr.split())
    assert "team budget acme.ops needs an existing parent org budget" in text
    assert sorted(p.name for p in data.iterdir()) == ["ikm.key"]  # only what _serve wrote


def test_a_budgets_file_that_conflicts_with_stored_budgets_changes_nothing(
    tmp_path: Path,
) -> None:
    data = tmp_path / "d"
    srv = start_server(data, DEFAULT_POLICY, "--budgets", str(DEFAULT_BUDGETS))
    srv.stop()
    done = _serve(data, asset("spend/budgets_conflicts_with_default.yaml"))
    assert done.returncode == 2
    text = " ".join(done.stderr.split())
    assert "conflicts with the stored budgets" in text
    assert "acme.ops is stored as a team" in text
    srv = start_server(data)
    try:
        with server_api(data, srv.url) as api:
            assert api.budget("acme")["cap"] == "1000.00"  # the valid lines were not applied
            assert api.budget("acme.ops")["kind"] == "team"
    finally:
        srv.stop()


#: Bad values on a budget that valid budgets follow (fresh-user review of issue 14): each
#: once started the server with that budget silently missing. (field, value, words).
TYPOS: list[tuple[str, Any, str]] = [
    ("cap", "abc", "cap"),
    ("cap", 10.5, "YAML float"),
    ("currency", "usd$", "usd$"),
    ("principals", True, "principals"),
    ("principals", "bob", "principals"),
    ("principals", [None], "must be a string"),
    ("principals", ["group:"], "a group is group:<name>"),
]


def _stored(database_url: str) -> tuple[list[Any], int]:
    """The budgets and the number of records in a database (no server running)."""
    store = open_store(database_url)
    try:
        return store.budgets(), sum(1 for _ in store.iter_records())
    finally:
        store.close()


def test_a_typo_before_valid_budgets_stops_the_start_and_changes_nothing(
    tmp_path: Path, database_url: str
) -> None:
    data = tmp_path / "d"
    db = ("--database-url", database_url)
    srv = start_server(data, DEFAULT_POLICY, *db, "--budgets", str(DEFAULT_BUDGETS))
    srv.stop()
    before = _stored(database_url)
    default = yaml.safe_load(DEFAULT_BUDGETS.read_text())
    files: list[tuple[Path, list[str]]] = []
    # Every value in TYPOS is refused at the parser (tests/spend/test_spend_config.py); a
    # real start is checked on two of them and a duplicate id (each start costs seconds).
    for i, (field, value, words) in enumerate(TYPOS[:2]):
        budgets = copy.deepcopy(default)
        position = i % 3  # budget #1, #2 or #3 of five
        budgets[position][field] = value
        budgets[4]["cap"] = "60"  # a valid lowered cap after it: must not be applied either
        path = tmp_path / f"typo{i}.yaml"
        path.write_text(yaml.safe_dump(budgets))
        files.append((path, [f"budget #{position + 1} ", words]))
    duplicate = copy.deepcopy(default)
    duplicate.insert(2, {**default[1], "cap": "1"})  # a second acme.ops, valid ones after
    path = tmp_path / "duplicate.yaml"
    path.write_text(yaml.safe_dump(duplicate))
    files.append((path, ["budget #3 (acme.ops): budget id acme.ops is defined twice"]))
    for path, needles in files:
        try:
            done = _serve(data, path, *db)
        except subprocess.TimeoutExpired:
            pytest.fail(f"warden serve started on a bad budgets file:\n{path.read_text()}")
        assert done.returncode == 2, (path.read_text(), done.stdout + done.stderr)
        text = " ".join(done.stderr.split())
        for needle in needles:
            assert needle in text, text
    assert _stored(database_url) == before
