"""Shadow mode (``warden serve --shadow-policy FILE``; issue 19 item 3).

Every decision a wire reports final (:meth:`Pipeline.finished
<warden.core.pipeline.Pipeline.finished>`, after its audit record committed) is handed
to the :class:`ShadowWorker` by :meth:`ShadowWorker.submit`: one non-blocking queue put,
nothing else on the response path. The worker's thread evaluates the same request
(as decided: its verified agent, session and provenance view) through the active
Guardian and the candidate's, both pure (no gate: nothing held, spent or filed), and
compares their policy-level verdicts. The candidate never enforces anything.

Each divergence (another decision, or the same decision from other rules) becomes one
``policy.shadow_divergence`` transparency-log event (written in batches: a transaction at
most every :data:`FLUSH_S` seconds, since each takes the store's write lock)
and is counted with every evaluation in ``/metrics``
(``warden_shadow_evaluations_total{wire}``, ``warden_shadow_divergences_total{wire,kind,
active,shadow}``, ``warden_shadow_dropped_total``). ``warden whatif --shadow``
summarises the events (:func:`shadow_summary`).

A full queue (``capacity``) drops the evaluation and counts it: shadow mode never slows
or blocks the live path. The candidate sees the provenance view built for the active
bundle's ``provenance`` section (the graph is the live one; only the section's settings
differ if the candidate changed them).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from warden.core.guardian import Guardian
from warden.core.types import ActionRequest
from warden.policy.bundle import Bundle
from warden.policy.engine import PolicyEngine
from warden.whatif.reader import LogReader
from warden.whatif.replay import Outcome, Replayed, Window, change_kind, outcome_of
from warden.whatif.report import WhatIfReport, counts, print_report

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

log = logging.getLogger(__name__)

EVENT_KIND = "policy.shadow_divergence"
#: Evaluations waiting at most; beyond it they are dropped (and counted).
DEFAULT_CAPACITY = 10_000
_BATCH = 256
#: Divergences found are written at most this often (s), or per _BATCH of them.
FLUSH_S = 1.0
#: Queue markers: write what is pending now (``flush``); nothing arrived (a timeout).
_FLUSH: Any = object()
_IDLE: Any = object()


class ShadowWorker:
    """Evaluates ``candidate`` beside ``active()`` (the Guardian serving now) off the
    response path; records divergences in ``store``'s log. Thread-safe ``submit``."""

    def __init__(
        self,
        store: SqlStore,
        candidate: Bundle,
        active: Any,
        *,
        replica: str,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        self.store = store
        self.candidate = candidate
        self._guardian = Guardian(PolicyEngine(candidate))
        self._active = active
        self.replica = replica
        self._queue: queue.Queue[Any] = queue.Queue(capacity)
        #: Evaluations by wire; divergences by (wire, kind, active, shadow); drops; errors.
        self.evaluated: Counter[str] = Counter()
        self.diverged: Counter[tuple[str, str, str, str]] = Counter()
        self.dropped = 0
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name="warden-shadow", daemon=True)
        self._thread.start()

    def submit(self, wire: str, request: ActionRequest) -> None:
        """Queue one final decision's request for shadow evaluation (never blocks)."""
        try:
            self._queue.put_nowait((wire, request))
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        pending: list[dict[str, Any]] = []
        last_write = time.monotonic()
        while True:
            try:
                item = self._queue.get(timeout=FLUSH_S)
            except queue.Empty:
                item = _IDLE
            batch = [item]
            while len(batch) < _BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(i is None for i in batch)
            try:
                self._evaluate([i for i in batch if isinstance(i, tuple)], pending)
                # Divergences are written in batches, a transaction at most every FLUSH_S
                # (or per _BATCH of them): each write takes the store's write lock, which
                # the decisions being answered need too.
                due = time.monotonic() - last_write >= FLUSH_S or len(pending) >= _BATCH
                if pending and (due or stop or any(i is _FLUSH for i in batch)):
                    self._write(pending)
                    pending = []
                    last_write = time.monotonic()
            except Exception:  # noqa: BLE001 - shadow mode never stops serving
                self.errors += 1
                pending = []
                log.warning("shadow evaluation failed", exc_info=True)
            finally:
                for i in batch:
                    if i is not _IDLE:
                        self._queue.task_done()
            if stop:
                return

    def _evaluate(
        self, batch: list[tuple[str, ActionRequest]], events: list[dict[str, Any]]
    ) -> None:
        active_guardian: Guardian = self._active()
        active_ref = active_guardian.engine.bundle.ref
        for wire, request in batch:
            active = outcome_of(active_guardian.decide(request))
            shadow = outcome_of(self._guardian.decide(request))
            # Give the GIL back after every step: a decision thread waiting for it would
            # otherwise wait out the interpreter's switch interval (5 ms) behind us.
            time.sleep(0)
            self.evaluated[wire] += 1
            kind = change_kind(active, shadow)
            if kind is None:
                continue
            self.diverged[(wire, kind, active.decision, shadow.decision)] += 1
            events.append(
                {
                    "replica": self.replica,
                    "wire": wire,
                    "change": kind,
                    "session_id": str(request.session.get("id", "")),
                    "seq": request.session.get("step_count", 0),
                    "tool": request.tool_name or request.method,
                    "agent": str(request.agent.get("id") or request.session.get("agent_id", "")),
                    "active": {**active_ref.to_wire(), **active.as_dict()},
                    "shadow": {**self.candidate.ref.to_wire(), **shadow.as_dict()},
                }
            )

    def _write(self, events: list[dict[str, Any]]) -> None:
        with self.store.transaction() as tx:
            for detail in events:
                tx.log_event(EVENT_KIND, detail)

    def flush(self) -> None:
        """Wait until every submitted evaluation is done and its divergences are written
        (tests, shutdown)."""
        self._queue.put(_FLUSH)
        self._queue.join()

    def stop(self) -> None:
        """Finish what is queued, then stop the thread."""
        with contextlib.suppress(queue.Full):
            self._queue.put((None), timeout=5)
        self._thread.join(timeout=10)


