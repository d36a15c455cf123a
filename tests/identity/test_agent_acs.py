"""ACS callers are registered agents (issue 15 items 2 and 5), on both store backends:
a key names its agent and a claim of another id opens nothing and spends nothing; the
budget follows the verified agent; a revoked key fails on every replica within one
request; the master IKM is refused without --unsafe-shared-ikm and marked with it;
rotation keeps old sessions verifiable; both signature forms are accepted."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from conftest import TEST_IKM, asset
from sqlalchemy import text

from warden.ledger.verify import verify_records
from warden.runtime import Runtime
from warden.spend import Budget, BudgetKind, Period
from warden.wire.acs.client import AcsClient, verify_response
from warden.wire.acs.signing import sign_request

SPEND_POLICY = asset("policy/spend_policy.yaml")


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


def _shop(rt: Runtime) -> None:
    rt.spend.define_budget(Budget("shop", BudgetKind.ORG, "USD", Decimal(1000), Period.NONE))
    rt.spend.define_budget(
        Budget("shop.ops", BudgetKind.TEAM, "USD", Decimal(1000), Period.NONE, parent_id="shop")
    )
    for name in ("shopper", "shopper-2"):
        rt.spend.define_budget(
            Budget(
                f"shop.ops.{name}",
                BudgetKind.AGENT,
                "USD",
                Decimal(100),
                Period.NONE,
                parent_id="shop.ops",
            )
        )


def _holds(rt: Runtime) -> list[str]:
    """The budget of every reservation ever taken, in order."""
    with rt.store.engine.connect() as conn:
        rows = conn.execute(text("SELECT budget_id FROM reservations")).all()
    return [str(r[0]) for r in rows]


def _pay(client: AcsClient, amount: int = 10) -> dict[str, Any]:
    return client.tool_call("pay", {"amount": amount, "currency": "USD"})


@pytest.fixture
def shop(make_runtime: Callable[..., Runtime]) -> Runtime:
    rt = make_runtime(policy=SPEND_POLICY)
    _shop(rt)
    assert rt.agents is not None
    rt.agents.add("shopper", "alice")
    rt.agents.add("shopper-2", "bob")
    return rt


def _client(rt: Runtime, signer: str, **kw: Any) -> AcsClient:
    """A client signing with ``signer``'s key (claiming ``agent_id`` if given)."""
    assert rt.agents is not None
    key = next(k.key_id for k in rt.agents.keys(signer) if k.revoked_at is None)
    return AcsClient.for_agent(rt.acs.handle, rt.agents.credential(key), **kw)


def test_claiming_another_agent_is_refused_and_spends_nothing(shop: Runtime) -> None:
    sessions_before = shop.store.counts()["sessions"]
    impostor = _client(shop, "shopper-2", agent_id="shopper")
    refused = impostor.hello()
    assert refused["error"]["code"] == -32004
    assert refused["error"]["data"]["reason"] == "agent_id_not_bound"
    assert shop.store.counts()["sessions"] == sessions_before  # no session was opened
    # On the real agent's session, the other agent's key gets the answer a session that
    # does not exist gets (-32003, decision 1005) and holds nothing.
    owner = _client(shop, "shopper")
    owner.hello()
    assert _pay(owner)["result"]["decision"] == "allow"
    assert _holds(shop) == ["shop.ops.shopper"]
    on_their_session = _client(
        shop, "shopper-2", agent_id="shopper", session_id=owner.session_id, track_chain=False
    )
    error = _pay(on_their_session)["error"]
    assert (error["code"], error["message"]) == (-32003, "no handshake/hello for this session")
    assert _holds(shop) == ["shop.ops.shopper"]
    # Paying as itself, the second agent is charged to its own budget.
    own = _client(shop, "shopper-2")
    own.hello()
    assert _pay(own)["result"]["decision"] == "allow"
    assert _holds(shop) == ["shop.ops.shopper", "shop.ops.shopper-2"]


def test_another_agents_session_answers_exactly_as_a_missing_one(shop: Runtime) -> None:
    """Decision 1005: bot-b's step on an id it does not own gets the bytes it got before
    the id existed (same envelope, same signed -32003), and nothing is recorded."""
    owner = _client(shop, "shopper")
    squatter = _client(shop, "shopper-2", session_id=owner.session_id, track_chain=False)
    envelope = squatter.envelope("steps/toolCallRequest", {"tool_name": "ls", "arguments": {}})
    raw = json.dumps(envelope, separators=(",", ":")).encode()
    before = shop.acs.handle(raw)
    assert before["error"]["code"] == -32003
    owner.hello()
    entries = shop.store.counts()["entries"]
    taken = shop.acs.handle(raw)
    assert taken == before  # the same request, the same signed answer: no -32005 either
    again = shop.acs.handle(raw)
    assert again == before
    assert verify_response(taken, squatter.key)
    assert shop.store.counts()["entries"] == entries
    # The owner's session goes on as if nothing happened.
    assert _pay(owner)["result"]["decision"] == "allow"


def test_budget_expr_may_not_read_what_the_agent_writes(tmp_path: Any) -> None:
    from warden.errors import ConfigError
    from warden.policy.bundle import load_bundle

    spec = SPEND_POLICY.read_text().replace(
        "budget_expr: data.agent_budgets[session.agent_id]",
        "budget_expr: data.agent_budgets[metadata.user_context.user_id]",
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec)
    with pytest.raises(ConfigError, match="metadata"):
        load_bundle(bad)


