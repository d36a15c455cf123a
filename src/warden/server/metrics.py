"""``GET /metrics``: Prometheus text exposition of one Warden replica (issue 18 item 2).

Every series lives in a per-:class:`~warden.runtime.Runtime` ``CollectorRegistry``
(never prometheus-client's global one), so several runtimes in one process do not
collide. Series (all prefixed ``warden_``):

- ``decisions_total{wire,outcome,rule}``: final verdicts per wire (``acs``, ``mcp``,
  ``spend``, ``kla``, ``adcp``); ``rule`` is the first fired rule id, else the first
  reason code (:func:`warden.core.observe.rule_label`). Never labelled by agent or session.
- ``decision_seconds{wire}``: histogram, request arrival at the decision to final verdict.
- ``commit_batch_size`` and ``commit_seconds``: histograms of the group committer's
  batches (entries per durable transaction; its wall time including the fsync).
- ``approvals_pending{group}``, ``approval_latency_seconds`` (a gauge histogram of the
  last 10 000 human-decided tasks, creation to deciding vote), read from the tasks table
  at scrape time.
- ``budget_remaining{budget,currency}``, ``budget_held{budget,currency}``,
  ``budget_cap{budget,currency}``: the current period of the first 1000 budgets by id.
- ``webhook_outbox_depth`` (pending + sending deliveries), ``webhook_deliveries{status}``,
  ``webhook_delivery_failures`` (deliveries that failed for good).
- ``replica_info{replica_id,hostname,pid,version,native,bundle_id,bundle_version,
  bundle_digest}``; ``native`` is :data:`warden.native.state` (``native``, ``python``
  or ``stale``: whether the decision path runs compiled).
- with ``shadow_policy`` (issue 19): ``shadow_evaluations_total{wire}``,
  ``shadow_divergences_total{wire,kind,active,shadow}`` (kind ``loosened``,
  ``tightened`` or ``rules``; the two decisions) and ``shadow_dropped_total``.
- ``metrics_store_up``: 1 if the scrape-time reads answered, else 0 (those series are
  then absent, never reported as zero).

Access (setting ``metrics_access``, decision 234): ``loopback`` (default) serves loopback
clients without credentials and everyone else only with ``Authorization: Bearer <admin
API key>``; ``key`` asks every client for the admin key. A refusal is HTTP 401 (no or
bad key, or two ``Authorization`` lines from any client: decision 841) or 403 (a key
that is not admin) with a JSON ``{"error": ...}`` body.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
)
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from warden import __version__, native
from warden.core.observe import Wire
from warden.core.types import BundleRef
from warden.identity.api_keys import Role
from warden.identity.credentials import more_than_one
from warden.store.metrics_sql import (
    budget_levels,
    outbox_counts,
    pending_approvals_by_group,
    recent_approval_latencies,
)

if TYPE_CHECKING:
    from warden.runtime import Runtime

log = logging.getLogger(__name__)

#: At most this many budgets are exported (by id), keeping the series bounded.
MAX_BUDGETS = 1000
#: The approval latency histogram covers this many most recently decided tasks.
APPROVAL_SAMPLE = 10_000
#: Seconds; the latency of a decision, from microseconds to a slow commit.
DECISION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
COMMIT_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Seconds; a human's answer, from a minute to a day.
APPROVAL_BUCKETS = (60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)


class WardenMetrics:
    """The metrics of one runtime: its registry, the decision and commit instruments,
    and the scrape-time collector over its store."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.registry = CollectorRegistry(auto_describe=True)
        self.decisions = Counter(
            "warden_decisions",
            "Final verdicts by wire, outcome and the rule (or reason code) behind them.",
            ("wire", "outcome", "rule"),
            registry=self.registry,
        )
        self._decision_counters: dict[tuple[str, str, str], Any] = {}
        self._decision_timers: dict[str, Any] = {}
        self.decision_seconds = Histogram(
            "warden_decision_seconds",
            "Seconds from a request's arrival at the decision to its final verdict.",
            ("wire",),
            buckets=DECISION_BUCKETS,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "warden_commit_batch_size",
            "Audit entries per group-committed durable transaction.",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.commit_seconds = Histogram(
            "warden_commit_seconds",
            "Wall time of one group-committed transaction, commit and fsync included.",
            buckets=COMMIT_BUCKETS,
            registry=self.registry,
        )
        self.replica = Info("warden_replica", "This replica's identity.", registry=self.registry)
        self.set_bundle(runtime.guardian.engine.bundle.ref)
        self.registry.register(StoreCollector(runtime))
        if runtime.shadow is not None:
            self.registry.register(ShadowCollector(runtime.shadow))
        runtime.guardian.observers.add(self.observe_decision)

    def set_bundle(self, ref: BundleRef) -> None:
        """``warden_replica_info`` naming the bundle served now (at start, and after
        ``warden policy activate`` swapped it)."""
        self.replica.info(
            {
                "replica_id": self.runtime.settings.replica_id
                or f"{socket.gethostname()}:{os.getpid()}",
                "hostname": socket.gethostname(),
                "pid": str(os.getpid()),
                "version": __version__,
                "native": native.state,
                "bundle_id": ref.id,
                "bundle_version": ref.version,
                "bundle_digest": ref.digest,
            }
        )

    def observe_decision(self, wire: Wire, decision: str, rule: str, seconds: float) -> None:
        """A :data:`~warden.core.observe.DecisionObserver`."""
        # The labelled children, looked up once per label set (bounded: rule ids and
        # reason codes, never a session); prometheus_client keeps them for the registry's
        # life, so the cached child is the one it would return.
        key = (wire, decision, rule)
        counter = self._decision_counters.get(key)
        if counter is None:
            counter = self._decision_counters[key] = self.decisions.labels(wire, decision, rule)
        counter.inc()
        timer = self._decision_timers.get(wire)
        if timer is None:
            timer = self._decision_timers[wire] = self.decision_seconds.labels(wire)
        timer.observe(seconds)

    def observe_batch(self, size: int, seconds: float) -> None:
        """The group committer's ``on_batch``."""
        self.batch_size.observe(size)
        self.commit_seconds.observe(seconds)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format 0.0.4 (reads the store: call off-loop)."""
        return generate_latest(self.registry)

    async def endpoint(self, request: Request) -> Response:
        """``GET /metrics`` behind the access rule."""
        refusal = await asyncio.to_thread(self._refusal, request)
        if refusal is not None:
            return refusal
        body = await asyncio.to_thread(self.exposition)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    def _refusal(self, request: Request) -> Response | None:
        access = self.runtime.settings.metrics_access
        lines = [v for v in request.headers.getlist("authorization") if v.strip()]
        several = more_than_one(["authorization"] * len(lines))
        if several is not None:  # refused even where no key is needed (decision 841)
            return _deny(401, several)
        client = request.client.host if request.client is not None else ""
        if access == "loopback" and _is_loopback(client):
            return None
        header = lines[0] if lines else ""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _deny(401, "metrics need Authorization: Bearer <admin API key>")
        try:
            who = self.runtime.api_keys.authenticate(token.strip())
        except Exception:  # noqa: BLE001 - cannot check the key: refuse (fail closed)
            log.warning("metrics: API key check failed", exc_info=True)
            return _deny(503, "the store could not check the key")
        if who is None:
            return _deny(401, "unknown or revoked API key")
        if who.role is not Role.ADMIN:
            return _deny(403, "metrics need an admin API key")
        return None


def _deny(status: int, message: str) -> Response:
    headers = {"www-authenticate": 'Bearer realm="warden-metrics"'} if status == 401 else None
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class StoreCollector(Collector):
    """Scrape-time series read from the store (tasks, budgets, outbox)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []  # unchecked: the families depend on what the store answers

    def collect(self) -> Iterable[GaugeMetricFamily | GaugeHistogramMetricFamily]:
        store = self.runtime.store
        up = GaugeMetricFamily(
            "warden_metrics_store_up", "1 if the scrape-time store reads answered."
        )
        try:
            pending = pending_approvals_by_group(store)
            latencies = recent_approval_latencies(store, APPROVAL_SAMPLE)
            levels = budget_levels(store, datetime.now(UTC), MAX_BUDGETS)
            outbox = outbox_counts(store)
        except Exception:  # noqa: BLE001 - a scrape never fails the server
            log.warning("metrics: store reads failed", exc_info=True)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        g = GaugeMetricFamily(
            "warden_approvals_pending",
            "Approval tasks awaiting a human, by group.",
            labels=["group"],
        )
        for group, n in sorted(pending.items()):
            g.add_metric([group], n)
        yield g
        yield _gauge_histogram(
            "warden_approval_latency_seconds",
            f"Creation to deciding vote, over the last {APPROVAL_SAMPLE} human-decided tasks.",
            latencies,
            APPROVAL_BUCKETS,
        )
        labels = ["budget", "currency"]
        remaining = GaugeMetricFamily(
            "warden_budget_remaining", "What the budget can still hold this period.", labels=labels
        )
        held = GaugeMetricFamily(
            "warden_budget_held", "Reserved and not yet settled this period.", labels=labels
        )
        cap = GaugeMetricFamily("warden_budget_cap", "The budget's cap per period.", labels=labels)
        for lv in levels:
            remaining.add_metric([lv.budget_id, lv.currency], float(lv.remaining))
            held.add_metric([lv.budget_id, lv.currency], float(lv.held))
            cap.add_metric([lv.budget_id, lv.currency], float(lv.cap))
        yield from (remaining, held, cap)
        depth = GaugeMetricFamily(
            "warden_webhook_outbox_depth", "Webhook deliveries not yet delivered or given up."
        )
        depth.add_metric([], outbox.get("pending", 0) + outbox.get("sending", 0))
        yield depth
        failed = GaugeMetricFamily(
            "warden_webhook_delivery_failures", "Webhook deliveries that failed for good."
        )
        failed.add_metric([], outbox.get("failed", 0))
        yield failed
        by_status = GaugeMetricFamily(
            "warden_webhook_deliveries", "Webhook deliveries by status.", labels=["status"]
        )
        for status in ("pending", "sending", "delivered", "failed"):
            by_status.add_metric([status], outbox.get(status, 0))
        yield by_status


class ShadowCollector(Collector):
    """The shadow worker's counts (:class:`warden.whatif.shadow.ShadowWorker`)."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def describe(self) -> Iterable[CounterMetricFamily]:
        return []

    def collect(self) -> Iterable[CounterMetricFamily]:
        evaluated = CounterMetricFamily(
            "warden_shadow_evaluations",
            "Decisions the shadow candidate evaluated, by wire.",
            labels=["wire"],
        )
        for wire, n in sorted(self.worker.evaluated.items()):
            evaluated.add_metric([wire], n)
        yield evaluated
        diverged = CounterMetricFamily(
            "warden_shadow_divergences",
            "Decisions where the shadow candidate differed from the active bundle.",
            labels=["wire", "kind", "active", "shadow"],
        )
        for key, n in sorted(self.worker.diverged.items()):
            diverged.add_metric(list(key), n)
        yield diverged
        dropped = CounterMetricFamily(
            "warden_shadow_dropped", "Shadow evaluations dropped because the queue was full."
        )
        dropped.add_metric([], self.worker.dropped)
        yield dropped


def _gauge_histogram(
    name: str, doc: str, values: list[float], bounds: tuple[float, ...]
) -> GaugeHistogramMetricFamily:
    buckets: list[tuple[str, float]] = []
    for bound in bounds:
        buckets.append((repr(float(bound)), sum(1 for v in values if v <= bound)))
    buckets.append(("+Inf", len(values)))
    return GaugeHistogramMetricFamily(name, doc, buckets=buckets, gsum_value=sum(values))
