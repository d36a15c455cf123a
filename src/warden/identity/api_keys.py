"""API keys with roles: who is calling the REST API and the approval desk.

A key is a bearer token ``wdn_<key_id>_<secret>``: ``key_id`` is 12 lowercase
hex characters (public, names the key in lists and audit), ``secret`` is 32
random bytes in URL-safe base64 without padding. Each key belongs to one
principal, has one :class:`Role` and a set of groups (approver groups of the
desk). A token is shown once, at creation; the database keeps only its hash.

**Why HMAC-SHA256 with a pepper.** The stored hash is
``HMAC-SHA256(pepper, UTF-8(token))`` in lowercase hex, where the 32-byte pepper
is derived from Warden's master secret (:func:`api_key_pepper`) and is never
stored in the database.

* Not argon2/scrypt/bcrypt: those make *guessing* expensive, which matters for
  low-entropy passwords. A token carries 256 random bits, so nobody can guess
  it however fast the hash is; a slow KDF would buy nothing and cost ~50 ms of
  CPU on every request. A fast, deterministic hash also lets the key be looked
  up by its hash (no per-row salt, no scan verifying every row).
* Not bare SHA-256: with a plain hash, anyone holding a copy of the database
  (a backup, a replica, a stolen file) could test candidate tokens offline, e.g.
  tokens leaked elsewhere or from a weak generator, and confirm which are live.
  Keyed with a pepper that lives beside the IKM and not in the database, the
  table alone is useless for that.

Authentication computes the hash, selects the row by it, compares the stored
and computed hashes in constant time, and refuses revoked keys. There is no
in-process cache: every call reads the database (a small table), so a
revocation from any process, e.g. ``warden keys revoke`` while the server runs,
takes effect on the next request; it also ends the key's approval-desk sessions, and
a vote the key cast on a task not yet decided stops counting.

Other tokens can be registered as keys too (:meth:`ApiKeys.register`), which is
how the bootstrap ``<data-dir>/api.token`` becomes an admin key.
"""

from __future__ import annotations

import builtins
import hmac
import json
import re
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from hashlib import sha256
from typing import TYPE_CHECKING, Any, Protocol

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from warden.core.types import NO_AGENT, Principal, PrincipalKind, agent_facts
from warden.errors import ConfigError, StoreUnavailable, WardenError, quoted
from warden.store.agents_sql import AgentRow, SqlAgents
from warden.store.api_keys_sql import LIVE_KEY, ApiKeyRow, SqlApiKeys, read_cursor
from warden.store.desk_sessions_sql import SqlDeskSessions
from warden.store.driver_errors import is_integrity

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

TOKEN_PREFIX = "wdn_"
PEPPER_BYTES = 32
PEPPER_INFO = b"warden:api-key-hash"
#: Longest token :meth:`ApiKeys.authenticate` will hash; longer ones are refused unread.
MAX_TOKEN_CHARS = 512
#: Shortest token :meth:`ApiKeys.register` accepts (the bootstrap token has 43).
MIN_REGISTERED_TOKEN_CHARS = 32
MAX_GROUPS = 32

