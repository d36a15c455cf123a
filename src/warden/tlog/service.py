"""The running transparency log: the tree over the stored leaves, signed checkpoints,
proofs for the HTTP API, witnesses' cosignatures (issue 17).

Leaves are appended by the store inside each audit transaction (``entries.log_index``);
this class never touches the request path. :meth:`TransparencyLog.sync` reads the
leaves it has not seen, by index, and extends an in-memory :class:`MerkleTree` (64
bytes per leaf); :class:`CheckpointWorker` calls :meth:`TransparencyLog.maybe_checkpoint`
every tick and :meth:`TransparencyLog.checkpoint` once on shutdown.

Before it signs anything the log checks that the tree it rebuilt from the database has,
at the size of the newest stored checkpoint, that checkpoint's root: a database edited
behind Warden's back is refused a new signature (:class:`LogForked`) instead of being
blessed by one.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA65PrivateKey
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from warden.store import tlog_sql
from warden.store.pauses import WritePauses, paced
from warden.store.tlog_sql import StoredCheckpoint, StoredCosignature
from warden.tlog.merkle import MerkleTree, leaf_hash
from warden.tlog.note import (
    Checkpoint,
    MlDsaNoteSigner,
    NoteError,
    NoteSigner,
    NoteVerifier,
    open_checkpoint,
    parse_note,
    sign_note,
    verify_cosignature,
)

log = logging.getLogger(__name__)
#: Leaves hashed between two chances for other threads to take the GIL (:meth:`_extend`).
_HASH_BATCH = 256


class LogForked(RuntimeError):
    """The stored leaves do not reproduce a stored signed checkpoint (tampering), or
    have a gap in their indexes."""


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


@dataclass
class CheckpointPolicy:
    """When to sign: every ``interval_s`` seconds or ``every_entries`` new leaves."""

    interval_s: float = 10.0
    every_entries: int = 1000


class TransparencyLog:
    """The log over ``engine``'s leaves, signing with ``signer`` (name = origin)."""

    def __init__(
        self,
        engine: Engine,
        signer: NoteSigner,
        *,
        witnesses: list[NoteVerifier] | None = None,
        quorum: int = 0,
        policy: CheckpointPolicy | None = None,
        pq_signer: MLDSA65PrivateKey | None = None,
        ed25519: bool = True,
    ) -> None:
        self._engine = engine
        self.signer = signer
        #: Warden's ML-DSA-65 key signing each checkpoint on a line of its own, named like
        #: the Ed25519 key (issue 21); ``ed25519`` False leaves the Ed25519 line out.
        self.pq_signer = MlDsaNoteSigner(signer.name, pq_signer) if pq_signer is not None else None
        if not ed25519 and self.pq_signer is None:
            raise ValueError("a checkpoint needs at least one signing key")
        #: The keys that sign each checkpoint, in line order (``evidence_signing_keys``).
        self.signers: tuple[NoteSigner | MlDsaNoteSigner, ...] = tuple(
            s for s in ((signer if ed25519 else None), self.pq_signer) if s is not None
        )
        first = self.signers[0]
        self.verifier = NoteVerifier(first.name, first.public, first.sig_type)
        self.witnesses = list(witnesses or [])
        self.quorum = quorum
        self.policy = policy or CheckpointPolicy()
        self.tree = MerkleTree()
        self._lock = threading.RLock()
        self._last_signed_at = 0.0
        self._last_signed_size = -1

    @property
    def origin(self) -> str:
        return self.signer.name

    # -- the tree ---------------------------------------------------------------------

    def sync(self) -> int:
        """Extend the tree with the leaves stored since the last sync; return its size.

        The two leaf tables are read separately, so a transaction committing between
        the two reads can look like a gap for a moment: a gap is read again once before
        it is called one (LogForked: a leaf row deleted, or numbered wrongly).
        """
        with self._lock:
            for attempt in (1, 2):
                gap = self._extend()
                if gap is None:
                    break
                if attempt == 2:
                    raise LogForked(
                        f"leaf index {self.tree.size} is missing from the log "
                        f"(the next stored leaf is {gap})"
                    )
            return self.tree.size

    def _extend(self) -> int | None:
        """Append the contiguous leaves after the tree; the index after a gap, or None."""
        for page in tlog_sql.iter_leaf_pages(self._engine, self.tree.size):
            for lo in range(0, len(page), _HASH_BATCH):
                size = self.tree.size
                hashes: list[bytes] = []
                for at, (index, data) in enumerate(page[lo : lo + _HASH_BATCH], size):
                    if index != at:
                        self.tree.extend(hashes)
                        return int(index)
                    hashes.append(leaf_hash(bytes(data)))
                self.tree.extend(hashes)
                # Hashing is Python work under the GIL: between batches a thread waiting
                # for it (a request back from SQLite) runs now, not after the
                # interpreter's 5 ms switch interval (decision 1122).
                time.sleep(0)
        return None

    def _check_against(self, cp: StoredCheckpoint) -> None:
        if cp.tree_size > self.tree.size:
            raise LogForked(
                f"the stored checkpoint of size {cp.tree_size} is larger than the log "
                f"({self.tree.size} leaves): leaves were deleted"
            )
        if self.tree.root(cp.tree_size).hex() != cp.root_hash:
            raise LogForked(
                f"the leaves no longer reproduce the signed checkpoint of size {cp.tree_size}"
            )

    # -- checkpoints ----------------------------------------------------------------------

    def checkpoint(self) -> StoredCheckpoint:
        """Sync, then sign and store a checkpoint of the whole tree unless the newest one
        already covers it; return the newest. LogForked if the leaves contradict it."""
        with self._lock:
            self.sync()
            latest = tlog_sql.latest_checkpoint(self._engine)
            if latest is not None:
                self._check_against(latest)
                if latest.tree_size == self.tree.size:
                    self._mark_signed(latest.tree_size)
                    return latest
            size = self.tree.size
            root = self.tree.root(size)
            note = sign_note(Checkpoint(self.origin, size, root).text(), *self.signers).render()
            if not tlog_sql.put_checkpoint(self._engine, size, root.hex(), note):
                # A replica signed this size first: it must have seen the same tree.
                other = tlog_sql.checkpoint_at(self._engine, size)
                if other is None or other.root_hash != root.hex():
                    raise LogForked(f"another replica signed a different root for size {size}")
            self._mark_signed(size)
            stored = tlog_sql.checkpoint_at(self._engine, size)
            assert stored is not None
            return stored

    def _mark_signed(self, size: int) -> None:
        self._last_signed_size = size
        self._last_signed_at = time.monotonic()

    def maybe_checkpoint(self) -> StoredCheckpoint | None:
        """Sign a checkpoint if the tree grew and the interval passed, or it grew by
        ``every_entries``; None if not due."""
        with self._lock:
            size = self.sync()
            if self._last_signed_size < 0:
                return self.checkpoint()
            grown = size - self._last_signed_size
            due = time.monotonic() - self._last_signed_at >= self.policy.interval_s
            if grown > 0 and (due or grown >= self.policy.every_entries):
                return self.checkpoint()
            return None

    def latest(self) -> StoredCheckpoint | None:
        """The newest stored checkpoint."""
        return tlog_sql.latest_checkpoint(self._engine)

    def final(self) -> tuple[StoredCheckpoint, list[StoredCosignature]] | None:
        """The newest checkpoint cosigned by at least ``quorum`` configured witnesses
        (the newest checkpoint when the quorum is 0), with its cosignatures."""
        if self.quorum == 0:
            latest = self.latest()
            if latest is None:
                return None
            return latest, tlog_sql.cosignatures(self._engine, latest.tree_size)
        sizes = tlog_sql.cosigned_sizes(self._engine, self.quorum)
        if not sizes:
            return None
        cp = tlog_sql.checkpoint_at(self._engine, sizes[0])
        if cp is None:
            return None
        return cp, tlog_sql.cosignatures(self._engine, cp.tree_size)

    def cosignatures(self, tree_size: int) -> list[StoredCosignature]:
        """The cosignatures stored for the checkpoint of ``tree_size``."""
        return tlog_sql.cosignatures(self._engine, tree_size)

    @staticmethod
    def with_cosignatures(cp: StoredCheckpoint, sigs: list[StoredCosignature]) -> str:
        """The checkpoint note with the cosignature lines appended."""
        return cp.note + "".join(s.line for s in sigs)

    # -- proofs ---------------------------------------------------------------------------

    def _ensure(self, size: int) -> None:
        if size > self.tree.size:
            self.sync()

    def inclusion(self, index: int, size: int) -> dict[str, Any]:
        """An inclusion proof document (base64 hashes); ProofError for bad bounds."""
        with self._lock:
            self._ensure(size)
            path = self.tree.inclusion_proof(index, size)
            return {
                "index": index,
                "size": size,
                "leaf_hash": _b64(self.tree.leaf(index)),
                "root_hash": _b64(self.tree.root(size)),
                "proof": [_b64(p) for p in path],
            }

    def consistency(self, first: int, second: int) -> dict[str, Any]:
        """A consistency proof document (base64 hashes); ProofError for bad bounds."""
        with self._lock:
            self._ensure(second)
            path = self.tree.consistency_proof(first, second)
            return {
                "from": first,
                "to": second,
                "from_root": _b64(self.tree.root(first)),
                "to_root": _b64(self.tree.root(second)),
                "proof": [_b64(p) for p in path],
            }

    # -- witnesses ------------------------------------------------------------------------

    def add_cosignatures(self, note_text: str) -> int:
        """Accept a checkpoint note carrying configured witnesses' cosignature lines.

        The note must be one of this log's stored checkpoints (its text byte for byte,
        with Warden's own valid signature). Returns how many new cosignatures were stored;
        NoteError if the note is not ours, not stored, or carries no valid cosignature of
        a configured witness.
        """
        note = parse_note(note_text)
        cp = open_checkpoint(note_text, self.verifier, self.origin)
        stored = tlog_sql.checkpoint_at(self._engine, cp.size)
        if stored is None or parse_note(stored.note).text != note.text:
            raise NoteError(f"this log signed no such checkpoint of size {cp.size}")
        added = found = 0
        for witness in self.witnesses:
            for sig in note.by(witness):
                timestamp = verify_cosignature(note.text, sig, witness)
                found += 1
                added += tlog_sql.put_cosignature(
                    self._engine,
                    StoredCosignature(
                        cp.size, witness.name, sig.key_id.hex(), sig.line(), timestamp
                    ),
                )
        if not found:
            raise NoteError("the note carries no cosignature of a witness this log trusts")
        return added


