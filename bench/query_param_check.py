"""Per /v1 request, the repeated-query-parameter check (decision 1035): the first
version (QueryParams(...).multi_items() on every request) against the committed one
(skipped without single-valued parameters or a query string; parse_qsl otherwise),
interleaved in one run; best of 9 x 100,000 each, loop baseline subtracted. Run:
``PYTHONPATH=src python bench/query_param_check.py`` (prints Markdown table rows, µs)."""

import timeit
from functools import partial

from starlette.datastructures import QueryParams

from warden.core.media import query_pairs, repeated_params_problem


def first(qs, single):
    return repeated_params_problem(QueryParams(qs).multi_items(), single)


def now(qs, single):
    query = single and qs
    return query and repeated_params_problem(query_pairs(query), single)


cases = [
    ("POST /v1/quotes (no query parameters declared)", b"", frozenset()),
    ("GET /v1/kla-records/{id}, no query", b"", frozenset({"principal"})),
    ("GET /v1/kla-records/{id}?principal=bot-1", b"principal=bot-1", frozenset({"principal"})),
    (
        "GET /v1/approvals?state&group&wire&limit",
        b"state=all&group=finance&wire=spend&limit=50",
        frozenset({"state", "group", "wire", "limit"}),
    ),
]
n = 100_000
base = min(timeit.repeat(lambda: None, number=n, repeat=9)) / n * 1e6
for name, qs, single in cases:
    a, b = [], []
    for _ in range(9):
        a.append(timeit.timeit(partial(first, qs, single), number=n) / n * 1e6)
        b.append(timeit.timeit(partial(now, qs, single), number=n) / n * 1e6)
    print(f"| {name} | {min(a) - base:.2f} | {min(b) - base:.2f} |")
