"""The agent identity registry (issue 15): who an Observed Agent is, verified by Warden.

An agent is registered with an id, an **owner** principal (the person or team accountable
for it, the maker in maker-checker), groups, and the budgets it may spend. Each agent
holds ACS key material named by a ``key_id`` (``agk_`` + 16 lowercase hex). Nothing
secret is stored per agent: the key material is derived from the master IKM,

    agent IKM = HKDF-SHA256(master IKM, salt=None, info=b"warden/agent-ikm/v1:" + key_id, L=32)

and the ACS session key is then ``HKDF(agent IKM, info=session_id)`` exactly as before
(:func:`warden.crypto.hmac_keys.derive_session_key`). Rotation issues a new ``key_id``
and revokes the previous ones; revocation of an agent revokes its keys and its ``agent``
API keys. Every change is an audit event on the Warden-authored ``agents`` chain of the
agent (``warden/agents.registered|rotated|revoked``), committed with the change.

Lookup (:meth:`AgentRegistry.resolve`) is an in-process map ``key_id → Agent``; a miss
reads the database once. A revocation made on another replica is caught by the check
every authenticated ACS write makes in its own transaction
(:meth:`warden.store.agents_sql.SqlAgents.key_active`), after which
:meth:`AgentRegistry.forget` drops the stale entry.
"""

from __future__ import annotations

import builtins
import json
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from threading import Lock
from typing import TYPE_CHECKING, Any

from warden.core.types import agent_facts

# Re-exported: the key file's format lives where the client loads it cheaply.
from warden.crypto.agent_key import (  # noqa: F401
    AGENT_IKM_BYTES,
    AgentCredential,
    check_agent_id,
    is_agent_key_id,
    load_agent_key,
)
from warden.crypto.asymmetric import PublicKey, key_from_spki_b64, spki_b64
from warden.crypto.hmac_keys import derive_agent_ikm, derive_session_key
from warden.errors import ConfigError, StoreUnavailable, WardenError, quoted
from warden.identity.api_keys import check_groups, check_principal, stored_strings
from warden.identity.key_reuse import refuse_registered, spki_der
from warden.spend.budgets import budget_id_problem
from warden.store.agents_sql import AgentKeyRow, AgentRow, SqlAgents
from warden.store.api_keys_sql import read_cursor

if TYPE_CHECKING:
    from warden.ledger.ledger import Ledger
    from warden.store.sql import SqlStore

MAX_BUDGETS = 64
#: Every hint about a revoked agent says this (decision 253): the id is spent for good.
REVOKED_HINT = (
    "a revoked agent id is never reused: register the agent under a new id "
    "(warden agents add NEW_ID --owner P)"
)


class AgentNotFound(WardenError):
    """No such agent (or, to a caller who may not see it, one that is not theirs)."""

    reason = "agent_not_found"


class AgentExists(WardenError):
    """An agent with this id is already registered (revoked ids are never reused)."""

    reason = "agent_exists"


class AgentRevoked(WardenError):
    """The agent is revoked: it gets no new keys."""

    reason = "agent_revoked"


def undefined_budget_warning(budget: str) -> str:
    """The warning for an agent listing ``budget`` while no budget has that id."""
    return (
        f"budget {budget!r} is not defined (yet): the agent cannot spend it until the "
        "budgets file (warden serve --budgets) defines it"
    )


def check_budgets(budgets: Iterable[str]) -> tuple[str, ...]:
    """Budget ids sorted and deduplicated; :class:`ConfigError` for a bad id or too many."""
    if isinstance(budgets, str):
        raise ConfigError("budgets must be a list of budget ids, not one string")
    out: set[str] = set()
    for b in budgets:
        problem = budget_id_problem(b)
        if problem is not None:
            raise ConfigError(problem)
        out.add(b)
    if len(out) > MAX_BUDGETS:
        raise ConfigError(f"an agent may list at most {MAX_BUDGETS} budgets, got {len(out)}")
    return tuple(sorted(out))


