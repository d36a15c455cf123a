"""Evidence bundles of one execution, from the stored KLA records.

Shared by ``GET /v1/executions/{execution_id}/evidence`` and the offline
``warden export-evidence``: the processed records of the execution in the order they
were written (records held for review are left out: they were never processed, and a
verifier would report them as ``unsupported_schema_version``), the head hash of the
execution's Warden audit chain (``chain_head``), the public keys that verify the
records (Warden's signing key, and the key of each signed action request from the
verifier-held registry it was checked against), and a manifest signed with Warden's key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from warden.crypto.asymmetric import MlDsaSigner
from warden.errors import IntegrityError, IntegrityReason, WardenError
from warden.kla.keys import KeyRegistry, TrustedKey, jwk_for
from warden.kla.records import RecordKind, SealedRecord, bundle_manifest, write_bundle
from warden.ledger.verify import verify_records
from warden.ledger.warden_chain import chain_session_id
from warden.store.kla_sql import KlaRow, SqlKlaRecords, request_id_of

#: The Warden-authored chain kind every action request's records are chained on.
CHAIN_KIND = "kla"
PROCESSED = "processed"
HELD = "held_for_review"


#: What the chains of executions that share their execution_id with another principal's
#: are named under (decision 930): never equal to a plain chain's name.
OWNED_SPACE = "kla/owned"

#: Whether the plain chain of an execution_id exists, whether the principal's own chain
#: of it does, and whether the principal has records in it (decision 931).
_PLACEMENT = (
    "SELECT EXISTS (SELECT 1 FROM sessions WHERE session_id = ?), "
    "EXISTS (SELECT 1 FROM sessions WHERE session_id = ?), "
    "EXISTS (SELECT 1 FROM kla_records WHERE execution_id = ? AND principal = ?)"
)


def execution_session_id(execution_id: str) -> str:
    """The plain audit-chain session of an execution_id: the chain of the first principal
    that used it (and of every principal that used it before decision 930)."""
    return chain_session_id(CHAIN_KIND, execution_id)


def owned_name(principal: str, execution_id: str) -> str:
    """The name of ``principal``'s own chain of ``execution_id`` (JSON: no separator can
    make two pairs one name)."""
    return json.dumps([principal, execution_id])


def owned_session_id(principal: str, execution_id: str) -> str:
    """The audit-chain session of ``principal``'s records of an ``execution_id`` whose
    plain chain is another principal's (decision 930)."""
    return chain_session_id(OWNED_SPACE, owned_name(principal, execution_id))


@dataclass(frozen=True)
class Placement:
    """The chain one principal's records of one execution go on: an execution is the pair
    (principal, execution_id) (decisions 930-931). ``owned``: the principal's own chain
    (:func:`owned_session_id`), else the plain one (the review chain ``""`` without an
    execution_id)."""

    principal: str
    execution_id: str | None
    owned: bool = False

    @property
    def name(self) -> str:
        if self.owned and self.execution_id is not None:
            return owned_name(self.principal, self.execution_id)
        return self.execution_id or ""

    @property
    def session_id(self) -> str:
        if self.owned and self.execution_id is not None:
            return owned_session_id(self.principal, self.execution_id)
        return execution_session_id(self.execution_id or "")

    @property
    def task_scope(self) -> str:
        """The desk scope of this execution's approval tasks: ``kla:<execution_id>`` on
        the plain chain (as before, decision 935), ``kla/owned:<name>`` on an owned one.
        Two principals may send the same action request id (decision 970), and the desk
        finds a task by (scope, action hash): one principal's task or grant must never
        answer another's request (decision 972)."""
        if self.owned and self.execution_id is not None:
            return f"{OWNED_SPACE}:{self.name}"
        return f"kla:{self.execution_id or ''}"


class ReadsOne(Protocol):
    def prefetch_read(
        self, sql: str, params: tuple[Any, ...], receive: Callable[[Any], object]
    ) -> bool: ...

    def read_one(self, sql: str, params: tuple[Any, ...]) -> Any: ...


class Placing:
    """Where ``principal``'s records of ``execution_id`` are chained, read in the
    operation's transaction before it writes any (decision 931): the plain chain when
    it does not exist yet, or when the principal has records of the execution and no
    chain of its own (its records are on the plain chain); else its own chain. So the
    first principal keeps the plain chain, every other one starts its own, and all of
    one principal's records of an execution are on one chain."""

    def __init__(self, principal: str, execution_id: str | None) -> None:
        self.principal = principal
        self.execution_id = execution_id
        self._row: Any = None
        self._read = False

    def _params(self, execution_id: str) -> tuple[str, ...]:
        return (
            execution_session_id(execution_id),
            owned_session_id(self.principal, execution_id),
            execution_id,
            self.principal,
        )

    def _receive(self, row: Any) -> None:
        self._row, self._read = row, True

    def prefetch(self, tx: ReadsOne) -> None:
        """Send the read with ``tx``'s ``BEGIN`` (PostgreSQL, if it has not begun)."""
        self._row, self._read = None, False
        if self.execution_id is not None:
            tx.prefetch_read(_PLACEMENT, self._params(self.execution_id), self._receive)

    def placement(self, tx: ReadsOne) -> Placement:
        """The chain (read now unless :meth:`prefetch` read it)."""
        execution = self.execution_id
        if execution is None:
            return Placement(self.principal, None)
        if not self._read:
            self._receive(tx.read_one(_PLACEMENT, self._params(execution)))
        plain, own, mine = (bool(v) for v in self._row)
        return Placement(self.principal, execution, plain and (own or not mine))