class CheckpointWorker:
    """A daemon thread that signs due checkpoints; :meth:`stop` signs a last one."""

    def __init__(
        self,
        tlog: TransparencyLog,
        tick_s: float | None = None,
        last_write: Callable[[], float] | None = None,
    ) -> None:
        self._log = tlog
        self._tick = tick_s if tick_s is not None else min(1.0, tlog.policy.interval_s)
        #: ``last_write``: when this process last committed (``time.monotonic()``). A tick
        #: reads and hashes the new leaves under the GIL: one that falls inside a burst of
        #: commits waits for a pause, for at most one more tick (decision 331).
        self._pauses = WritePauses(last_write) if last_write is not None else None
        self._alarm = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="warden-tlog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for _ in paced(self._stop, self._tick, self._pauses):
            try:
                self._log.maybe_checkpoint()
            except LogForked as exc:
                if str(exc) != self._alarm:  # once per distinct finding, not every tick
                    self._alarm = str(exc)
                    log.critical("transparency log: refusing to sign a checkpoint: %s", exc)
            except DBAPIError as exc:
                # A locked or unreachable database is an outage /readyz reports, not a
                # bug: one quiet line per tick, retried next tick.
                log.info("transparency log: database busy or unreachable (%s)", exc.orig)
            except Exception:  # noqa: BLE001 - retried next tick
                log.warning("transparency log: checkpoint failed", exc_info=True)

    def stop(self) -> None:
        """Stop the thread and sign the final checkpoint (errors are logged)."""
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            self._log.checkpoint()
        except DBAPIError as exc:
            log.warning("transparency log: no shutdown checkpoint (%s)", exc.orig)
        except Exception:  # noqa: BLE001 - shutting down: say so, do not fail the stop
            log.warning("transparency log: the shutdown checkpoint failed", exc_info=True)
