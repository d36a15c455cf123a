"""OpenTelemetry spans for decisions (issue 18 item 3; docs/observability.md).

:class:`SpanTracer` is the :class:`~warden.core.observe.DecisionTracer` that
:meth:`Pipeline.finished <warden.core.pipeline.Pipeline.finished>` calls once per final
decision. It writes the decision's span after the fact, with the times the pipeline
measured, so nothing is done on the decision path before the record is durable:

- ``warden.decision`` (kind ``INTERNAL``) from the request's arrival to
  the call of ``finished``; its parent is the ``parent`` the request carried in its body
  (KLA ``correlation``), else the current OpenTelemetry context (the HTTP
  ``traceparent`` that :mod:`warden.server.trace_context` extracted), else none (a new
  trace);
- a child span per pipeline stage that ran: ``warden.intake``, ``warden.decide``,
  ``warden.gates`` (from :attr:`Decided.stages <warden.core.pipeline.Decided.stages>`)
  and ``warden.record`` (from the end of the gates to ``finished``: rendering, signing
  and the durable commit);
- on the ACS wires (``acs``, ``mcp``) the ACS-Trace profile's ``acs.decision`` span
  event (ACS §12 profiles) with the decision and its reason codes.

Attributes (all under ``warden.``): ``wire``, ``decision``, ``rule_ids``,
``reason_codes``, ``agent.id`` (the verified agent; absent when none was verified),
``tool`` (the tool's name), ``method`` (the ACS method or the wire's step type),
``bundle.id``/``bundle.version``/``bundle.digest``, and ``audit.*`` the record's
identifiers the wire passed (ACS: ``audit.session_id``, ``audit.entry_hash``,
``audit.sequence``). Never an argument value, a payload, a claim or a credential:
the attributes are built only from the fields above (tests/ops/test_traces.py).

The exporter side (:func:`start_exporting`) needs the ``otel`` extra
(``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http``); this module
itself needs only ``opentelemetry-api``, a dependency of Warden.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from warden.core.observe import TraceParent, Wire
from warden.core.types import BundleRef, Verdict
from warden.errors import ConfigError

if TYPE_CHECKING:
    from warden.core.pipeline import Decided

log = logging.getLogger(__name__)

#: The instrumentation scope name of every span Warden writes.
SCOPE = "warden"
#: The pipeline stages in the order they run (each a child span when it ran).
STAGES = ("intake", "decide", "gates")


class SpanTracer:
    """Writes one ``warden.decision`` span per decision on ``tracer``. Thread-safe.

    ``bundle`` is the runtime's bundle, named on spans whose verdict is known only as
    rendered (the rendered ACS verdict does not name its bundle)."""

    def __init__(self, tracer: trace.Tracer, bundle: BundleRef | None = None) -> None:
        self.tracer = tracer
        self.bundle = bundle

    def decided(
        self,
        wire: Wire,
        decided: Decided,
        verdict: Verdict,
        *,
        audit: Mapping[str, str | int] | None = None,
        parent: TraceParent | None = None,
    ) -> None:
        """The span of a decision whose final verdict is ``verdict``. Never raises."""
        try:
            self._write(
                wire,
                verdict.decision.value,
                [r.rule_id for r in verdict.policy_references],
                list(verdict.reason_codes),
                verdict.bundle or self.bundle,
                decided.started,
                decided,
                audit,
                parent,
            )
        except Exception:  # noqa: BLE001 - traces never change a decision
            log.warning("decision span failed", exc_info=True)

    def decided_raw(
        self,
        wire: Wire,
        verdict: Mapping[str, Any],
        started: float,
        *,
        decided: Decided | None = None,
        audit: Mapping[str, str | int] | None = None,
    ) -> None:
        """The span of a decision known as rendered (``verdict`` an ACS result or an
        entry's ``verdict`` object: ``decision``, ``reason_codes``,
        ``policy_references[].rule_id``). Never raises."""
        try:
            refs = verdict.get("policy_references") or []
            self._write(
                wire,
                str(verdict.get("decision", "deny")),
                [str(r.get("rule_id", "")) for r in refs if isinstance(r, Mapping)],
                [str(c) for c in verdict.get("reason_codes") or []],
                (decided.verdict.bundle if decided is not None else None) or self.bundle,
                started,
                decided,
                audit,
                None,
            )
        except Exception:  # noqa: BLE001 - traces never change a decision
            log.warning("decision span failed", exc_info=True)

    def _write(
        self,
        wire: Wire,
        decision: str,
        rule_ids: Sequence[str],
        reason_codes: Sequence[str],
        bundle: BundleRef | None,
        started: float,
        decided: Decided | None,
        audit: Mapping[str, str | int] | None,
        parent: TraceParent | None,
    ) -> None:
        clock = _Clock()
        attrs: dict[str, Any] = {
            "warden.wire": wire,
            "warden.decision": decision,
            "warden.rule_ids": list(rule_ids),
            "warden.reason_codes": list(reason_codes),
        }
        if decided is not None:
            request = decided.request
            agent = str(request.agent.get("id") or "")
            if agent and request.agent.get("verified"):
                attrs["warden.agent.id"] = agent
            if request.tool_name:
                attrs["warden.tool"] = request.tool_name
            if request.method:
                attrs["warden.method"] = request.method
        if bundle is not None:
            attrs["warden.bundle.id"] = bundle.id
            attrs["warden.bundle.version"] = bundle.version
            attrs["warden.bundle.digest"] = bundle.digest
        for key, value in (audit or {}).items():
            attrs[f"warden.audit.{key}"] = value
        span = self.tracer.start_span(
            "warden.decision",
            context=parent_context(parent),
            kind=trace.SpanKind.INTERNAL,
            attributes=attrs,
            start_time=clock.wall(started),
        )
        if not span.is_recording():
            # Sampled out: nothing of it is exported, so build nothing more.
            span.end(end_time=clock.end)
            return
        if wire in ("acs", "mcp"):
            span.add_event(
                "acs.decision",
                {"decision": decision, "reason_codes": list(reason_codes)},
                timestamp=clock.end,
            )
        if decided is not None and decided.ended > 0:
            inside = trace.set_span_in_context(span)
            # The stages ran back to back and the gates ended at ``ended``: lay them out
            # backwards from there; the record stage is what followed until now.
            bounds: list[tuple[str, float, float]] = []
            cursor = decided.ended
            for name in reversed(STAGES):
                seconds = decided.stages.get(name)
                if seconds is not None:
                    bounds.append((name, cursor - seconds, cursor))
                    cursor -= seconds
            bounds.reverse()
            bounds.append(("record", decided.ended, clock.perf))
            for name, begin, end in bounds:
                child = self.tracer.start_span(
                    f"warden.{name}", context=inside, start_time=clock.wall(begin)
                )
                child.end(end_time=clock.wall(end))
        span.end(end_time=clock.end)


def parent_context(parent: TraceParent | None) -> Context | None:
    """The OpenTelemetry context whose remote span is ``parent`` (None: the current
    context). A parent whose ids are not valid W3C ids is ignored (the current
    context is used): it was validated by the wire's schema, this is a second guard."""
    if parent is None:
        return None
    try:
        trace_id, span_id = int(parent.trace_id, 16), int(parent.span_id, 16)
    except ValueError:
        return None
    remote = SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    if not remote.is_valid:
        return None
    return trace.set_span_in_context(NonRecordingSpan(remote))