_KEY_ID = re.compile(r"^[0-9a-f]{12}$")
_WDN_TOKEN = re.compile(r"^wdn_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
#: RFC 6750 ``b64token``: what any bearer token may contain.
_B64TOKEN = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")
_PRINCIPAL = re.compile(r"^[A-Za-z0-9_.:@+-]{1,200}$")
_GROUP = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class Role(StrEnum):
    """What a key may do: ``agent`` calls the API, ``approver`` decides tasks,
    ``admin`` may do everything."""

    AGENT = "agent"
    APPROVER = "approver"
    ADMIN = "admin"


@dataclass(frozen=True)
class Identity:
    """An authenticated caller: the key, its principal, role and groups.

    An ``agent`` key belongs to a registered agent (issue 15): its principal is the agent
    id, ``groups`` include the agent's registered groups, ``budgets`` are the budgets the
    registry lets it spend and ``owner`` is the principal accountable for it (the maker
    in maker-checker); all three are empty/None for other roles.
    """

    key_id: str
    principal: str
    role: Role
    groups: tuple[str, ...]
    budgets: tuple[str, ...] = ()
    owner: str | None = None

    def facts(self) -> dict[str, Any]:
        """CEL ``agent`` for a request this key makes: the registered agent's verified
        facts for an agent key, the unverified empty facts for any other role."""
        if self.role is not Role.AGENT:
            return dict(NO_AGENT)
        return agent_facts(self.principal, self.owner or "", self.groups, self.budgets)

    def as_principal(self) -> Principal:
        """This key as the decision pipeline's verified caller (stage 1)."""
        kind: PrincipalKind = "agent" if self.role is Role.AGENT else "api_key"
        return Principal(kind, self.principal, self.key_id, self.facts())

    def may(self, role: Role) -> bool:
        """True if this identity may act as ``role``: admin may everything,
        approver only approver, agent only agent."""
        return self.role is Role.ADMIN or self.role is role

    def in_group(self, group: str) -> bool:
        """True if this identity belongs to ``group`` (an admin is in every group)."""
        return self.role is Role.ADMIN or group in self.groups


@dataclass(frozen=True)
class ApiKeyInfo:
    """One key as listed: never the token nor its hash.

    ``created_at`` and ``revoked_at`` are RFC 3339 UTC text (``revoked_at`` None
    while the key is active).
    """

    key_id: str
    principal: str
    role: Role
    groups: tuple[str, ...]
    created_at: str
    revoked_at: str | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{key_id, principal, role, groups: [..], created_at, revoked_at}``."""
        return {
            "key_id": self.key_id,
            "principal": self.principal,
            "role": self.role.value,
            "groups": list(self.groups),
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
        }


def api_key_pepper(ikm: bytes) -> bytes:
    """The 32-byte pepper of API key hashes: HKDF-SHA256(ikm, no salt,
    info=``b"warden:api-key-hash"``)."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=PEPPER_BYTES, salt=None, info=PEPPER_INFO)
    return hkdf.derive(ikm)


def hash_token(pepper: bytes, token: str) -> str:
    """Lowercase hex HMAC-SHA256 of the token's UTF-8 bytes under ``pepper``."""
    return hmac.new(pepper, token.encode("utf-8"), sha256).hexdigest()


def new_token() -> tuple[str, str]:
    """A fresh ``(key_id, token)``: ``wdn_<12 hex>_<43 URL-safe base64 chars>``."""
    key_id = secrets.token_hex(6)
    return key_id, f"{TOKEN_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"


def parse_role(role: Role | str) -> Role:
    """``role`` as a :class:`Role`; :class:`ConfigError` naming the valid roles otherwise."""
    if isinstance(role, Role):
        return role
    try:
        return Role(role)
    except ValueError:
        valid = ", ".join(r.value for r in Role)
        raise ConfigError(f"unknown role {quoted(role)}; use one of: {valid}") from None


def check_principal(principal: str) -> str:
    """``principal`` unchanged if it is 1..200 of ``A-Z a-z 0-9 _ . : @ + -``;
    :class:`ConfigError` otherwise."""
    if not isinstance(principal, str) or not _PRINCIPAL.match(principal):
        raise ConfigError(
            f"invalid principal {quoted(principal)}: 1 to 200 characters of letters, digits "
            "and _ . : @ + -"
        )
    return principal


def check_groups(groups: Iterable[str]) -> tuple[str, ...]:
    """Groups sorted and deduplicated; :class:`ConfigError` if one is not 1..64 of
    ``A-Z a-z 0-9 _ . : -`` or there are more than 32."""
    if isinstance(groups, str):
        raise ConfigError("groups must be a list of group names, not one string")
    out: set[str] = set()
    for g in groups:
        if not isinstance(g, str) or not _GROUP.match(g):
            raise ConfigError(
                f"invalid group {quoted(g)}: 1 to 64 characters of letters, digits and _ . : -"
            )
        out.add(g)
    if len(out) > MAX_GROUPS:
        raise ConfigError(f"a key may be in at most {MAX_GROUPS} groups, got {len(out)}")
    return tuple(sorted(out))


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _rfc3339(t: datetime) -> str:
    if t.tzinfo is None:
        raise ConfigError("the API key clock must return timezone-aware datetimes")
    return t.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def stored_strings(text: str, column: str) -> tuple[str, ...]:
    """A stored JSON list of strings (groups, budgets) as a tuple.

    Raises :class:`StoreUnavailable` naming ``column`` (e.g. "API key X's groups column")
    when the text is not such a list: a damaged row is never read as an empty one.
    """
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise StoreUnavailable(f"{column} is damaged") from exc
    if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
        raise StoreUnavailable(f"{column} is damaged")
    return tuple(value)


def _role_from_row(text: str, key_id: str) -> Role:
    try:
        return Role(text)
    except ValueError as exc:
        raise StoreUnavailable(f"API key {key_id} has an unknown role {text!r}") from exc


def _info(row: ApiKeyRow) -> ApiKeyInfo:
    key_id, principal, role, groups, created_at, revoked_at = row
    return ApiKeyInfo(
        key_id=key_id,
        principal=principal,
        role=_role_from_row(role, key_id),
        groups=stored_strings(groups, f"API key {key_id}'s groups column"),
        created_at=created_at,
        revoked_at=revoked_at,
    )


def _require_agent(cur: Any, q: Callable[[str], str], principal: str) -> AgentRow:
    """The agent row of ``principal``; ConfigError unless it is a registered, active
    agent (an ``agent`` key belongs to one; :mod:`warden.identity.agents`)."""
    row = SqlAgents(cur, q).agent(principal)
    if row is None or row[5] is not None:
        from warden.identity.agents import REVOKED_HINT

        raise ConfigError(
            f"an agent key belongs to a registered agent; {principal!r} is "
            + (
                f"revoked; {REVOKED_HINT}"
                if row is not None
                else "not registered (warden agents add ID --owner P)"
            )
        )
    return row


def _as_agent(who: Identity, agent: AgentRow) -> Identity:
    """``who`` (an agent key) with its agent's registered groups, budgets and owner."""
    return replace(
        who,
        groups=tuple(
            sorted(set(who.groups) | set(stored_strings(agent[2], "the agent's groups column")))
        ),
        budgets=stored_strings(agent[3], "the agent's budgets column"),
        owner=agent[1],
    )


def _identity(row: ApiKeyRow) -> Identity:
    info = _info(row)
    return Identity(info.key_id, info.principal, info.role, info.groups)


#: How long :meth:`ApiKeys.authenticate_remembered` remembers a key, and how many.
REMEMBER_S = 60.0
REMEMBER_MAX = 4096


def _well_formed(token: str | None) -> bool:
    return (
        isinstance(token, str)
        and bool(token)
        and len(token) <= MAX_TOKEN_CHARS
        and _B64TOKEN.match(token) is not None
    )


class LiveCheckTx(Protocol):
    """The write transaction a remembered key is checked in."""

    def prefetch_read(
        self, sql: str, params: tuple[Any, ...], receive: Callable[[Any], object]
    ) -> bool: ...

    def read_one(self, sql: str, params: tuple[Any, ...]) -> Any: ...


class KeyStillLive:
    """The check that a key answered from memory
    (:meth:`ApiKeys.authenticate_remembered`) is still unrevoked, with its agent, made in
    the request's own write transaction: read with its ``BEGIN`` (:meth:`prefetch`, no
    round trip of its own) and confirmed before the request changes or answers anything
    (:meth:`confirm`), so a key revoked on any replica changes nothing from then on, as
    with a key read from the database (issue 15)."""

    def __init__(self, keys: ApiKeys, digest: str, key_id: str) -> None:
        self._keys = keys
        self._digest = digest
        self._key_id = key_id
        self._row: Any = None
        self._read = False

    def _receive(self, row: Any) -> None:
        self._row, self._read = row, True

    def prefetch(self, tx: LiveCheckTx) -> None:
        """Send the check with ``tx``'s ``BEGIN`` (if it has not begun). What an earlier
        transaction read is forgotten: a transaction run again (decision 800) reads it
        again."""
        self._row, self._read = None, False
        tx.prefetch_read(LIVE_KEY, (self._key_id,), self._receive)

    def confirm(self, tx: LiveCheckTx) -> bool:
        """True if the key and its agent are still unrevoked (read in ``tx``, now if the
        prefetch was not sent); False forgets the key."""
        if not self._read:
            self._receive(tx.read_one(LIVE_KEY, (self._key_id,)))
        if self._row is None:
            self._keys.forget(self._digest)
            return False
        return True

    # A route that cannot confirm between two statements (AdCP check_governance, whose
    # first statement is its handler's) refuses as the check's answer arrives instead.

    @property
    def confirmed(self) -> bool:
        """True once the check was read and found the key live."""
        return self._read and self._row is not None

    def guard(self, tx: LiveCheckTx) -> None:
        """Send the check with ``tx``'s ``BEGIN`` and raise :class:`KeyRevoked` from the
        first statement that carries it, before its caller sees that statement's result,
        if the key or its agent was revoked (decision 810)."""
        tx.prefetch_read(LIVE_KEY, (self._key_id,), self._refuse_revoked)

    def _refuse_revoked(self, row: Any) -> None:
        self._receive(row)
        if row is None:
            self._keys.forget(self._digest)
            raise KeyRevoked(f"API key {self._key_id} was revoked")

    def settle(self, tx: LiveCheckTx) -> None:
        """:class:`KeyRevoked` unless the key is live (read in ``tx`` now if no statement
        carried :meth:`guard`'s check)."""
        if not self.confirm(tx):
            raise KeyRevoked(f"API key {self._key_id} was revoked")

    def recheck(self) -> bool:
        """The check read on its own, outside any transaction (a refusal answered before
        the route's transaction); False forgets the key."""
        store = self._keys._store  # noqa: SLF001 - the keys' own store
        with read_cursor(store) as cur:
            cur.execute(store._q(LIVE_KEY), (self._key_id,))  # noqa: SLF001
            self._receive(cur.fetchone())
        if self._row is None:
            self._keys.forget(self._digest)
            return False
        return True


class KeyRevoked(WardenError):
    """A key answered from memory was revoked (or its agent was) since: the request
    changes nothing and is answered as an unknown key is (:meth:`KeyStillLive.guard`)."""

    reason = "key_revoked"


class ApiKeys:
    """API keys in the store's ``api_keys`` table, hashed under ``pepper``.

    ``store`` is an open :class:`~warden.store.sql.SqlStore`; ``pepper`` is 32
    bytes, normally :func:`api_key_pepper` of the IKM (a different pepper makes
    every stored key unusable); ``clock`` returns aware datetimes for
    ``created_at``/``revoked_at``. Store failures raise
    :class:`~warden.errors.StoreUnavailable`.
    """

    def __init__(
        self,
        store: SqlStore,
        pepper: bytes,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        if not isinstance(pepper, bytes) or len(pepper) != PEPPER_BYTES:
            raise ConfigError(f"the API key pepper must be {PEPPER_BYTES} bytes")
        self._store = store
        self._pepper = pepper
        self._clock = clock
        #: token digest → (identity, monotonic time it is remembered until).
        self._remembered: dict[str, tuple[Identity, float]] = {}

    @staticmethod
    def _audit(tx: Any, event: str, detail: dict[str, Any]) -> None:
        """Every key created, registered or revoked is a ``keys.<event>`` leaf of the
        transparency log in the same transaction (issue 17)."""
        tx.log_event(f"keys.{event}", detail)

    def _hash(self, token: str) -> str:
        return hash_token(self._pepper, token)

    def create(
        self, principal: str, role: Role | str, groups: Iterable[str] = ()
    ) -> tuple[Identity, str]:
        """A new key for ``principal``: ``(identity, token)``.

        The token is returned this once; only its HMAC is stored. Raises
        :class:`ConfigError` for an invalid principal, role or groups.
        """
        principal = check_principal(principal)
        role = parse_role(role)
        group_tuple = check_groups(groups)
        created_at = _rfc3339(self._clock())
        with self._store.transaction() as tx:
            cur = tx.cursor
            table = SqlApiKeys(cur, self._store._q)
            agent = _require_agent(cur, self._store._q, principal) if role is Role.AGENT else None
            for _ in range(8):
                key_id, token = new_token()
                if not table.key_id_taken(key_id):
                    break
            else:  # pragma: no cover - 48 random bits colliding eight times
                raise StoreUnavailable("could not allocate an unused API key id")
            table.insert(
                key_id=key_id,
                principal=principal,
                role=role.value,
                groups_json=json.dumps(list(group_tuple)),
                secret_hash=self._hash(token),
                created_at=created_at,
            )
            self._audit(
                tx,
                "created",
                _key_detail(key_id, principal, role, group_tuple, self._hash(token)),
            )
        who = Identity(key_id, principal, role, group_tuple)
        return (_as_agent(who, agent) if agent is not None else who), token

    def register(
        self,
        token: str,
        principal: str,
        role: Role | str,
        groups: Iterable[str] = (),
        key_id: str | None = None,
    ) -> Identity:
        """Store an existing token as a key (e.g. the bootstrap ``api.token`` as admin).

        Idempotent: if the token is already registered, its stored identity is
        returned unchanged (whatever ``principal``/``role``/``groups`` say, and a
        revoked key stays revoked). ``key_id`` (12 lowercase hex) defaults to the
        one inside a ``wdn_`` token, else a random one. Raises :class:`ConfigError`
        for a token that is not an RFC 6750 b64token of 32..512 characters, an
        invalid principal/role/groups/key_id, a ``key_id`` that contradicts the
        token's, or a ``key_id`` already used by another token.
        """
        if (
            not isinstance(token, str)
            or not MIN_REGISTERED_TOKEN_CHARS <= len(token) <= MAX_TOKEN_CHARS
            or not _B64TOKEN.match(token)
        ):
            raise ConfigError(
                f"a registered API token must be {MIN_REGISTERED_TOKEN_CHARS} to "
                f"{MAX_TOKEN_CHARS} characters of letters, digits and -._~+/"
            )
        principal = check_principal(principal)
        role = parse_role(role)
        group_tuple = check_groups(groups)
        embedded = _WDN_TOKEN.match(token)
        if key_id is not None and not _KEY_ID.match(key_id):
            raise ConfigError(f"invalid key_id {key_id!r}: 12 lowercase hex characters")
        if embedded is not None and key_id is not None and key_id != embedded.group(1):
            raise ConfigError(f"key_id {key_id!r} differs from the token's {embedded.group(1)!r}")
        created_at = _rfc3339(self._clock())
        digest = self._hash(token)
        try:
            return self._register(
                digest, principal, role, group_tuple, key_id, embedded, created_at
            )
        except StoreUnavailable as exc:
            if exc.__cause__ is None or not is_integrity(exc.__cause__):
                raise
            # Another replica registered the same token at the same moment (replicas
            # starting together on one database): the retry finds its row.
            return self._register(
                digest, principal, role, group_tuple, key_id, embedded, created_at
            )

    def _register(
        self,
        digest: str,
        principal: str,
        role: Role,
        group_tuple: tuple[str, ...],
        key_id: str | None,
        embedded: re.Match[str] | None,
        created_at: str,
    ) -> Identity:
        with self._store.transaction() as tx:
            cur = tx.cursor
            table = SqlApiKeys(cur, self._store._q)
            found = table.by_hash(digest)
            if found is not None:
                return _identity(found[0])
            if key_id is None and embedded is not None:
                key_id = embedded.group(1)
            if key_id is None:
                for _ in range(8):
                    key_id = secrets.token_hex(6)
                    if not table.key_id_taken(key_id):
                        break
                else:  # pragma: no cover
                    raise StoreUnavailable("could not allocate an unused API key id")
            elif table.key_id_taken(key_id):
                raise ConfigError(f"API key id {key_id} is already used by another token")
            if role is Role.AGENT:
                _require_agent(cur, self._store._q, principal)
            table.insert(
                key_id=key_id,
                principal=principal,
                role=role.value,
                groups_json=json.dumps(list(group_tuple)),
                secret_hash=digest,
                created_at=created_at,
            )
            self._audit(tx, "registered", _key_detail(key_id, principal, role, group_tuple, digest))
        return Identity(key_id, principal, role, group_tuple)

    def authenticate(self, token: str | None) -> Identity | None:
        """The identity of an active key, or None for an empty, malformed, unknown or
        revoked token. Reads the database every time (revocation is immediate).

        Raises :class:`StoreUnavailable` only if the store cannot be read.
        """
        if not _well_formed(token):
            return None
        assert token is not None
        return self._authenticate(token, self._hash(token))

    def authenticate_remembered(
        self, token: str | None
    ) -> tuple[Identity | None, KeyStillLive | None]:
        """:meth:`authenticate` for a route that checks the key again in its own write
        transaction (decision 702): on PostgreSQL a key this process authenticated from
        the database less than :data:`REMEMBER_S` seconds ago is answered from memory,
        with the :class:`KeyStillLive` check the route must pass before it changes or
        answers anything; otherwise the database is read (no check: None). Unknown,
        malformed and revoked tokens are never remembered."""
        if not self._store.row_locks or not _well_formed(token):
            return self.authenticate(token), None
        assert token is not None
        digest = self._hash(token)
        hit = self._remembered.get(digest)
        if hit is not None and hit[1] > time.monotonic():
            return hit[0], KeyStillLive(self, digest, hit[0].key_id)
        who = self._authenticate(token, digest)
        if who is not None:
            if len(self._remembered) >= REMEMBER_MAX:
                self._remembered.clear()
            self._remembered[digest] = (who, time.monotonic() + REMEMBER_S)
        return who, None

    def forget(self, digest: str) -> None:
        """Drop a remembered key (its check found it revoked)."""
        self._remembered.pop(digest, None)

    def _authenticate(self, token: str, digest: str) -> Identity | None:
        with read_cursor(self._store) as cur:
            # The key and (an agent key's) agent in one read: one round trip.
            joined = SqlApiKeys(cur, self._store._q).by_hash_with_agent(digest)
        if joined is None:
            return None
        row, stored, agent = joined
        if not hmac.compare_digest(stored.encode("ascii", "replace"), digest.encode("ascii")):
            return None
        if row[5] is not None:  # revoked_at
            return None
        embedded = _WDN_TOKEN.match(token)
        if embedded is not None and embedded.group(1) != row[0]:
            return None  # a wdn_ token only ever names its own key
        who = _identity(row)
        if who.role is not Role.AGENT:
            return who
        if agent is None or agent[5] is not None:
            # An agent key belongs to a registered, active agent (issue 15); one whose
            # agent is unregistered (a key made before the upgrade) or revoked is refused.
            return None
        return _as_agent(who, agent)

    def get(self, key_id: str) -> ApiKeyInfo | None:
        """One key by id (active or revoked), or None."""
        with read_cursor(self._store) as cur:
            row = SqlApiKeys(cur, self._store._q).by_key_id(key_id)
        return _info(row) if row is not None else None

    def list(self) -> builtins.list[ApiKeyInfo]:
        """Every key, active and revoked, oldest first (never a token or hash)."""
        with read_cursor(self._store) as cur:
            rows = SqlApiKeys(cur, self._store._q).all()
        return [_info(r) for r in rows]

    def has_active_approver(self, group: str) -> bool:
        """True if an active (unrevoked) key with the approver role is in ``group``.
        Admins are in every group and do not count: a group only admins can decide
        has nobody assigned to it."""
        return any(k.active and k.role is Role.APPROVER and group in k.groups for k in self.list())

    def revoke(self, key_id: str) -> bool:
        """Revoke ``key_id`` from now on: True if the key exists (an already revoked
        key keeps its first ``revoked_at``), False if there is no such key
        (:meth:`revoke_key` says which)."""
        return self.revoke_key(key_id) is not None

    def revoke_key(self, key_id: str) -> tuple[ApiKeyInfo, bool] | None:
        """Revoke ``key_id`` from now on: the key afterwards and whether this call revoked
        it, or None if there is no such key. Its approval-desk sessions end in the same
        transaction (:mod:`warden.identity.desk_sessions`). A key already revoked is left
        as it is — its first ``revoked_at``, no second audit event (decision 771)."""
        revoked_at = _rfc3339(self._clock())
        self._remembered.clear()
        with self._store.transaction() as tx:
            cur = tx.cursor
            table = SqlApiKeys(cur, self._store._q)
            newly = table.revoke(key_id, revoked_at)
            if newly:
                SqlDeskSessions(cur, self._store._q).delete_for_key(key_id)
                self._audit(tx, "revoked", {"key_id": key_id, "revoked_at": revoked_at})
            row = table.by_key_id(key_id)
        return (_info(row), newly) if row is not None else None


def _key_detail(
    key_id: str, principal: str, role: Role, groups: tuple[str, ...], secret_hash: str
) -> dict[str, Any]:
    """What a key's audit event records: never the token; a digest of its stored hash, so
    a row whose credential was swapped disagrees with the log (:mod:`warden.tlog.state`)."""
    return {
        "key_id": key_id,
        "principal": principal,
        "role": role.value,
        "groups": list(groups),
        "secret": secret_digest(secret_hash),
    }


def secret_digest(secret_hash: str) -> str:
    """SHA-256 (hex) of a stored key hash: what the log records of a credential."""
    return sha256(secret_hash.encode("ascii")).hexdigest()
