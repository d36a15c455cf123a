"""Rate limits on idempotency-cache inserts per (agent, account) (specs/adcp-spend-kla.md
§1.5 rule 8): a token bucket per scope and kind, refilled continuously.

Only a request that would insert a new cache entry is counted (a replay inserts
nothing). Over the limit the request is ``RATE_LIMITED`` with ``retry_after`` and, like
every error, rolls back with its claim: a rate-limited answer is never cached, so a
retry after ``retry_after`` runs. Buckets live in the process (a multi-replica
deployment multiplies the ceiling by its replicas).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from warden.adcp.errors import AdcpError

#: §1.5's recommended first-deployment ceilings: (sustained per second, burst).
WRITES = (60.0, 300.0)
READS = (300.0, 1500.0)
READ_TASKS = frozenset({"get_plan_audit_logs", "get_task_status"})
MAX_BUCKETS = 100_000


@dataclass
class _Bucket:
    tokens: float
    at: float


class InsertRateLimiter:
    """Token buckets: ``writes``/``reads`` are (tokens per second, bucket size)."""

    def __init__(
        self,
        writes: tuple[float, float] = WRITES,
        reads: tuple[float, float] = READS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = {"write": writes, "read": reads}
        self._clock = clock
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, scope: str, task: str, cost: int = 1) -> None:
        """Count one cache insert of ``task`` in ``scope`` as ``cost`` writes (a
        sync_plans counts each plan); ``RATE_LIMITED`` when the bucket lacks them
        (``retry_after``: whole seconds until they are back)."""
        kind = "read" if task in READ_TASKS else "write"
        rate, size = self.limits[kind]
        now = self._clock()
        with self._lock:
            bucket = self._buckets.get((scope, kind))
            if bucket is None:
                if len(self._buckets) >= MAX_BUCKETS:
                    self._buckets.clear()  # bounded memory; a reset only forgives
                bucket = self._buckets[(scope, kind)] = _Bucket(size, now)
            bucket.tokens = min(size, bucket.tokens + (now - bucket.at) * rate)
            bucket.at = now
            if bucket.tokens >= cost:
                bucket.tokens -= cost
                return
            wait = (cost - bucket.tokens) / rate
        raise AdcpError(
            "RATE_LIMITED",
            f"too many new {kind} requests for this agent and account; retry later",
            retry_after=min(3600, max(1, math.ceil(wait))),
        )
