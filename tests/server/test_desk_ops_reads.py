"""The operator view's reads on both store backends (a real SQLite file and the real
PostgreSQL): entries newest first with a keyset cursor that neither skips nor repeats,
exact filters over a coarse LIKE prefilter (wildcards in a filter are literal), one
entry's chain link verified with the ledger's own checks and refused once tampered,
and the secret a modify verdict redacted kept off the decision page's request."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from conftest import TEST_IKM, service_client
from sqlalchemy import create_engine, text

from warden.errors import IntegrityError
from warden.ledger.verify import verify_link
from warden.runtime import Runtime
from warden.server import ops_view
from warden.server.ops_detail import decision_context
from warden.store import activity_sql
from warden.store.activity_sql import like_pattern

SECRET = "s3cret-value"


@pytest.fixture
def seeded(make_backend_runtime: Callable[..., Runtime]) -> tuple[Runtime, str]:
    rt = make_backend_runtime()
    bot = service_client(rt, agent_id="ops-bot")
    bot.hello()
    bot.call("steps/sessionStart", {})
    decisions = [
        bot.tool_call("read_file", {"path": "/a"})["result"]["decision"],
        bot.tool_call("shell", {"command": "rm -rf /"})["result"]["decision"],
        bot.tool_call("delete_file", {"path": "/b"})["result"]["decision"],
        bot.tool_call("login", {"user": "u", "password": SECRET})["result"]["decision"],
        bot.tool_call("read_100%_file", {"path": "/c"})["result"]["decision"],
    ]
    assert decisions == ["allow", "deny", "ask", "modify", "allow"]
    return rt, bot.session_id


def test_pages_newest_first_without_gaps(seeded: tuple[Runtime, str]) -> None:
    rt, _ = seeded
    everything = activity_sql.entries_page(rt.store, limit=100)
    # 6 ACS entries, the desk chain's "requested" for the ask, and the agent's registration.
    assert len(everything) == 8
    keys = [(e.created_at, e.session_id, e.seq) for e in everything]
    assert keys == sorted(keys, reverse=True)
    walked: list[tuple[str, str, int]] = []
    cursor = None
    while True:
        page = ops_view.activity(rt.store, ops_view.Filters(), cursor, page_size=2)
        walked += [(r.created_at, r.session_id, r.seq) for r in page.rows]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert walked == keys


def test_filters_are_exact(seeded: tuple[Runtime, str]) -> None:
    rt, session = seeded

    def rows(**kw: str) -> list[ops_view.EntrySummary]:
        filters = ops_view.parse_filters(kw)
        return ops_view.activity(rt.store, filters, None).rows

    assert [(r.tool, r.decision) for r in rows(decision="deny")] == [("shell", "deny")]
    assert [r.tool for r in rows(rule="redact-password")] == ["login"]
    # A rule id that is a prefix of another matches only itself.
    assert rows(rule="redact") == []
    asked = rows(tool="delete_file")
    assert {r.wire for r in asked} == {"acs", "approval"}
    # "%" and "_" in a filter are the characters themselves, not LIKE wildcards.
    assert [r.tool for r in rows(tool="read_100%_file")] == ["read_100%_file"]
    assert rows(tool="read_1%") == []
    assert like_pattern("a%b_c!") == "%a!%b!_c!!%"
    assert {r.agent for r in rows(agent="ops-bot")} == {"ops-bot"}
    # the desk chain's event names the requester; the agents chain's registration too
    assert len(rows(agent="ops-bot")) == 8
    assert rows(agent="nobody") == []
    assert {r.wire for r in rows(wire="approval")} == {"approval"}
    future = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert rows(since=future) == []
    assert len(rows(until=future)) == 8  # with the agent's registration entry
    one = ops_view.activity(rt.store, ops_view.Filters(), None, session_id=session).rows
    assert len(one) == 6 and {r.session_id for r in one} == {session}

    # Entries stored before requests were kept (request NULL) and rows that are not
    # JSON still belong to their session's agent.
    engine = create_engine(rt.settings.resolved_database_url())
    try:
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE entries SET request = NULL WHERE session_id = :s AND seq = 0"),
                {"s": session},
            )
            conn.execute(
                text("UPDATE entries SET entry = 'garbage' WHERE session_id = :s AND seq = 1"),
                {"s": session},
            )
    finally:
        engine.dispose()
    assert len(rows(agent="ops-bot")) == 8
    assert [(r.seq, r.agent) for r in rows(decision="unreadable")] == [(1, "ops-bot")]


@pytest.mark.parametrize(
    "params",
    [{"since": "yesterday"}, {"since": "2026-12-02T00:00", "until": "2026-12-01T00:00"}],
)
def test_bad_filters_are_refused(params: dict[str, str]) -> None:
    with pytest.raises(ops_view.FilterError):
        ops_view.parse_filters(params)


def test_bad_cursor_and_limit_are_refused() -> None:
    with pytest.raises(ops_view.FilterError):
        ops_view.parse_cursor({"before_at": "x", "before_session": "s", "before_seq": "-1"})
    for limit in ("0", "201", "ten"):
        with pytest.raises(ops_view.FilterError):
            ops_view.parse_limit({"limit": limit})
    assert ops_view.parse_limit({}) == ops_view.PAGE_SIZE


def test_link_verifies_and_tampering_is_found(seeded: tuple[Runtime, str]) -> None:
    rt, session = seeded
    chain = activity_sql.entry_chain(rt.store, session, 2)
    assert chain is not None and chain.previous is not None and chain.following is not None
    report = verify_link(
        chain.session,
        chain.previous,
        chain.record,
        following=chain.following,
        head=chain.head,
        ikm=TEST_IKM,
    )
    # The session record's and the response's signatures (entry 2 is not the head).
    assert report.signatures_checked == 2 and report.successor_links and not report.is_head
    head = activity_sql.entry_chain(rt.store, session, 5)
    assert head is not None and head.following is None
    assert verify_link(
        head.session, head.previous, head.record, head=head.head, ikm=TEST_IKM
    ).is_head
    first = activity_sql.entry_chain(rt.store, session, 0)
    assert first is not None and first.previous is None
    assert activity_sql.entry_chain(rt.store, session, 6) is None
    assert activity_sql.entry_chain(rt.store, "no-such-session", 0) is None

    # A response signed under another key, then an edited predecessor: both refused.
    with pytest.raises(IntegrityError) as wrong_key:
        verify_link(chain.session, chain.previous, chain.record, ikm=bytes(range(1, 33)))
    assert wrong_key.value.reason == "signature_invalid"
    engine = create_engine(rt.settings.resolved_database_url())
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE entries SET entry = replace(entry, '\"allow\"', '\"deny\"') "
                    "WHERE session_id = :s AND seq = 1"
                ),
                {"s": session},
            )
    finally:
        engine.dispose()
    tampered = activity_sql.entry_chain(rt.store, session, 2)
    assert tampered is not None
    with pytest.raises(IntegrityError) as broken:
        verify_link(tampered.session, tampered.previous, tampered.record, ikm=TEST_IKM)
    assert broken.value.reason == "record_hash_mismatch" and broken.value.seq == 1
    page = decision_context(tampered, "/desk", rt.bundle, TEST_IKM)
    assert page["verification"]["ok"] is False


def test_decision_page_hides_the_redacted_secret(seeded: tuple[Runtime, str]) -> None:
    rt, session = seeded
    chain = activity_sql.entry_chain(rt.store, session, 4)
    assert chain is not None
    assert SECRET in chain.record["request"]  # stored as received: the hash covers it
    page = decision_context(chain, "/desk", rt.bundle, TEST_IKM)
    assert page["summary"].decision == "modify"
    assert page["redacted"] == ["/arguments/password/value"]
    assert SECRET not in page["request"] and "[REDACTED]" in page["request"]
    assert page["verification"]["ok"] is True
    rules = {r.rule_id: r for r in page["rules"]}
    assert rules["redact-password"].known and rules["redact-password"].effect == "modify"


def test_a_store_failure_is_the_desks_503_page(seeded: tuple[Runtime, str]) -> None:
    """The operator pages fail closed like every desk page: the store's failure is the
    desk's 503 page with Retry-After, never a 500 or a partial page."""
    import re

    from fastapi.testclient import TestClient
    from outage import damage, repair

    from warden.identity.api_keys import Role
    from warden.server.app import create_app

    rt, session = seeded
    _, token = rt.api_keys.create("root", Role.ADMIN, ())
    url = rt.settings.resolved_database_url()
    with TestClient(create_app(rt), follow_redirects=False) as client:
        form = client.get("/desk/login")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert csrf is not None
        login = client.post(
            "/desk/login", data={"token": token, "csrf_token": csrf.group(1), "next": "/desk/ops"}
        )
        assert login.status_code == 303 and login.headers["location"] == "/desk/ops"
        assert client.get("/desk/ops").status_code == 200
        damage(url, "entries")
        try:
            for path in ("/desk/ops", f"/desk/ops/entries/{session}/1", "/desk/ops/charts"):
                r = client.get(path)
                assert r.status_code == 503, (path, r.text)
                assert r.headers["retry-after"] == "5"
                assert "Approval desk unavailable" in r.text
                assert "content-security-policy" in r.headers
        finally:
            repair(url, "entries")
        assert client.get(f"/desk/ops/entries/{session}/1").status_code == 200