@dataclass(frozen=True)
class Agent:
    """A registered agent. Times are RFC 3339 UTC; ``revoked_at`` None while active."""

    agent_id: str
    owner: str
    groups: tuple[str, ...]
    budgets: tuple[str, ...]
    created_at: str
    revoked_at: str | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def facts(self) -> dict[str, Any]:
        """The CEL ``agent`` facts: ``{id, owner, groups, budgets, verified: true}``."""
        return agent_facts(self.agent_id, self.owner, self.groups, self.budgets)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{agent_id, owner, groups, budgets, created_at, revoked_at, active}``."""
        return {
            "agent_id": self.agent_id,
            "owner": self.owner,
            "groups": list(self.groups),
            "budgets": list(self.budgets),
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
            "active": self.active,
        }


@dataclass(frozen=True)
class AgentKey:
    """One ACS key id of an agent (never its material)."""

    key_id: str
    agent_id: str
    created_at: str
    revoked_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "agent_id": self.agent_id,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
        }


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _agent(row: AgentRow) -> Agent:
    agent_id, owner, groups, budgets, created_at, revoked_at = row
    return Agent(
        agent_id,
        owner,
        stored_strings(groups, "an agent row's groups column"),
        stored_strings(budgets, "an agent row's budgets column"),
        created_at,
        revoked_at,
    )


def _key(row: AgentKeyRow) -> AgentKey:
    return AgentKey(*row)


class AgentRegistry:
    """Agents and their keys in the store; derives key material from ``master_ikm``.

    ``ledger`` (optional) records every change on the agent's Warden-authored chain in
    the same transaction. Thread-safe. Store failures raise
    :class:`~warden.errors.StoreUnavailable`.
    """

    def __init__(
        self,
        store: SqlStore,
        master_ikm: bytes,
        ledger: Ledger | None = None,
        clock: Callable[[], str] = _now,
    ) -> None:
        self._store = store
        self._ikm = master_ikm
        self._clock = clock
        self._chain = None
        if ledger is not None:
            from warden.ledger.warden_chain import WardenChain

            self._chain = WardenChain(ledger, "agents")
        self._cache: dict[str, Agent] = {}
        self._public: dict[str, tuple[str, PublicKey] | None] = {}
        self._lock = Lock()

    # -- reads ---------------------------------------------------------------------

    def get(self, agent_id: str) -> Agent | None:
        """One agent (active or revoked) by id, or None."""
        with read_cursor(self._store) as cur:
            row = SqlAgents(cur, self._store._q).agent(agent_id)
        return _agent(row) if row is not None else None

    def list(self) -> builtins.list[Agent]:
        """Every agent, active and revoked, by id."""
        with read_cursor(self._store) as cur:
            rows = SqlAgents(cur, self._store._q).agents()
        return [_agent(r) for r in rows]

    def keys(self, agent_id: str) -> builtins.list[AgentKey]:
        """The ACS keys of ``agent_id``, oldest first (ids and times only)."""
        with read_cursor(self._store) as cur:
            rows = SqlAgents(cur, self._store._q).keys_of(agent_id)
        return [_key(r) for r in rows]

    def active(self, agent_id: str) -> Agent | None:
        """The agent if registered and active, else None (a read per call)."""
        agent = self.get(agent_id)
        return agent if agent is not None and agent.active else None

    def resolve(self, key_id: str) -> Agent | None:
        """The active agent holding ACS key ``key_id``, or None (unknown, malformed or
        revoked). Cached: a hit costs no query; a miss reads the database once."""
        with self._lock:
            hit = self._cache.get(key_id)
        if hit is not None:
            return hit
        if not is_agent_key_id(key_id):
            return None
        with read_cursor(self._store) as cur:
            table = SqlAgents(cur, self._store._q)
            key = table.key(key_id)
            row = table.agent(key[1]) if key is not None and key[3] is None else None
        if row is None:
            return None
        agent = _agent(row)
        if not agent.active:
            return None
        with self._lock:
            self._cache[key_id] = agent
        return agent

    def revoked_signer(self, key_id: str, session_id: str, proves: Callable[[bytes], bool]) -> bool:
        """True when a request proves (``proves(session key)``: its HMAC verifies) that its
        signer holds the material of ``key_id`` (derived from the master IKM, whether or
        not the key exists) and only then, by a database read, that ``key_id`` is a
        registered key revoked itself or with its agent (decision 1039). A caller without
        the key fails the first check as it would for any id, so it learns nothing about
        ``key_id``: to it a revoked key reads as an unknown one. ACS-Crypto keys: False."""
        if not is_agent_key_id(key_id):
            return False
        if not proves(derive_session_key(derive_agent_ikm(self._ikm, key_id), session_id)):
            return False
        with read_cursor(self._store) as cur:
            table = SqlAgents(cur, self._store._q)
            return table.key(key_id) is not None and not table.key_active(key_id)

    def forget(self, key_id: str) -> None:
        """Drop ``key_id`` from the cache (its revocation was seen in a transaction)."""
        with self._lock:
            self._cache.pop(key_id, None)

    def credential(self, key_id: str) -> AgentCredential:
        """The credential of an active key (for the operator: the demo agent's file,
        tests). :class:`AgentNotFound` if the key is unknown or revoked."""
        agent = self.resolve(key_id)
        if agent is None:
            raise AgentNotFound(f"no active agent key {key_id!r}")
        return AgentCredential(agent.agent_id, key_id, derive_agent_ikm(self._ikm, key_id))

    def session_ikm(self, key_id: str) -> bytes:
        """The agent IKM of ``key_id`` (derived; no lookup)."""
        return derive_agent_ikm(self._ikm, key_id)

    # -- changes ---------------------------------------------------------------------

    def add(
        self,
        agent_id: str,
        owner: str,
        groups: Iterable[str] = (),
        budgets: Iterable[str] = (),
        *,
        by: str = "cli",
        key_id: str | None = None,
    ) -> tuple[Agent, AgentCredential]:
        """Register an agent and issue its first key: ``(agent, credential)``.

        ``key_id`` (``agk_`` + 16 hex, unused) fixes the first key's id, for reproducible
        set-ups; by default it is random. Raises :class:`ConfigError` for an invalid id,
        owner, group, budget or key id and :class:`AgentExists` if the id is taken (also
        by a revoked agent).
        """
        agent, key_id, _ = self._add(agent_id, owner, groups, budgets, by, key_id, None, True)
        assert key_id is not None
        return agent, AgentCredential(agent_id, key_id, derive_agent_ikm(self._ikm, key_id))

    def add_with_public_key(
        self,
        agent_id: str,
        owner: str,
        public_key: tuple[str, PublicKey],
        groups: Iterable[str] = (),
        budgets: Iterable[str] = (),
        *,
        hmac: bool = False,
        by: str = "cli",
    ) -> tuple[Agent, str, AgentCredential | None]:
        """Register an agent whose key is ``public_key`` = ``(algorithm, key)`` (ACS-Crypto,
        issue 21) instead of an HMAC key, or beside one with ``hmac``: ``(agent, public
        key_id, HMAC credential or None)``. Raises as :meth:`add`, and
        :class:`~warden.identity.key_reuse.KeyAlreadyRegistered` (a :class:`ConfigError`;
        nothing is written) if the key is registered already, to anyone, revoked or not."""
        agent, hmac_key, public_id = self._add(
            agent_id, owner, groups, budgets, by, None, public_key, hmac
        )
        assert public_id is not None
        cred = (
            AgentCredential(agent_id, hmac_key, derive_agent_ikm(self._ikm, hmac_key))
            if hmac_key is not None
            else None
        )
        return agent, public_id, cred

    def add_public_key(
        self, agent_id: str, public_key: tuple[str, PublicKey], *, by: str = "cli"
    ) -> str:
        """Register ``public_key`` = ``(algorithm, key)`` for an active agent, beside its
        other keys (none is revoked): its new key id. Raises :class:`AgentNotFound` or
        :class:`AgentRevoked`, and :class:`~warden.identity.key_reuse.KeyAlreadyRegistered`
        (a :class:`ConfigError`) if the key is registered already, to anyone."""
        now = self._clock()
        with self._store.transaction() as tx:
            table = tx.agents
            _active_row(table, agent_id)
            self._refuse_reuse(tx, public_key)
            key_id = self._new_key(table, agent_id, now, public_key)
            self._audit(
                tx,
                agent_id,
                "key_added",
                {"agent_id": agent_id, "key_id": key_id, "algorithm": public_key[0], "by": by},
            )
        return key_id

    def _add(
        self,
        agent_id: str,
        owner: str,
        groups: Iterable[str],
        budgets: Iterable[str],
        by: str,
        key_id: str | None,
        public_key: tuple[str, PublicKey] | None,
        hmac: bool,
    ) -> tuple[Agent, str | None, str | None]:
        """Register the agent with an HMAC key (if ``hmac``) and a public key (if given):
        ``(agent, HMAC key_id, public key_id)``."""
        if key_id is not None and not is_agent_key_id(key_id):
            raise ConfigError(f"invalid agent key id {quoted(key_id)}: agk_ and 16 lowercase hex")
        agent_id = check_agent_id(agent_id)
        owner = check_principal(owner)
        group_tuple = check_groups(groups)
        budget_tuple = check_budgets(budgets)
        now = self._clock()
        public_id: str | None = None
        with self._store.transaction() as tx:
            table = tx.agents
            if public_key is not None:
                self._refuse_reuse(tx, public_key)
            if not table.insert_agent(
                agent_id,
                owner,
                json.dumps(list(group_tuple)),
                json.dumps(list(budget_tuple)),
                now,
            ):
                existing = table.agent(agent_id)
                if existing is not None and existing[5] is not None:
                    raise AgentExists(f"agent {agent_id!r} was revoked; {REVOKED_HINT}")
                raise AgentExists(f"agent {agent_id!r} is already registered")
            if not hmac:
                key_id = None
            elif key_id is None:
                key_id = self._new_key(table, agent_id, now)
            elif table.key(key_id) is not None:
                raise ConfigError(f"agent key id {key_id} is already used")
            else:
                table.insert_key(key_id, agent_id, now)
            detail: dict[str, Any] = {"key_id": key_id}
            if public_key is not None:
                public_id = self._new_key(table, agent_id, now, public_key)
                detail["public_key"] = {"key_id": public_id, "algorithm": public_key[0]}
            agent = Agent(agent_id, owner, group_tuple, budget_tuple, now)
            self._audit(tx, agent_id, "registered", {**agent.as_dict(), **detail, "by": by})
        return agent, key_id, public_id

    def public_key(self, key_id: str) -> tuple[str, PublicKey] | None:
        """``(algorithm, public key)`` of asymmetric key ``key_id``; None for an HMAC or
        unknown key. Cached (keys never change; revocation is :meth:`resolve`'s)."""
        with self._lock:
            if key_id in self._public:
                return self._public[key_id]
        with read_cursor(self._store) as cur:
            stored = SqlAgents(cur, self._store._q).public_key(key_id)
        found = (stored[0], key_from_spki_b64(stored[1])) if stored is not None else None
        with self._lock:
            self._public[key_id] = found
        return found

    def rotate(self, agent_id: str, *, by: str = "cli") -> AgentCredential:
        """Issue a new key and revoke the agent's previous keys at once. Sessions signed
        under an old key stay verifiable offline (the material is derived, not stored).
        Raises :class:`AgentNotFound` or :class:`AgentRevoked`."""
        now = self._clock()
        with self._store.transaction() as tx:
            table = tx.agents
            _active_row(table, agent_id)
            old = [k[0] for k in table.keys_of(agent_id) if k[3] is None]
            key_id = self._new_key(table, agent_id, now)
            table.revoke_keys(agent_id, now, keep=key_id)
            self._audit(
                tx,
                agent_id,
                "rotated",
                {"agent_id": agent_id, "key_id": key_id, "revoked_keys": old, "by": by},
            )
        self._drop(old)
        return AgentCredential(agent_id, key_id, derive_agent_ikm(self._ikm, key_id))

    def revoke(self, agent_id: str, *, by: str = "cli") -> Agent:
        """Revoke the agent, its ACS keys and its ``agent`` API keys, from now on, on
        every replica. Idempotent (the first ``revoked_at`` is kept). Raises
        :class:`AgentNotFound`."""
        now = self._clock()
        with self._store.transaction() as tx:
            table = tx.agents
            row = table.agent(agent_id)
            if row is None:
                raise AgentNotFound(f"no agent {agent_id!r}")
            keys = [k[0] for k in table.keys_of(agent_id) if k[3] is None]
            table.revoke_agent(agent_id, now)
            api_keys = table.revoke_api_keys(agent_id, now)
            # Chained when anything changed: the agent, or agent API keys created for
            # the principal after it was revoked (the log explains every revocation).
            if row[5] is None or api_keys:
                self._audit(
                    tx,
                    agent_id,
                    "revoked",
                    {"agent_id": agent_id, "keys": keys, "api_keys": api_keys, "by": by},
                )
            row = table.agent(agent_id)
        self._drop(keys)
        assert row is not None
        return _agent(row)

    def undefined_budgets(self, budgets: Iterable[str]) -> tuple[str, ...]:
        """Those of ``budgets`` no budget is defined for yet, sorted. Registering them is
        allowed (the budgets file may define them later), so callers warn, not refuse."""
        known = {b.id for b in self._store.budgets()}
        return tuple(sorted({b for b in budgets if b not in known}))

    # -- pieces ----------------------------------------------------------------------

    def _new_key(
        self,
        table: SqlAgents,
        agent_id: str,
        now: str,
        public_key: tuple[str, PublicKey] | None = None,
    ) -> str:
        stored = (public_key[0], spki_b64(public_key[1])) if public_key is not None else None
        for _ in range(8):
            key_id = "agk_" + secrets.token_hex(8)
            if table.key(key_id) is None:
                table.insert_key(key_id, agent_id, now, stored)
                return key_id
        raise StoreUnavailable("could not allocate an unused agent key id")  # pragma: no cover

    def _refuse_reuse(self, tx: Any, public_key: tuple[str, PublicKey]) -> None:
        refuse_registered(
            tx.cursor,
            self._store._q,
            spki_der(public_key[1]),
            postgres=not self._store._qmark,
        )

    def _drop(self, key_ids: Iterable[str]) -> None:
        with self._lock:
            for key_id in key_ids:
                self._cache.pop(key_id, None)

    def _audit(self, tx: Any, agent_id: str, event: str, detail: dict[str, Any]) -> None:
        if self._chain is not None:
            self._chain.append(tx, agent_id, event, f"{event}:{secrets.token_hex(8)}", detail)


def _active_row(table: Any, agent_id: str) -> Any:
    """The agent's row in ``table`` (inside the caller's transaction), if it exists and is
    not revoked; :class:`AgentNotFound` or :class:`AgentRevoked` otherwise."""
    row = table.agent(agent_id)
    if row is None:
        raise AgentNotFound(f"no agent {agent_id!r}")
    if row[5] is not None:
        raise AgentRevoked(f"agent {agent_id!r} is revoked; {REVOKED_HINT}")
    return row
