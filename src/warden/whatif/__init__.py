"""Policy change without fear (issue 19 items 2 and 3): what-if replay of the recorded
history through a candidate bundle (:mod:`warden.whatif.replay`, read through one
:class:`~warden.whatif.reader.LogReader`), its report (:mod:`warden.whatif.report`,
:mod:`warden.whatif.html`) and shadow evaluation of live traffic
(:mod:`warden.whatif.shadow`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from warden.policy.bundle import Bundle
from warden.whatif.reader import LogReader
from warden.whatif.replay import Replayer, Window, load_bundles
from warden.whatif.report import WhatIfReport


def what_if(
    reader: LogReader,
    candidate: Bundle,
    *,
    current: Bundle | None = None,
    window: Window | None = None,
    fail_on: str | None = None,
    allow_unfaithful: bool = False,
    warn: Callable[[str], None] | None = None,
    memo: bool = True,
) -> dict[str, Any]:
    """Replay ``reader``'s recorded decisions through ``candidate`` and return the report
    document (:mod:`warden.whatif.report`). The recorded bundles are the ones the reader's
    database stored, plus ``current``. Pure: reads only. ``memo`` off evaluates every
    step (the benchmark's worst case); the document's ``evaluations`` counts those run.
    ``fail_on`` also fails an unfaithful replay unless ``allow_unfaithful``
    (:meth:`WhatIfReport.document`)."""
    problems: list[str] = []
    stored = load_bundles(
        reader.bundle_sources(), lambda d, m: problems.append(f"stored bundle {d}: {m}")
    )
    for p in problems:
        if warn is not None:
            warn(p)
    replayer = Replayer(candidate, bundles=stored, current=current, memo=memo)
    report = WhatIfReport(candidate.ref, [r.id for r in candidate.rules])
    w = window or Window()
    for decision in replayer.run(reader, w):
        report.add(decision)
    doc = report.document(
        source=reader.source,
        window={
            "since": w.since.isoformat() if w.since else None,
            "until": w.until.isoformat() if w.until else None,
            "agent": w.agent,
        },
        skipped=replayer.skipped,
        seconds=replayer.seconds,
        fail_on=fail_on,
        allow_unfaithful=allow_unfaithful,
    )
    doc["evaluations"] = replayer.evaluations
    return doc