class _Clock:
    """One reading of both clocks: converts :func:`time.perf_counter` values (what the
    pipeline measures with) to Unix nanoseconds (what spans carry)."""

    def __init__(self) -> None:
        self.end = time.time_ns()
        self.perf = time.perf_counter()

    def wall(self, perf: float) -> int:
        return self.end - max(0, int((self.perf - perf) * 1e9))


@dataclass
class Exporting:
    """Spans exported over OTLP/HTTP: the tracer to install and the provider to flush."""

    tracer: SpanTracer
    provider: Any

    def shutdown(self) -> None:
        """Flush the spans still queued and stop the exporter (at most a few seconds)."""
        try:
            self.provider.shutdown()
        except Exception:  # noqa: BLE001 - shutting down must not fail the close
            log.warning("trace exporter shutdown failed", exc_info=True)


def check_exporting() -> None:
    """Raise :class:`~warden.errors.ConfigError` when the OTLP exporter cannot be
    loaded (the ``otel`` extra is not installed), so that a start refuses before it
    writes anything (decision 990)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is not None
    except ModuleNotFoundError:  # a parent package is missing
        found = False
    if not found:
        raise ConfigError(
            "otlp_endpoint is set but the OpenTelemetry SDK is not installed: "
            "pip install 'warden[otel]'"
        )


def start_exporting(
    endpoint: str,
    *,
    bundle: BundleRef,
    version: str,
    instance: str,
    sample_ratio: float = 1.0,
) -> Exporting:
    """A tracer whose spans go by OTLP/HTTP (protobuf) to ``<endpoint>/v1/traces``
    through a batch processor (a background thread: exporting never waits on the
    decision path; a collector that is down loses spans, never decisions).

    ``sample_ratio`` of new traces are kept (a caller's sampled flag is followed:
    parent-based). The resource names ``service.name=warden``, ``service.version`` and
    ``service.instance.id=instance``. Raises :class:`~warden.errors.ConfigError` when
    the ``otel`` extra is not installed."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError as exc:
        raise ConfigError(
            "otlp_endpoint is set but the OpenTelemetry SDK is not installed: "
            "pip install 'warden[otel]'"
        ) from exc
    provider = TracerProvider(
        resource=Resource.create(
            {
                "service.name": "warden",
                "service.version": version,
                "service.instance.id": instance,
            }
        ),
        sampler=ParentBased(TraceIdRatioBased(sample_ratio)),
    )
    exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Exporting(SpanTracer(provider.get_tracer(SCOPE, version), bundle), provider)