@dataclass(frozen=True)
class Signer:
    """Warden's Ed25519 signing key and its kid, and (issue 21) its ML-DSA-65 key,
    published beside it; ``pq_records`` makes the ML-DSA key sign records too."""

    key: Ed25519PrivateKey
    kid: str
    mldsa: MlDsaSigner | None = None
    pq_records: bool = False
    ed25519_records: bool = True

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self.key.public_key()

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        """Every public key Warden signs with (``GET /v1/keys``): the Ed25519 key (RFC
        8037 OKP) first, then the ML-DSA-65 key (RFC 9964 AKP)."""
        keys = [jwk_for(self.kid, self.public_key)]
        if self.mldsa is not None:
            keys.append(self.mldsa.jwk())
        return {"keys": keys}


class ChainHeads(Protocol):
    def session_head(self, session_id: str) -> tuple[int, str | None] | None: ...


class EvidenceTx(ChainHeads, ReadsOne, Protocol):
    @property
    def kla(self) -> SqlKlaRecords: ...


class EvidenceStore(Protocol):
    def transaction(self) -> AbstractContextManager[EvidenceTx]: ...

    def iter_records(self, session_id: str | None = None) -> Iterator[dict[str, Any]]: ...


def chain_view(detail: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a ``warden/kla.*`` chain entry says of its record: kind, digest, status,
    principal, the Ed25519 signature and kid, the other signatures, and the request id
    its record carries (what the row must be filed under)."""
    return (
        detail.get("kind"),
        detail.get("digest"),
        detail.get("status"),
        detail.get("principal"),
        detail.get("signature"),
        detail.get("kid"),
        detail.get("signatures"),
        request_id_of(detail.get("record")),
    )


def row_view(row: KlaRow) -> tuple[Any, ...]:
    """:func:`chain_view` of a stored row, its digest recomputed from the stored record:
    a record edited with or without its ``digest`` column differs from the chain."""
    digest = row.recomputed_digest()
    if digest != row.digest:
        digest = f"{row.digest} (the stored record hashes to {digest})"
    return (
        row.kind,
        digest,
        row.status,
        row.principal,
        row.signature,
        row.kid,
        json.loads(row.signatures) if row.signatures else None,
        row.filed_under(),
    )


_VIEW = (
    "kind",
    "digest",
    "status",
    "principal",
    "signature",
    "kid",
    "signatures",
    "action_request_id",
)


def view_difference(chained: tuple[Any, ...], stored: tuple[Any, ...]) -> str:
    """The first member where a stored row and its chain entry differ, as a phrase."""
    for name, have, want in zip(_VIEW, stored, chained, strict=True):
        if have != want:
            return f"its {name} is {have!r:.160}, the chain says {want!r:.160}"
    return "it agrees with the chain"  # pragma: no cover - only called on a difference


def check_against_chain(
    store: EvidenceStore, execution_id: str, rows: list[KlaRow], at: Placement | None = None
) -> None:
    """The records table says what the execution's audit chain says: every chained record
    is stored, each with the digest its stored record hashes to (recomputed, not the
    ``digest`` column alone) and the kind, status, principal and signatures the chain
    carries, and nothing else is. The chain is verified first (hashes and links). Raises
    :class:`IntegrityError` otherwise: an export never signs records the chain does not
    vouch for. ``at``: the principal's chain (``rows`` are that principal's); on a plain
    chain only the entries of that principal are its execution's (decision 932)."""
    sid = at.session_id if at is not None else execution_session_id(execution_id)
    records = list(store.iter_records(sid))
    verify_records(records)  # raises on a broken link or hash
    chained = {
        e["entry"]["kla"]["record_id"]: chain_view(e["entry"]["kla"])
        for e in records
        if e.get("kind") == "entry"
        and isinstance(e["entry"].get("kla"), dict)
        and (at is None or at.owned or e["entry"]["kla"].get("principal") == at.principal)
    }
    stored = {r.record_id: row_view(r) for r in rows}
    if chained == stored:
        return
    for record_id in sorted(set(chained) | set(stored)):
        if record_id not in stored:
            why = "is on the chain but not stored (deleted)"
        elif record_id not in chained:
            why = "is stored but not on the chain"
        elif stored[record_id] != chained[record_id]:
            why = view_difference(chained[record_id], stored[record_id])
        else:
            continue
        raise IntegrityError(
            f"the stored records of execution {execution_id!r:.80} differ from its audit chain "
            f"(first at record {record_id!r:.80}: {why}); run `warden verify`",
            reason=IntegrityReason.RECORD_HASH_MISMATCH,
            session_id=sid,
        )


