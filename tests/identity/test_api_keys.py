"""API keys with roles on a real SQLite store: hashing, lookup, revocation, validation."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import TEST_IKM

from warden.errors import ConfigError
from warden.identity import ApiKeys, Identity, Role, api_key_pepper, hash_token
from warden.identity.agents import AgentRegistry
from warden.store import SqlStore, open_store

PEPPER = api_key_pepper(TEST_IKM)
TOKEN_SHAPE = re.compile(r"^wdn_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "warden.db"


@pytest.fixture
def store(db: Path) -> Iterator[SqlStore]:
    s = open_store(f"sqlite:///{db}")
    yield s
    s.close()


@pytest.fixture
def keys(store: SqlStore) -> ApiKeys:
    # Agent keys belong to registered agents (issue 15): the ones these tests use.
    registry = AgentRegistry(store, bytes(range(32)))
    for agent_id in ("bot-1", "alice", "carol"):
        registry.add(agent_id, f"{agent_id}.owner")
    return ApiKeys(store, PEPPER)


def rows(db: Path) -> list[tuple[str, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT key_id, principal, role, groups, secret_hash, created_at, revoked_at "
            "FROM api_keys ORDER BY created_at"
        ).fetchall()
    finally:
        conn.close()


def test_pepper_is_hkdf_of_the_ikm() -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    expected = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"warden:api-key-hash"
    ).derive(TEST_IKM)
    assert expected == PEPPER and len(PEPPER) == 32
    assert api_key_pepper(bytes(32)) != PEPPER


def test_create_then_authenticate(keys: ApiKeys) -> None:
    identity, token = keys.create("alice@example.com", Role.APPROVER, ["finance", "ops"])
    assert TOKEN_SHAPE.match(token)
    assert token.startswith(f"wdn_{identity.key_id}_")
    assert identity == Identity(
        identity.key_id, "alice@example.com", Role.APPROVER, ("finance", "ops")
    )
    assert keys.authenticate(token) == identity


def test_role_accepts_its_string_value(keys: ApiKeys) -> None:
    identity, token = keys.create("bot-1", "agent")
    assert identity.role is Role.AGENT
    authed = keys.authenticate(token)
    assert authed is not None and authed.role is Role.AGENT and authed.groups == ()


def test_stored_hash_is_the_peppered_hmac_not_the_token(keys: ApiKeys, db: Path) -> None:
    identity, token = keys.create("alice", Role.ADMIN)
    [(key_id, principal, role, groups, secret_hash, created_at, revoked_at)] = rows(db)
    assert (key_id, principal, role, json.loads(groups)) == (identity.key_id, "alice", "admin", [])
    # The secret is everything after "wdn_<key id>_" (it may itself hold "_").
    assert token not in secret_hash and token.split("_", 2)[2] not in secret_hash
    assert secret_hash != hashlib.sha256(token.encode()).hexdigest()
    assert secret_hash == hmac.new(PEPPER, token.encode(), hashlib.sha256).hexdigest()
    assert secret_hash == hash_token(PEPPER, token)
    assert re.fullmatch(r"[0-9a-f]{64}", secret_hash)
    assert created_at.endswith("Z") and revoked_at is None


def test_a_different_pepper_authenticates_nothing(keys: ApiKeys, store: SqlStore) -> None:
    _, token = keys.create("alice", Role.AGENT)
    other = ApiKeys(store, api_key_pepper(bytes(range(1, 33))))
    assert other.authenticate(token) is None


@pytest.mark.parametrize(
    "garble",
    [
        lambda t: "",
        lambda t: t[:-1],
        lambda t: t + "A",
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),
        lambda t: t.upper(),
        lambda t: " " + t,
        lambda t: t + "\n",
        lambda t: "Bearer " + t,
        lambda t: t.replace("wdn_", "wdx_"),
        lambda t: "wdn_000000000000_" + t.split("_", 2)[2],
        lambda t: t + "é",
        lambda t: t * 20,
    ],
    ids=[
        "empty",
        "truncated",
        "extended",
        "last-char",
        "upper",
        "leading-space",
        "newline",
        "scheme",
        "prefix",
        "other-key-id",
        "non-ascii",
        "huge",
    ],
)
def test_wrong_or_garbled_tokens_are_refused(keys: ApiKeys, garble: object) -> None:
    _, token = keys.create("alice", Role.ADMIN)
    bad = garble(token)  # type: ignore[operator]
    assert bad != token
    assert keys.authenticate(bad) is None


def test_unknown_well_formed_token_is_refused(keys: ApiKeys) -> None:
    keys.create("alice", Role.ADMIN)
    from warden.identity.api_keys import new_token

    assert keys.authenticate(new_token()[1]) is None
    assert keys.authenticate(None) is None


def test_revocation_is_immediate(keys: ApiKeys, db: Path) -> None:
    identity, token = keys.create("alice", Role.APPROVER, ["ops"])
    assert keys.authenticate(token) == identity
    assert keys.revoke(identity.key_id) is True
    assert keys.authenticate(token) is None
    [row] = rows(db)
    assert row[6] is not None and row[6].endswith("Z")


def test_revocation_from_another_connection_is_seen_at_once(keys: ApiKeys, db: Path) -> None:
    """The database is the source of truth: e.g. `warden keys revoke` beside a running server."""
    identity, token = keys.create("alice", Role.AGENT)
    assert keys.authenticate(token) == identity
    other_store = open_store(f"sqlite:///{db}", migrate=False)
    try:
        assert ApiKeys(other_store, PEPPER).revoke(identity.key_id) is True
    finally:
        other_store.close()
    assert keys.authenticate(token) is None


def test_revoke_unknown_and_revoke_twice(db: Path, store: SqlStore) -> None:
    times = iter([datetime(2030, 1, 1, tzinfo=UTC) + timedelta(minutes=i) for i in range(10)])
    keys = ApiKeys(store, PEPPER, clock=lambda: next(times))
    identity, _ = keys.create("alice", Role.APPROVER)
    assert keys.revoke(identity.key_id) is True
    assert keys.revoke(identity.key_id) is True  # still revoked, first time kept
    assert keys.revoke("0123456789ab") is False
    [row] = rows(db)
    assert row[5] == "2030-01-01T00:00:00.000000Z"
    assert row[6] == "2030-01-01T00:01:00.000000Z"
    info = keys.get(identity.key_id)
    assert info is not None and not info.active and info.revoked_at == row[6]


def test_two_keys_for_one_principal(keys: ApiKeys) -> None:
    a, token_a = keys.create("alice", Role.AGENT)
    b, token_b = keys.create("alice", Role.APPROVER, ["ops"])
    assert a.key_id != b.key_id and token_a != token_b
    assert keys.authenticate(token_a) == a
    assert keys.authenticate(token_b) == b
    keys.revoke(a.key_id)
    assert keys.authenticate(token_a) is None
    assert keys.authenticate(token_b) == b


def test_list_shows_every_key_without_secrets(keys: ApiKeys) -> None:
    a, token_a = keys.create("alice", Role.AGENT)
    b, _ = keys.create("bob", Role.APPROVER, ["ops", "finance", "ops"])
    keys.revoke(a.key_id)
    infos = keys.list()
    assert [(i.key_id, i.principal, i.role, i.groups) for i in infos] == [
        (a.key_id, "alice", Role.AGENT, ()),
        (b.key_id, "bob", Role.APPROVER, ("finance", "ops")),
    ]
    assert infos[0].revoked_at is not None and infos[1].revoked_at is None
    dumped = json.dumps([i.as_dict() for i in infos])
    assert token_a not in dumped and hash_token(PEPPER, token_a) not in dumped
    assert set(infos[0].as_dict()) == {
        "key_id",
        "principal",
        "role",
        "groups",
        "created_at",
        "revoked_at",
    }


@pytest.mark.parametrize(
    "principal",
    ["", "a" * 201, "alice smith", "alice/bob", "ali\nce", "ålice", "a;b"],
)
def test_invalid_principal(keys: ApiKeys, principal: str, db: Path) -> None:
    with pytest.raises(ConfigError, match="principal"):
        keys.create(principal, Role.AGENT)
    assert rows(db) == []


def test_valid_principal_edges(keys: ApiKeys) -> None:
    for principal in ["a", "a" * 200, "svc:bot_1.v2+x@example-corp.com"]:
        identity, token = keys.create(principal, Role.APPROVER)
        assert keys.authenticate(token) == identity


@pytest.mark.parametrize("role", ["root", "Admin", "", "agents"])
def test_invalid_role(keys: ApiKeys, role: str) -> None:
    with pytest.raises(ConfigError, match="role"):
        keys.create("alice", role)


@pytest.mark.parametrize(
    "groups",
    [["ok", ""], ["g" * 65], ["has space"], ["a@b"], [f"g{i}" for i in range(33)], "ops"],
)
def test_invalid_groups(keys: ApiKeys, groups: list[str], db: Path) -> None:
    with pytest.raises(ConfigError, match="group"):
        keys.create("alice", Role.APPROVER, groups)
    assert rows(db) == []


def test_group_edges(keys: ApiKeys) -> None:
    groups = [f"g{i}" for i in range(32)] + ["x" * 64, "a.b:c-d_e"]
    with pytest.raises(ConfigError):
        keys.create("alice", Role.APPROVER, groups)
    identity, _ = keys.create("alice", Role.APPROVER, groups[:31] + ["a.b:c-d_e"])
    assert len(identity.groups) == 32


def test_pepper_must_be_32_bytes(store: SqlStore) -> None:
    with pytest.raises(ConfigError, match="pepper"):
        ApiKeys(store, b"short")


def test_register_bootstrap_token_is_idempotent(keys: ApiKeys, db: Path) -> None:
    import secrets

    bootstrap = secrets.token_urlsafe(32)
    first = keys.register(bootstrap, "bootstrap", Role.ADMIN)
    assert first.role is Role.ADMIN and re.fullmatch(r"[0-9a-f]{12}", first.key_id)
    assert keys.authenticate(bootstrap) == first
    again = keys.register(bootstrap, "someone-else", Role.AGENT, ["ops"])
    assert again == first
    assert len(rows(db)) == 1
    # registering does not resurrect a revoked key
    keys.revoke(first.key_id)
    assert keys.register(bootstrap, "bootstrap", Role.ADMIN) == first
    assert keys.authenticate(bootstrap) is None
    assert len(rows(db)) == 1


def test_register_with_key_id(keys: ApiKeys) -> None:
    import secrets

    identity = keys.register(secrets.token_urlsafe(32), "boot", Role.ADMIN, key_id="00000000b007")
    assert identity.key_id == "00000000b007"
    with pytest.raises(ConfigError, match="already used"):
        keys.register(secrets.token_urlsafe(32), "boot", Role.ADMIN, key_id="00000000b007")
    with pytest.raises(ConfigError, match="key_id"):
        keys.register(secrets.token_urlsafe(32), "boot", Role.ADMIN, key_id="NOT-HEX")


def test_register_wdn_token_keeps_its_key_id(keys: ApiKeys) -> None:
    from warden.identity.api_keys import new_token

    key_id, token = new_token()
    assert keys.register(token, "carol", Role.AGENT).key_id == key_id
    with pytest.raises(ConfigError, match="differs"):
        keys.register(new_token()[1], "carol", Role.AGENT, key_id="aaaaaaaaaaaa")


@pytest.mark.parametrize("token", ["", "short", "x" * 31, "has space" * 5, "ü" * 40])
def test_register_refuses_weak_or_malformed_tokens(keys: ApiKeys, token: str) -> None:
    with pytest.raises(ConfigError, match="token"):
        keys.register(token, "boot", Role.ADMIN)


@pytest.mark.parametrize(
    ("role", "may", "may_not"),
    [
        (Role.ADMIN, {Role.ADMIN, Role.APPROVER, Role.AGENT}, set()),
        (Role.APPROVER, {Role.APPROVER}, {Role.ADMIN, Role.AGENT}),
        (Role.AGENT, {Role.AGENT}, {Role.ADMIN, Role.APPROVER}),
    ],
)
def test_may(role: Role, may: set[Role], may_not: set[Role]) -> None:
    identity = Identity("0" * 12, "p", role, ("ops",))
    assert {r for r in Role if identity.may(r)} == may
    assert not any(identity.may(r) for r in may_not)


def test_in_group() -> None:
    approver = Identity("0" * 12, "p", Role.APPROVER, ("finance", "ops"))
    assert approver.in_group("ops") and approver.in_group("finance")
    assert not approver.in_group("legal") and not approver.in_group("")
    agent = Identity("0" * 12, "p", Role.AGENT, ())
    assert not agent.in_group("ops")
    admin = Identity("0" * 12, "p", Role.ADMIN, ())
    assert admin.in_group("ops") and admin.in_group("anything")


@pytest.mark.parametrize("text", ["not json", '{"a": 1}', '["ok", 3]', "null"])
def test_a_damaged_stored_list_is_refused_never_read_as_empty(text: str) -> None:
    from warden.errors import StoreUnavailable
    from warden.identity.api_keys import stored_strings

    with pytest.raises(StoreUnavailable, match="the agent's budgets column is damaged"):
        stored_strings(text, "the agent's budgets column")
    assert stored_strings('["a", "b"]', "x") == ("a", "b")
