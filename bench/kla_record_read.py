"""The cost of reading one stored KLA record (``KlaRow.value``): since decision 911 it
recomputes the record's digest before parsing. Run from the repository root with
PYTHONPATH=src (and against a base checkout's src for the A/B); on a base checkout the
"parse alone" column is ``value()`` again (it had no separate parse)."""

from __future__ import annotations

import json
import statistics
import timeit
from pathlib import Path

from warden.kla.digest import record_digest
from warden.kla.recorder import canonical_text
from warden.store.kla_sql import KlaRow

EXAMPLE = Path("src/warden/schemas/kla/examples/credit-disposition.json")


def main() -> None:
    rec = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    text = canonical_text(rec)
    row = KlaRow(
        "r", "action_request", "r", "e", "p", record_digest(rec), text, None, None, "processed", "t"
    )
    parse = getattr(row, "_parsed", None) or row.value
    runs = []
    for _ in range(7):
        a = min(timeit.repeat(row.value, number=20000, repeat=3)) / 20000 * 1e6
        b = min(timeit.repeat(parse, number=20000, repeat=3)) / 20000 * 1e6
        runs.append((a, b))
    value_us = statistics.median(r[0] for r in runs)
    parse_us = statistics.median(r[1] for r in runs)
    print(f"{len(text)} bytes; value() {value_us:.2f} us, parse alone {parse_us:.2f} us (medians)")


if __name__ == "__main__":
    main()