def shadow_summary(
    reader: LogReader, window: Window | None = None, *, fail_on: str | None = None
) -> dict[str, Any]:
    """``warden whatif --shadow``: the whatif report document over the recorded
    ``policy.shadow_divergence`` events (old = the active bundle's verdict, new = the
    shadow candidate's; only divergent decisions are recorded, so the matrix holds
    those), plus ``shadow_candidates``: divergences per candidate digest."""
    window = window or Window()
    report: WhatIfReport | None = None
    candidates: Counter[str] = Counter()
    for index, ev in reader.events(EVENT_KIND):
        if ev.get("kind") != EVENT_KIND:
            continue
        agent = str(ev.get("agent", ""))
        if not window.admits(str(ev.get("at", "")), agent):
            continue
        active, shadow = ev.get("active") or {}, ev.get("shadow") or {}
        from warden.core.types import BundleRef

        ref = BundleRef(
            str(shadow.get("id", "")), str(shadow.get("version", "")), str(shadow.get("digest", ""))
        )
        candidates[ref.digest] += 1
        if report is None or report.candidate.digest != ref.digest:
            # The newest candidate's name heads the report; every divergence is counted.
            previous = report
            report = WhatIfReport(ref, [])
            if previous is not None:
                _merge(report, previous)
        old = Outcome(
            str(active.get("decision", "")),
            tuple(active.get("rules") or ()),
            tuple(active.get("codes") or ()),
        )
        new = Outcome(
            str(shadow.get("decision", "")),
            tuple(shadow.get("rules") or ()),
            tuple(shadow.get("codes") or ()),
        )
        report.add(
            Replayed(
                log_index=index,
                session_id=str(ev.get("session_id", "")),
                seq=int(ev.get("seq") or 0),
                step_id="",
                timestamp=str(ev.get("at", "")),
                wire=str(ev.get("wire", "")),
                tool=str(ev.get("tool", "")),
                agent=agent,
                recorded=old,
                mark=None,
                recorded_digest=str(active.get("digest", "")),
                current=None,
                faithful=None,
                old=old,
                new=new,
            )
        )
    if report is None:
        from warden.core.types import BundleRef

        report = WhatIfReport(BundleRef("", "", ""), [])
    doc = report.document(
        source=reader.source,
        window={
            "since": window.since.isoformat() if window.since else None,
            "until": window.until.isoformat() if window.until else None,
            "agent": window.agent,
        },
        skipped={},
        seconds=0.0,
        fail_on=fail_on,
        faithfulness_applies=False,
    )
    doc["shadow_candidates"] = dict(candidates.most_common())
    return doc


def _merge(into: WhatIfReport, other: WhatIfReport) -> None:
    """Carry an older candidate's counts into the newer report (counts only)."""
    into.total += other.total
    into.matrix.update(other.matrix)
    into.kinds.update(other.kinds)
    into.faith.update(other.faith)
    into.bundles.update(other.bundles)
    for name, groups in other.groups.items():
        for key, g in groups.items():
            mine = into.groups[name].setdefault(key, type(g)())
            mine.changes += g.changes
            mine.loosened += g.loosened
            mine.tightened += g.tightened
            mine.examples = (mine.examples + g.examples)[:3]
    for kind, items in other.lists.items():
        into.lists[kind] = items + into.lists[kind]


def print_shadow(doc: dict[str, Any], out: Console) -> None:
    """``warden whatif --shadow`` for a terminal."""
    out.print(
        escape(
            f"shadow divergences recorded: {doc['decisions']} "
            f"(candidates: {counts(doc['shadow_candidates'])})"
        )
    )
    if doc["decisions"]:
        print_report(doc, out)
