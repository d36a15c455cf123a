"""The cost of reading one stored KLA record (``KlaRow.value``): since decision 911 it
recomputes the record's digest before parsing. Run from the repository root with
PYTHONPATH=src (and against a base checkout's src for the A/B)."""

import json, sys, timeit, statistics
from warden.store.kla_sql import KlaRow
from warden.kla.recorder import canonical_text
from warden.kla.digest import record_digest
rec = json.load(open("src/warden/schemas/kla/examples/credit-disposition.json"))
text = canonical_text(rec)
row = KlaRow("r","action_request","r","e","p",record_digest(rec),text,None,None,"processed","t")
f = getattr(row, "_parsed", None) or row.value
runs = []
for _ in range(7):
    a = min(timeit.repeat(row.value, number=20000, repeat=3))/20000*1e6
    b = min(timeit.repeat(f, number=20000, repeat=3))/20000*1e6
    runs.append((a,b))
print(len(text), "bytes; value() %.2f us, parse only %.2f us (medians)" % (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)))
