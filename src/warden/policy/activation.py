"""Promoting a bundle on every replica (``warden policy activate``; issue 19 item 3).

:func:`activate` stores the bundle's source under its digest, makes it the active one
(``policy_active``, one row) and appends a ``policy.activate`` transparency-log event,
all in one transaction: the promotion is on the record or did not happen. Each running
replica's :class:`BundleFollower` polls that row (setting ``policy_poll_interval_s``)
and, when it names another digest than the replica serves, parses the stored source
and swaps it in with :func:`swap_bundle` (one attribute assignment: every decision
after it uses the new bundle, none sees half of each), then appends a
``warden.bundle_load`` event naming the replica. ``/readyz`` shows each replica's
bundle beside the active one, so a replica still on the old one is visible.

A replica that starts on a database with an active bundle serves that one, not its
``--policy`` file (a restart must not quietly undo a promotion); it logs the difference.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warden.errors import ConfigError, StoreUnavailable
from warden.policy.bundle import Bundle, parse_bundle
from warden.store import policy_sql
from warden.store.policy_sql import ActiveBundle

if TYPE_CHECKING:
    from warden.runtime import Runtime
    from warden.store.sql import SqlStore

log = logging.getLogger(__name__)


def read_bundle(path: Path) -> tuple[Bundle, str]:
    """A bundle file parsed, with its source text. ConfigError if unreadable or invalid."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read bundle: {exc}", reason="bundle_invalid") from exc
    return parse_bundle(source, source=str(path)), source


def remember(store: SqlStore, bundle: Bundle, source: str) -> None:
    """Store ``bundle``'s source under its digest (once), so ``warden whatif`` can re-run
    the bundle a recorded decision names."""
    with store.transaction() as tx:
        policy_sql.put_bundle(
            tx.cursor,
            store._q,
            bundle.ref.digest,
            bundle.ref.id,
            bundle.ref.version,
            source,  # noqa: SLF001
        )


def activate(store: SqlStore, bundle: Bundle, source: str, *, by: str) -> int:
    """Make ``bundle`` the one every replica serves; return the activation's generation.
    Its source, the active row and a ``policy.activate`` log event commit together."""
    ref = bundle.ref
    with store.transaction() as tx:
        policy_sql.put_bundle(tx.cursor, store._q, ref.digest, ref.id, ref.version, source)  # noqa: SLF001
        generation = policy_sql.set_active(tx.cursor, store._q, ref.digest, by)  # noqa: SLF001
        tx.log_event(
            "policy.activate",
            {
                "id": ref.id,
                "version": ref.version,
                "digest": ref.digest,
                "generation": generation,
                "by": by,
            },
        )
    return generation


def stored_bundle(store: SqlStore, digest: str) -> Bundle:
    """The stored bundle ``digest``, parsed; ConfigError if missing or no longer valid,
    or if its content does not hash to ``digest``."""
    source = policy_sql.bundle_source(store.engine, digest)
    if source is None:
        raise ConfigError(f"the active bundle {digest} is not stored in the database")
    bundle = parse_bundle(source, source=f"<stored {digest[:19]}>")
    if bundle.ref.digest != digest:
        raise ConfigError(f"the stored bundle {digest} hashes to {bundle.ref.digest}")
    return bundle


def active_row(store: SqlStore) -> ActiveBundle | None:
    """The ``policy_active`` row (None: nothing activated). StoreUnavailable on failure."""
    try:
        return policy_sql.active(store.engine)
    except Exception as exc:  # noqa: BLE001 - the driver's error, named for the caller
        raise StoreUnavailable(f"cannot read the active bundle: {exc}") from exc


def swap_bundle(runtime: Runtime, bundle: Bundle) -> None:
    """Serve ``bundle`` from now on: the Guardian's engine (shared by every wire) is
    replaced in one assignment; the spend gate's charges follow the new bundle."""
    from warden.gates.spend import SpendGate
    from warden.policy.engine import PolicyEngine

    engine = PolicyEngine(bundle)
    guardian = runtime.guardian
    guardian.observers.set_effects({r.id: r.effect.value for r in bundle.rules})
    guardian.engine = engine
    runtime.bundle = bundle
    runtime.acs.spend_gate = SpendGate.for_bundle(runtime.spend, bundle, runtime.store.step_entry)
    if runtime.metrics is not None:
        runtime.metrics.set_bundle(bundle.ref)


class BundleFollower:
    """A daemon thread that loads the activated bundle on this replica (see the module
    docstring). ``check()`` does one poll (the thread calls it every ``interval`` s)."""

    def __init__(self, runtime: Runtime, interval: float, replica: str) -> None:
        self.runtime = runtime
        self.interval = interval
        self.replica = replica
        #: The last activation row seen, and the last error (None when fine).
        self.active: ActiveBundle | None = None
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if interval > 0:
            self._thread = threading.Thread(
                target=self._run, name="warden-policy-follow", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except StoreUnavailable as exc:
                # A busy or unreachable database is an outage /readyz reports: one quiet
                # line per distinct error, retried next tick.
                if str(exc) != self.error:
                    log.info("policy follower: %s", exc)
                self.error = str(exc)
            except Exception as exc:  # noqa: BLE001 - retried next tick; serving goes on
                if str(exc) != self.error:
                    log.warning("policy follower: %s", exc)
                self.error = str(exc)

    def check(self) -> bool:
        """Poll once; load and swap in the active bundle if it is not the one served.
        True if a swap happened."""
        row = active_row(self.runtime.store)
        self.active = row
        if row is None or row.digest == self.runtime.guardian.engine.bundle.ref.digest:
            self.error = None
            return False
        bundle = stored_bundle(self.runtime.store, row.digest)
        swap_bundle(self.runtime, bundle)
        self.error = None
        log.warning(
            "loaded the activated bundle %s@%s (%s, generation %d)",
            bundle.ref.id,
            bundle.ref.version,
            bundle.ref.digest,
            row.generation,
        )
        with self.runtime.store.transaction() as tx:
            tx.log_event(
                "warden.bundle_load",
                {
                    "replica": self.replica,
                    "id": bundle.ref.id,
                    "version": bundle.ref.version,
                    "digest": bundle.ref.digest,
                    "generation": row.generation,
                },
            )
        return True

    def status(self) -> dict[str, Any]:
        """``/readyz``'s view: the bundle served, the active one, whether they agree."""
        served = self.runtime.guardian.engine.bundle.ref.digest
        active = self.active.digest if self.active is not None else None
        return {
            "active_bundle": active,
            "generation": self.active.generation if self.active is not None else 0,
            "bundle_current": active is None or active == served,
            "follow_error": self.error,
        }

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
