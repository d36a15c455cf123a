"""Idempotency keys: one mutation per key, replayed not re-run (AdCP ``security.mdx``
§Request Safety → Idempotency, specs/adcp-spend-kla.md §1.5; the Governed Spend
``Idempotency-Key`` header, §2.5).

A key is claimed by inserting its row — the unique primary key ``(scope, key)``
decides who was first — in the *same write transaction* as the mutation it
guards; the stored response is written in that transaction too. So the claim,
the effect and the cached answer commit together or not at all, and a
concurrent duplicate waits for the writer lock and then finds the finished
row: it gets the stored response, replayed (the wait-and-replay policy of
§1.5 rule 9). An ``in_flight`` row is never visible to others on SQLite; a store
that commits the claim separately answers :class:`IdempotencyInFlight`.

Only a finished mutation is cached (a refusal releases the claim in the same
transaction, so its retry runs afresh). The key itself is a bearer secret and is
stored only as its SHA-256; the request is compared by ``request_hash``
(SHA-256 of its RFC 8785 form). Rows outlive their TTL as tombstones, so an old
key is answered :class:`IdempotencyExpired`, never silently re-run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from warden.crypto.canonical import canonical_bytes, sha256_hex
from warden.errors import WardenError

#: §1.5: "``^[A-Za-z0-9_.:-]{16,255}$``. Use a UUID v4 or a CSPRNG value."
KEY_PATTERN = r"^[A-Za-z0-9_.:-]{16,255}$"
DEFAULT_TTL_SECONDS = 86_400


class IdempotencyState(StrEnum):
    IN_FLIGHT = "in_flight"
    COMPLETED = "completed"


@dataclass(frozen=True)
class IdempotencyRecord:
    """A stored key: who claimed it for what request, and the answer once finished."""

    scope: str
    key_digest: str
    request_hash: str
    state: IdempotencyState
    created_at: datetime
    expires_at: datetime
    status_code: int | None = None
    response: str | None = None


class IdempotencyKeys(Protocol):
    """Idempotency rows, read and written inside the caller's open write transaction.

    Contract: ``claim`` inserts an ``in_flight`` row unless ``(scope, key_digest)``
    exists and says whether it did (first insert wins; never overwrites);
    ``complete`` stores the finished response on a claimed row; ``release`` deletes
    a claimed row that did not finish. All three take effect with the transaction.
    """

    def get(self, scope: str, key_digest: str) -> IdempotencyRecord | None: ...

    def claim(
        self,
        scope: str,
        key_digest: str,
        request_hash: str,
        *,
        created_at: datetime,
        expires_at: datetime,
    ) -> bool: ...

    def claim_or_get(
        self,
        scope: str,
        key_digest: str,
        request_hash: str,
        *,
        created_at: datetime,
        expires_at: datetime,
    ) -> tuple[bool, IdempotencyRecord | None]:
        """``claim`` unless the row exists: ``(True, None)`` when this call inserted it,
        else ``(False, the row as it stood)`` (``None`` when a concurrent writer's row is
        not visible yet: read it with ``get``)."""
        ...

    def complete(self, scope: str, key_digest: str, status_code: int, response: str) -> None: ...

    def release(self, scope: str, key_digest: str) -> None: ...


class IdempotencyError(WardenError):
    """An Idempotency-Key that cannot be honoured; ``gate`` is the spend ``blockedBy``."""

    gate = "idempotency:error"
    retryable = False


class InvalidIdempotencyKey(IdempotencyError):
    gate = "input:invalid_idempotency_key"
    reason = "invalid_idempotency_key"


class IdempotencyConflict(IdempotencyError):
    """The key was used for a different request (the stored response is not disclosed)."""

    gate = "idempotency:conflict"
    reason = "idempotency_conflict"


class IdempotencyExpired(IdempotencyError):
    """The key's replay window has passed: neither replayed nor re-run."""

    gate = "idempotency:expired"
    reason = "idempotency_expired"


class IdempotencyInFlight(IdempotencyError):
    """The key's first request has not finished; retry with the same key."""

    gate = "idempotency:in_flight"
    reason = "idempotency_in_flight"
    retryable = True


KEY_RULE = (
    "Idempotency-Key must be 16 to 255 characters of letters, digits and _.:- "
    "(a UUID v4 or a random value)"
)


def request_hash(request: Any) -> str:
    """Lowercase hex SHA-256 of the RFC 8785 form of the parsed request.

    Raises :class:`~warden.errors.InvalidRequest` (``jcs_domain``) for values JCS
    cannot represent (integers beyond ±(2^53 − 1), non-finite numbers).
    """
    return sha256_hex(canonical_bytes(request))


@dataclass(frozen=True)
class Stored:
    """A finished response to replay: its HTTP status and the JSON text first sent."""

    status_code: int
    body: str


class Idempotency:
    """The replay rules over an :class:`IdempotencyKeys` (TTL, clock, outcomes)."""

    def __init__(
        self, ttl_seconds: int = DEFAULT_TTL_SECONDS, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.ttl = timedelta(seconds=ttl_seconds)
        self.clock = clock or (lambda: datetime.now(UTC))

    @staticmethod
    def digest(key: str) -> str:
        return sha256_hex(key.encode("ascii"))

    def begin(self, keys: IdempotencyKeys, scope: str, key: str, req_hash: str) -> Stored | None:
        """Claim ``key`` for this request (None: run the mutation, then ``finish``/
        ``abandon``), or the stored response to replay.

        Raises :class:`IdempotencyExpired` (past the TTL, whatever the request),
        :class:`IdempotencyConflict` (a different request), :class:`IdempotencyInFlight`.
        """
        digest = self.digest(key)
        now = self.clock()
        claimed, record = keys.claim_or_get(
            scope, digest, req_hash, created_at=now, expires_at=now + self.ttl
        )
        if claimed:
            return None
        if record is None:
            record = keys.get(scope, digest)  # lost the insert to a concurrent writer
            if record is None:  # pragma: no cover - the winner's row cannot vanish in between
                raise IdempotencyInFlight("the first request with this key has not finished")
        if now >= record.expires_at:
            raise IdempotencyExpired(
                f"this Idempotency-Key was first used at {record.created_at.isoformat()} and "
                f"its replay window ({int(self.ttl.total_seconds())} s) has passed; the request "
                "was not run again"
            )
        if record.request_hash != req_hash:
            raise IdempotencyConflict(
                "this Idempotency-Key was already used for a different request"
            )
        if record.state is IdempotencyState.IN_FLIGHT or record.response is None:
            raise IdempotencyInFlight("the first request with this key has not finished")
        assert record.status_code is not None
        return Stored(record.status_code, record.response)

    def finish(self, keys: IdempotencyKeys, scope: str, key: str, status: int, body: str) -> None:
        """Store the finished response of a claimed key (in the mutation's transaction)."""
        keys.complete(scope, self.digest(key), status, body)

    def abandon(self, keys: IdempotencyKeys, scope: str, key: str) -> None:
        """Release a claimed key whose request was refused: errors are never cached."""
        keys.release(scope, self.digest(key))
