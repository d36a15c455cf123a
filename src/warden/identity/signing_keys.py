"""Agents' public keys for AdCP RFC 9421 signed requests (issue 21 item 3).

A registered agent (:mod:`warden.identity.agents`) may hold any number of public JWKs
(Ed25519 or P-256), each named by its ``kid`` — the ``keyid`` its signatures carry.
A signed AdCP request whose ``keyid`` resolves here authenticates as that agent
(:mod:`warden.adcp.request_signing`). Keys are stored as registered (public members
only) with ``adcp_use: request-signing``, ``use: sig`` and ``key_ops: [verify]``
filled in when absent; a key is refused if it has a private member, an unsupported
type, or a point that does not decode.

Revoking a key (or its agent) makes its signatures fail with
``request_signature_key_revoked`` from the next request on, on every replica (each
verification reads the row). Every change is an audit event on the agent's ``agents``
chain (``warden/agents.signing_key_added|signing_key_revoked``), committed with it.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from warden.adcp.rfc9421.keys import KeyUnusable, public_jwk, public_key
from warden.errors import ConfigError, WardenError
from warden.identity.agents import REVOKED_HINT, AgentRevoked
from warden.identity.key_reuse import refuse_registered, spki_der
from warden.store.agents_sql import SqlAgents
from warden.store.api_keys_sql import read_cursor
from warden.store.rfc9421_sql import SigningKeyRow, SqlSigningKeys

if TYPE_CHECKING:
    from warden.ledger.ledger import Ledger
    from warden.store.sql import SqlStore

_KID = re.compile(r"^[\x21-\x7e]{1,200}$")
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "k"})


class SigningKeyNotFound(WardenError):
    """No such signing key (or agent)."""

    reason = "signing_key_not_found"


@dataclass(frozen=True)
class SigningKey:
    """One registered JWK; ``revoked_at`` None while usable. ``revoked_with_agent``:
    the key was revoked by revoking its agent (``revoked_at`` is then the agent's)."""

    kid: str
    agent_id: str
    jwk: dict[str, Any]
    created_at: str
    revoked_at: str | None = None
    revoked_with_agent: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "kid": self.kid,
            "agent_id": self.agent_id,
            "jwk": self.jwk,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
            "revoked_with_agent": self.revoked_with_agent,
        }


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _key(row: SigningKeyRow, agent_revoked_at: str | None = None) -> SigningKey:
    """``agent_revoked_at``: when the key's agent was revoked. A key is revoked with its
    agent (:meth:`warden.store.agents_sql.SqlAgents.revoke_agent` stamps it; rows
    written before that did are shown revoked here all the same)."""
    kid, agent_id, jwk, created_at, revoked_at = row
    with_agent = agent_revoked_at is not None and revoked_at in (None, agent_revoked_at)
    if with_agent:
        revoked_at = agent_revoked_at
    return SigningKey(kid, agent_id, json.loads(jwk), created_at, revoked_at, with_agent)


def check_jwk(jwk: Mapping[str, Any], kid: str | None = None) -> dict[str, Any]:
    """The JWK to store: public members only, ``kid`` (``kid`` argument, else the
    JWK's), ``adcp_use``/``use``/``key_ops`` defaulted. Raises :class:`ConfigError`
    for a private key, a missing or malformed kid, or an unusable key."""
    if not isinstance(jwk, Mapping):
        raise ConfigError("a signing key must be one JWK object")
    private = sorted(_PRIVATE_MEMBERS & set(jwk))
    if private:
        raise ConfigError(
            f"the JWK holds private members ({', '.join(private)}); give the public key"
        )
    out = {k: v for k, v in jwk.items() if not str(k).startswith("_") and k != "$comment"}
    if kid is not None:
        out["kid"] = kid
    if not isinstance(out.get("kid"), str) or not _KID.match(out["kid"]):
        raise ConfigError("the key needs a kid: 1-200 printable ASCII characters (--kid)")
    out.setdefault("adcp_use", "request-signing")
    out.setdefault("use", "sig")
    out.setdefault("key_ops", ["verify"])
    if out["adcp_use"] != "request-signing":
        raise ConfigError(f"adcp_use must be request-signing, not {out['adcp_use']!r}")
    try:
        public_key(out)
    except KeyUnusable as exc:
        raise ConfigError(f"unusable signing key: {exc}") from None
    return out


