"""JCS float fast path (issue 16): RFC 8785 bytes of a typical ACS request, before/after.

Times, with timeit (µs of process CPU time per call, best of 15 interleaved rounds),
the canonical bytes of the ``params`` of a ``steps/toolCallRequest`` envelope whose
tool arguments carry an ``amount_usd``, in three shapes: ``1500.5`` (a non-integral
amount), ``2500.0`` (an integral float, as a Python client's ``json.dumps`` sends it
and the shared peer scenario uses) and ``2500`` (an int: no float at all). For each:

- *before*: what ``canonical_bytes`` did until issue 16 — ``is_fast_canonical`` walk,
  then, for a value with a float, ``rfc8785.dumps(_as_doubles(value))``;
- *after*: ``canonical_bytes(value)`` now (one walk, then the C encoder);
- *ACS envelope*: the three canonicalizations ``AcsService`` makes of one request
  (domain check, signing input, the params for ``request_hash``), before (walk
  ``is_fast_canonical``; for a float, rfc8785 three times) and now (one ``jcs_route``
  walk, which is the domain check; the encoder, with ``known_fast`` when DIRECT).

Every variant is first checked to give the same bytes as ``rfc8785.dumps``.

    python bench/jcs_float.py            # PYTHONPATH=src from a checkout
"""

from __future__ import annotations

import time
import timeit
from collections.abc import Callable
from functools import partial
from typing import Any

import rfc8785

from warden.crypto.canonical import _as_doubles, canonical_bytes, is_fast_canonical
from warden.crypto.jcs_fast import JcsRoute, _sorted_dumps, jcs_route


def envelope(amount: float | int) -> dict[str, Any]:
    """A signed-shape ACS ``steps/toolCallRequest`` envelope (spec §5) with ``amount``."""
    return {
        "jsonrpc": "2.0",
        "id": "b7d2c1f0-5a7e-4c61-9d1e-0f6a2b3c4d5e",
        "method": "steps/toolCallRequest",
        "params": {
            "metadata": {
                "session_id": "5f0c9a52-7c1b-4f7e-8a44-2f3c9d1e6b70",
                "request_id": "0d9f3b1e-2c4a-4e6f-9b8d-7a6c5e4d3c2b",
                "timestamp": "2026-12-01T13:05:13.123Z",
                "agent_id": "agent-7",
                "key_id": "ak_3f9c2e1d",
            },
            "toolCall": {
                "name": "payments.transfer",
                "arguments": {
                    "amount_usd": amount,
                    "currency": "USD",
                    "to": "acct-42",
                    "memo": "invoice 1187",
                },
            },
            "environment": "production",
            "user_context": {"user_id": "u-1001", "groups": ["finance", "ops"]},
            "signature": {"alg": "HMAC-SHA256", "key_id": "ak_3f9c2e1d", "value": "x" * 43},
        },
    }


def before(value: Any, *, known_fast: bool = False) -> bytes:
    if known_fast or is_fast_canonical(value):
        return _sorted_dumps(value).encode("utf-8")
    return bytes(rfc8785.dumps(_as_doubles(value)))


def acs_before(msg: dict[str, Any]) -> bytes:
    fast = is_fast_canonical(msg)
    if not fast:
        before(msg)  # the domain check
    before(msg, known_fast=fast)  # the signing input (the envelope's size)
    return before(msg["params"], known_fast=fast)


def acs_now(msg: dict[str, Any]) -> bytes:
    route = jcs_route(msg)
    fast = route is JcsRoute.DIRECT
    if route is JcsRoute.UNSURE:
        canonical_bytes(msg)
    canonical_bytes(msg, known_fast=fast)
    return canonical_bytes(msg["params"], known_fast=fast)


def main(rounds: int = 15) -> None:
    # The VM is shared: the process's own CPU time is measured (not wall time), every
    # variant runs once per round, interleaved, and the best round counts.
    cases: dict[str, dict[str, tuple[Callable[[], object], int]]] = {}
    for amount in (1500.5, 2500.0, 2500):
        msg = envelope(amount)
        params = msg["params"]
        expected = rfc8785.dumps(params)
        assert before(params) == canonical_bytes(params) == expected
        assert acs_before(msg) == acs_now(msg) == expected
        cases[repr(amount)] = {
            "before": (partial(before, params), 500),
            "after": (partial(canonical_bytes, params), 5000),
            "acs before": (partial(acs_before, msg), 200),
            "acs now": (partial(acs_now, msg), 2000),
        }
    best: dict[tuple[str, str], float] = {}
    for _ in range(rounds):
        for label, variants in cases.items():
            for name, (fn, number) in variants.items():
                us = timeit.timeit(fn, number=number, timer=time.process_time) / number * 1e6
                key = (label, name)
                best[key] = min(best.get(key, us), us)
    print("µs per call    one value (params)           ACS envelope (3 canonicalizations)")
    head = f"{'before':>8} {'after':>7} {'speedup':>7}"
    print(f"{'amount':>8}  {head}   {head}")
    for label in cases:
        old, new, acs_old, acs_new = (
            best[(label, n)] for n in ("before", "after", "acs before", "acs now")
        )
        print(
            f"{label:>8}  {old:8.1f} {new:7.1f} {old / new:6.1f}×"
            f"   {acs_old:8.1f} {acs_new:7.1f} {acs_old / acs_new:6.1f}×"
        )


if __name__ == "__main__":
    main()