@dataclass(frozen=True)
class Evidence:
    """One execution's bundle, ready to serve or write."""

    execution_id: str
    sealed: list[SealedRecord]
    public_keys: dict[str, TrustedKey]
    chain_head: str | None
    held_for_review: list[str]

    def manifest(self, signer: Signer, created_at: str) -> dict[str, Any]:
        return bundle_manifest(
            self.sealed,
            execution_id=self.execution_id,
            chain_head=self.chain_head,
            created_at=created_at,
            manifest_signer=(signer.kid, signer.key),
        )

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        return KeyRegistry(self.public_keys).to_jwks()

    def write(self, directory: Path, signer: Signer, created_at: str) -> Path:
        return write_bundle(
            directory,
            self.sealed,
            public_keys=self.public_keys,
            execution_id=self.execution_id,
            chain_head=self.chain_head,
            created_at=created_at,
            manifest_signer=(signer.kid, signer.key),
        )


def sealed_of(row: KlaRow) -> SealedRecord:
    """A stored row as a bundle line (kind, record, digest, signature, kid)."""
    extra = tuple(json.loads(row.signatures)) if row.signatures else ()
    return SealedRecord(
        RecordKind(row.kind), row.value(), row.digest, row.signature, row.kid, extra
    )


def collect(
    execution_id: str,
    rows: Iterable[KlaRow],
    heads: ChainHeads,
    signer: Signer,
    registry: Mapping[str, Ed25519PublicKey] | KeyRegistry | None,
    session_id: str | None = None,
) -> Evidence:
    """The evidence of ``execution_id`` from its stored ``rows`` (already filtered to what
    the caller may see). A signed action request's key is included when the registry
    still holds its kid (else the line's signature will not verify from the bundle)."""
    sealed: list[SealedRecord] = []
    held: list[str] = []
    keys: dict[str, TrustedKey] = {signer.kid: signer.public_key}
    if signer.mldsa is not None and signer.pq_records:
        keys[signer.mldsa.kid] = signer.mldsa.public_key
    for row in rows:
        if row.status != PROCESSED:
            held.append(row.record_id)
            continue
        sealed.append(sealed_of(row))
        if row.kid is not None and row.kid not in keys and registry is not None:
            if isinstance(registry, KeyRegistry):
                if row.kid in registry:
                    keys[row.kid] = registry.get_key(row.kid)
            elif row.kid in registry:
                keys[row.kid] = registry[row.kid]
    head = heads.session_head(session_id or execution_session_id(execution_id))
    return Evidence(execution_id, sealed, keys, head[1] if head else None, held)


class SeveralOwners(WardenError):
    """An execution_id (or an action request id, decision 971) several principals'
    records carry, read by an approver or admin without naming whose (decision 933)."""

    reason = "several_owners"

    def __init__(self, execution_id: str, owners: list[str], what: str = "execution") -> None:
        shown = ", ".join(repr(o)[:82] for o in owners[:5]) + (", …" if len(owners) > 5 else "")
        super().__init__(
            f"{what} {execution_id!r:.80} holds the records of {len(owners)} principals "
            f"({shown}): each one's is a separate {what}; name one",
            owners=owners,
        )


def execution_evidence(
    store: EvidenceStore,
    execution_id: str,
    signer: Signer,
    registry: KeyRegistry | None,
    principal: str | None = None,
) -> Evidence | None:
    """The evidence of ``principal``'s execution ``execution_id`` read from ``store`` in
    one transaction, or None when it holds no processed record. An execution is the pair
    (principal, execution_id) (decision 930): ``principal`` None (an approver, an admin,
    the offline CLI) takes the only principal with records of ``execution_id``, and
    raises :class:`SeveralOwners` when there are several."""
    for attempt in range(2):
        evidence = None
        with store.transaction() as tx:
            every = list(tx.kla.for_execution(execution_id))
            owners = sorted({r.principal for r in every}) if principal is None else [principal]
            if not owners:
                return None
            if len(owners) == 1:
                owner = owners[0]
                if not any(r.status == PROCESSED and r.principal == owner for r in every):
                    return None
            at = {o: Placing(o, execution_id).placement(tx) for o in owners}
            if len(owners) == 1:
                rows = [r for r in every if r.principal == owner]
                evidence = collect(execution_id, rows, tx, signer, registry, at[owner].session_id)
        try:
            # Several: each one's is checked first (tampering is named before ambiguity).
            for o in owners:
                check_against_chain(
                    store, execution_id, [r for r in every if r.principal == o], at[o]
                )
        except IntegrityError:
            if attempt:
                raise
            continue  # a record may have been added between the two reads: read again
        if evidence is None:
            raise SeveralOwners(execution_id, owners)
        return evidence
    raise AssertionError("unreachable")


def now_stamp(at: datetime | None = None) -> str:
    """An RFC 3339 UTC time with microseconds (fixed width, so text order is time order)."""
    when = (at or datetime.now(UTC)).astimezone(UTC)
    return when.isoformat(timespec="microseconds").replace("+00:00", "Z")