def test_revoked_key_fails_on_every_replica_within_one_request(
    make_runtime: Callable[..., Runtime],
) -> None:
    r0 = make_runtime(policy=SPEND_POLICY)
    r1 = make_runtime(policy=SPEND_POLICY)
    _shop(r0)
    assert r0.agents is not None
    _, cred = r0.agents.add("shopper", "alice")
    on_r0 = AcsClient.for_agent(r0.acs.handle, cred)
    on_r0.hello()
    # The same session through the second replica: its key cache is now warm.
    on_r1 = AcsClient.for_agent(r1.acs.handle, cred, session_id=on_r0.session_id)
    assert _pay(on_r1)["result"]["decision"] == "allow"

    def head() -> int:
        state = r0.store.load_session(on_r0.session_id, fresh=True)
        assert state is not None
        return state.head_seq

    seq = head()
    holds = len(_holds(r0))
    r0.agents.revoke("shopper")
    for attempt in range(2):
        refused = _pay(on_r1, 20 + attempt)
        assert refused["error"]["code"] == -32004, refused
        assert "signature" not in refused["error"]  # unauthenticated: unsigned
        assert head() == seq  # nothing recorded on the session
    # A hold taken before the commit saw the revocation was released, never spent.
    with r0.store.engine.connect() as conn:
        rows = conn.execute(text("SELECT status FROM reservations")).all()
    assert len(rows) <= holds + 1
    assert [str(r[0]) for r in rows][holds:] in ([], ["released"])
    # A new session is refused at once too.
    fresh = AcsClient.for_agent(r1.acs.handle, cred)
    assert fresh.hello()["error"]["code"] == -32004


def test_master_ikm_needs_the_unsafe_flag_and_marks_decisions(
    make_runtime: Callable[..., Runtime],
) -> None:
    strict = make_runtime()
    refused = AcsClient(strict.acs.handle, TEST_IKM, agent_id="anyone").hello()
    assert refused["error"]["code"] == -32004 and "signature" not in refused["error"]
    unsafe = make_runtime(unsafe_shared_ikm=True)
    shared = AcsClient(unsafe.acs.handle, TEST_IKM, agent_id="anyone")
    assert "negotiated_version" in shared.hello()["result"]
    result = shared.tool_call("read_file", {"path": "/tmp/x"})["result"]
    assert result["decision"] == "allow"
    assert result["policy_data"]["unsafe_shared_ikm"] is True
    # A registered agent on the same Warden is verified, so not marked.
    assert unsafe.agents is not None
    _, cred = unsafe.agents.add("bot-a", "alice")
    agent = AcsClient.for_agent(unsafe.acs.handle, cred)
    agent.hello()
    verified = agent.tool_call("read_file", {"path": "/tmp/x"})["result"]
    assert "unsafe_shared_ikm" not in verified.get("policy_data", {})


def test_rotation_keeps_old_sessions_verifiable(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    assert rt.agents is not None
    _, old = rt.agents.add("bot-a", "alice")
    first = AcsClient.for_agent(rt.acs.handle, old)
    first.hello()
    assert first.tool_call("read_file", {"path": "/a"})["result"]["decision"] == "allow"
    new = rt.agents.rotate("bot-a")
    assert first.tool_call("read_file", {"path": "/b"})["error"]["code"] == -32004
    second = AcsClient.for_agent(rt.acs.handle, new)
    second.hello()
    assert second.tool_call("read_file", {"path": "/c"})["result"]["decision"] == "allow"
    records = list(rt.store.iter_records())
    report = verify_records(records, ikm=TEST_IKM)
    # Each of the two sessions: a handshake-less chain of one entry, its head, its record.
    assert report.sessions >= 2 and report.signatures_checked >= 4
    # The responses really are checked under the rotated-out key: a forged one fails.
    forged = copy.deepcopy(records)
    for rec in forged:
        if rec.get("session_id") == first.session_id and rec.get("response"):
            rec["response"]["result"]["signature"]["value"] = (
                "AAAA" + rec["response"]["result"]["signature"]["value"][4:]
            )
            break
    from warden.errors import IntegrityError

    with pytest.raises(IntegrityError):
        verify_records(forged, ikm=TEST_IKM)


def test_both_signature_forms_are_accepted(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    assert rt.agents is not None
    _, cred = rt.agents.add("bot-a", "alice")
    client = AcsClient.for_agent(rt.acs.handle, cred)
    client.hello()
    # v0.1 bare form: {algorithm, value}, the key named in metadata (covered by the MAC).
    env = client.envelope(
        "steps/toolCallRequest",
        {"tool": {"name": "read_file"}, "arguments": {"path": {"value": "/x"}}},
        metadata={"key_id": cred.key_id},
    )
    del env["params"]["signature"]["key_id"]
    response = rt.acs.handle(client_bytes(env))
    assert response["result"]["decision"] == "allow", response
    assert verify_response(response, client.key)
    # Two different keys named: refused as unauthenticated.
    env = client.envelope(
        "steps/toolCallRequest",
        {"tool": {"name": "read_file"}, "arguments": {"path": {"value": "/y"}}},
        metadata={"key_id": "agk_0000000000000000"},
    )
    env = sign_request(env, client.key, cred.key_id)
    assert rt.acs.handle(client_bytes(env))["error"]["code"] == -32004


def client_bytes(env: dict[str, Any]) -> bytes:
    import json

    return json.dumps(env, separators=(",", ":")).encode()