def load_public_key_file(path: Path, kid: str | None = None) -> dict[str, Any]:
    """A JWK from ``path``: a JWK object, a JWKS holding exactly one key, or a PEM
    public key (Ed25519 or P-256; ``kid`` is then required). Raises :class:`ConfigError`."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            pem = serialization.load_pem_public_key(data)
        except ValueError as exc:
            raise ConfigError(f"{path} is not a PEM public key: {exc}") from None
        if not isinstance(pem, Ed25519PublicKey | ec.EllipticCurvePublicKey) or (
            isinstance(pem, ec.EllipticCurvePublicKey) and pem.curve.name != "secp256r1"
        ):
            raise ConfigError(f"{path}: only Ed25519 and P-256 keys sign AdCP requests")
        if kid is None:
            raise ConfigError("a PEM key has no kid: give one with --kid")
        return check_jwk(public_jwk(pem, kid))
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ConfigError(f"{path} is neither PEM nor JSON: {exc}") from None
    if isinstance(doc, dict) and isinstance(doc.get("keys"), list):
        if len(doc["keys"]) != 1:
            raise ConfigError(f"{path} is a JWKS with {len(doc['keys'])} keys; give one")
        doc = doc["keys"][0]
    if isinstance(doc, Mapping) and doc.get("kty") == "AKP":
        raise ConfigError(
            f"{path}: an AKP (ML-DSA) key signs ACS-Crypto requests, not AdCP ones; AdCP "
            "request signing takes Ed25519 or P-256 (register ML-DSA keys with "
            "`warden agents add-key AGENT --public-key FILE`)"
        )
    try:
        return check_jwk(doc, kid)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


class AgentSigningKeys:
    """The ``adcp_signing_keys`` registry. ``ledger`` (optional) records every change on
    the agent's ``agents`` chain in the same transaction. Store failures raise
    :class:`~warden.errors.StoreUnavailable`."""

    def __init__(
        self, store: SqlStore, ledger: Ledger | None = None, clock: Callable[[], str] = _now
    ) -> None:
        self._store = store
        self._clock = clock
        self._chain = None
        if ledger is not None:
            from warden.ledger.warden_chain import WardenChain

            self._chain = WardenChain(ledger, "agents")

    def get(self, kid: str) -> SigningKey | None:
        with read_cursor(self._store) as cur:
            row = SqlSigningKeys(cur, self._store._q).key(kid)
        return _key(row) if row is not None else None

    def of(self, agent_id: str) -> list[SigningKey]:
        """The keys of ``agent_id``, oldest first; all revoked if the agent is."""
        with read_cursor(self._store) as cur:
            rows = SqlSigningKeys(cur, self._store._q).keys_of(agent_id)
            agent = SqlAgents(cur, self._store._q).agent(agent_id)
        agent_revoked_at = agent[5] if agent is not None else None
        return [_key(r, agent_revoked_at) for r in rows]

    def add(self, agent_id: str, jwk: Mapping[str, Any], *, by: str = "cli") -> SigningKey:
        """Register ``jwk`` (see :func:`check_jwk`) for the active agent ``agent_id``.
        Raises :class:`SigningKeyNotFound` for an unknown agent,
        :class:`~warden.identity.agents.AgentRevoked` for a revoked one, and
        :class:`ConfigError` for a bad key, a kid already used (by anyone) or key
        material already registered (:class:`~warden.identity.key_reuse.KeyAlreadyRegistered`:
        to any agent, under any kid, revoked or not). Nothing is written on a refusal."""
        stored = check_jwk(jwk)
        der = spki_der(public_key(stored))
        now = self._clock()
        with self._store.transaction() as tx:
            agent = tx.agents.agent(agent_id)
            if agent is None:
                raise SigningKeyNotFound(f"no agent {agent_id!r}")
            if agent[5] is not None:
                raise AgentRevoked(f"agent {agent_id!r} is revoked; {REVOKED_HINT}")
            table = SqlSigningKeys(tx.cursor, self._store._q)
            if table.key(stored["kid"]) is not None:
                raise ConfigError(f"signing key id {stored['kid']!r} is already registered")
            refuse_registered(tx.cursor, self._store._q, der, postgres=not self._store._qmark)
            if not table.insert(stored["kid"], agent_id, json.dumps(stored), now):
                raise ConfigError(f"signing key id {stored['kid']!r} is already registered")
            self._audit(
                tx, agent_id, "signing_key_added", {"agent_id": agent_id, "jwk": stored, "by": by}
            )
        return SigningKey(stored["kid"], agent_id, stored, now)

    def revoke(self, kid: str, *, by: str = "cli") -> SigningKey:
        """Revoke ``kid``; idempotent. Raises :class:`SigningKeyNotFound`."""
        now = self._clock()
        with self._store.transaction() as tx:
            table = SqlSigningKeys(tx.cursor, self._store._q)
            row = table.key(kid)
            if row is None:
                raise SigningKeyNotFound(f"no signing key {kid!r}")
            table.revoke(kid, now)
            if row[4] is None:
                self._audit(
                    tx, row[1], "signing_key_revoked", {"agent_id": row[1], "kid": kid, "by": by}
                )
            row = table.key(kid)
        assert row is not None
        return _key(row)

    def _audit(self, tx: Any, agent_id: str, event: str, detail: dict[str, Any]) -> None:
        if self._chain is not None:
            self._chain.append(tx, agent_id, event, f"{event}:{secrets.token_hex(8)}", detail)
