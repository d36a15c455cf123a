"""The durable parts of AdCP RFC 9421 on both store backends: the replay cache shared by
replicas (two stores on one database), its atomicity under a race, expiry and the
per-key count; agents' signing keys (registration rules, revocation, audit)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TEST_IKM
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from warden.adcp.rfc9421.keys import public_jwk
from warden.crypto.hmac_keys import SessionKeys
from warden.errors import ConfigError
from warden.identity.agents import AgentRegistry, AgentRevoked
from warden.identity.key_reuse import KeyAlreadyRegistered
from warden.identity.signing_keys import (
    AgentSigningKeys,
    SigningKeyNotFound,
    check_jwk,
    load_public_key_file,
)
from warden.ledger.ledger import Ledger
from warden.store import open_store
from warden.store.rfc9421_sql import SqlNonces
from warden.store.sql import SqlStore


@pytest.fixture
def stores(database_url: str) -> Iterator[tuple[SqlStore, SqlStore]]:
    """Two stores on one database: two replicas."""
    a = open_store(database_url)
    b = open_store(database_url, migrate=False)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def remember(store: SqlStore, keyid: str, nonce: str, until: int, now: int) -> bool:
    with store.transaction() as tx:
        return SqlNonces(tx.cursor, store._q).remember(keyid, nonce, until, now)


def test_a_nonce_spent_on_one_replica_is_a_replay_on_another(
    stores: tuple[SqlStore, SqlStore],
) -> None:
    a, b = stores
    assert remember(a, "k1", "n1", 1000, 500)
    assert not remember(b, "k1", "n1", 1000, 600)
    assert remember(b, "k2", "n1", 1000, 600)  # the pair is the key, not the nonce alone
    # Expired entries do not block, are purged, and are not counted.
    assert remember(b, "k1", "n1", 2000, 1001)
    with a.transaction() as tx:
        nonces = SqlNonces(tx.cursor, a._q)
        assert nonces.live("k1", 1001, 10) == 1
        assert nonces.live("k2", 1001, 10) == 0
        assert nonces.purge(1001) == 1
    with a.transaction() as tx:
        assert SqlNonces(tx.cursor, a._q).live("k1", 1001, 10) == 1


def test_a_raced_nonce_is_accepted_once(stores: tuple[SqlStore, SqlStore]) -> None:
    a, b = stores
    results: list[bool] = []
    barrier = threading.Barrier(6)

    def race(store: SqlStore) -> None:
        barrier.wait()
        results.append(remember(store, "k", "same", 1000, 0))

    threads = [threading.Thread(target=race, args=((a, b)[i % 2],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 5 + [True]


def test_live_counts_stop_at_the_limit(stores: tuple[SqlStore, SqlStore]) -> None:
    a, _ = stores
    for i in range(5):
        assert remember(a, "k", f"n{i}", 1000, 0)
    with a.transaction() as tx:
        assert SqlNonces(tx.cursor, a._q).live("k", 0, 3) == 3
        assert SqlNonces(tx.cursor, a._q).live("k", 0, 100) == 5


def _ed25519_jwk(kid: str = "k-ed") -> dict[str, object]:
    jwk = public_jwk(Ed25519PrivateKey.generate(), kid)
    return {k: jwk[k] for k in ("kty", "crv", "x", "kid")}


def test_signing_keys_register_revoke_and_audit(database_url: str) -> None:
    store = open_store(database_url)
    try:
        agents = AgentRegistry(store, TEST_IKM)
        agents.add("buyer", "buyer.owner")
        ledger = Ledger(store, SessionKeys(TEST_IKM), "warden")
        keys = AgentSigningKeys(store, ledger)
        added = keys.add("buyer", _ed25519_jwk())
        assert added.jwk["adcp_use"] == "request-signing"
        assert added.jwk["key_ops"] == ["verify"] and added.jwk["use"] == "sig"
        assert [k.kid for k in keys.of("buyer")] == ["k-ed"]
        with pytest.raises(ConfigError, match="already registered"):
            keys.add("buyer", _ed25519_jwk())  # same kid, another key
        with pytest.raises(SigningKeyNotFound):
            keys.add("nobody", _ed25519_jwk("k2"))
        revoked = keys.revoke("k-ed")
        assert revoked.revoked_at is not None
        assert keys.revoke("k-ed").revoked_at == revoked.revoked_at  # idempotent
        with pytest.raises(SigningKeyNotFound):
            keys.revoke("missing")
        events = [
            r["entry"]["step_type"]
            for r in store.iter_records()
            if r["kind"] == "entry" and "signing_key" in str(r["entry"]["step_type"])
        ]
        assert events == ["warden/agents.signing_key_added", "warden/agents.signing_key_revoked"]
        agents.revoke("buyer")
        with pytest.raises(AgentRevoked):
            keys.add("buyer", _ed25519_jwk("k3"))
    finally:
        store.close()


def test_only_usable_public_keys_are_registered(tmp_path: Path) -> None:
    private = Ed25519PrivateKey.generate()
    jwk = public_jwk(private, "k")
    with pytest.raises(ConfigError, match="private"):
        check_jwk({**jwk, "d": "AAAA"})
    with pytest.raises(ConfigError, match="kid"):
        check_jwk({k: v for k, v in jwk.items() if k != "kid"})
    with pytest.raises(ConfigError, match="adcp_use"):
        check_jwk({**jwk, "adcp_use": "governance-signing"})
    with pytest.raises(ConfigError, match="unusable"):
        check_jwk({**jwk, "x": "AAAA"})
    with pytest.raises(ConfigError, match="unusable"):
        check_jwk({**jwk, "kty": "RSA"})
    # PEM (with --kid), a JWK file and a one-key JWKS all load.
    pem = tmp_path / "k.pem"
    pem.write_bytes(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(ConfigError, match="--kid"):
        load_public_key_file(pem)
    assert load_public_key_file(pem, "p256")["crv"] == "P-256"
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"keys": [jwk]}))
    assert load_public_key_file(one)["x"] == jwk["x"]
    two = tmp_path / "two.json"
    two.write_text(json.dumps({"keys": [jwk, jwk]}))
    with pytest.raises(ConfigError, match="2 keys"):
        load_public_key_file(two)


def test_one_public_key_is_registered_once_whatever_its_kid_or_agent(database_url: str) -> None:
    """A key registered to one agent is refused for another agent, under another kid of
    the same agent, after its revocation, as a PEM, and as an ACS-Crypto key; nothing is
    written by a refusal (decision 620)."""
    store = open_store(database_url)
    try:
        agents = AgentRegistry(store, TEST_IKM)
        agents.add("buyer-bot", "alice")
        agents.add("demo-agent", "bob")
        keys = AgentSigningKeys(store, Ledger(store, SessionKeys(TEST_IKM), "warden"))
        private = Ed25519PrivateKey.generate()
        keys.add("buyer-bot", public_jwk(private, "buyer-bot-2026"))
        for agent_id, kid in (("demo-agent", "other"), ("buyer-bot", "buyer-bot-2")):
            with pytest.raises(KeyAlreadyRegistered, match="already registered"):
                keys.add(agent_id, public_jwk(private, kid))
        keys.revoke("buyer-bot-2026")
        with pytest.raises(KeyAlreadyRegistered):
            keys.add("demo-agent", public_jwk(private, "other"))
        assert keys.get("other") is None and keys.of("demo-agent") == []
        # The same key across the two registries (both take P-256).
        p256 = ec.generate_private_key(ec.SECP256R1())
        agents.add_public_key("buyer-bot", ("ECDSA-P256", p256.public_key()))
        with pytest.raises(KeyAlreadyRegistered):
            keys.add("demo-agent", public_jwk(p256, "p256"))
        with pytest.raises(KeyAlreadyRegistered):
            agents.add_with_public_key("pq-bot2", "bob", ("ECDSA-P256", p256.public_key()))
        assert agents.get("pq-bot2") is None
        fresh = ec.generate_private_key(ec.SECP256R1())
        keys.add("demo-agent", public_jwk(fresh, "fresh"))
        with pytest.raises(KeyAlreadyRegistered):
            agents.add_public_key("buyer-bot", ("ECDSA-P256", fresh.public_key()))
    finally:
        store.close()


def test_a_revoked_agents_signing_keys_show_as_revoked(database_url: str) -> None:
    store = open_store(database_url)
    try:
        agents = AgentRegistry(store, TEST_IKM)
        agents.add("buyer", "alice")
        keys = AgentSigningKeys(store)
        keys.add("buyer", _ed25519_jwk("k1"))
        keys.add("buyer", _ed25519_jwk("k2"))
        keys.revoke("k1")
        first = keys.get("k1")
        assert first is not None and first.revoked_at is not None
        agent = agents.revoke("buyer")
        shown = {k.kid: k for k in keys.of("buyer")}
        assert shown["k2"].revoked_at == agent.revoked_at and shown["k2"].revoked_with_agent
        assert shown["k1"].revoked_at == first.revoked_at and not shown["k1"].revoked_with_agent
        assert shown["k2"].as_dict()["revoked_with_agent"] is True
    finally:
        store.close()


def test_a_jwk_refused_for_adcp_names_its_file(tmp_path: Path) -> None:
    akp = tmp_path / "pq.jwk"
    akp.write_text(json.dumps({"kty": "AKP", "alg": "ML-DSA-65", "pub": "AAAA", "kid": "pq"}))
    with pytest.raises(ConfigError, match="pq.jwk.*AKP.*add-key"):
        load_public_key_file(akp)
    bad = tmp_path / "bad.jwk"
    bad.write_text(json.dumps({"kty": "RSA", "n": "AAAA", "e": "AQAB", "kid": "r"}))
    with pytest.raises(ConfigError, match="bad.jwk.*unusable"):
        load_public_key_file(bad)
