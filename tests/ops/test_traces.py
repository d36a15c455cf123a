"""Decision spans (issue 18 item 3): every wire's decision becomes one ``warden.decision``
span, parented on the caller's W3C trace, whose attributes match the verdict and never
carry an argument value or a secret. A real runtime served by uvicorn on loopback,
spans caught by the SDK's InMemorySpanExporter; one test sets ``otlp_endpoint`` and
reads what the real OTLP/HTTP exporter posts to a loopback receiver."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from conftest import ROOT, agent_client, ensure_agent, free_port
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from warden.core.pipeline import Pipeline
from warden.core.tracing import SpanTracer
from warden.core.types import ActionRequest, Effect, Verdict
from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.server.app import create_app
from warden.settings import Settings

BUDGETS = """\
- id: trace-org
  kind: org
  currency: USD
  cap: "500.00"
  period: month
  principals: [admin]
"""
#: Argument values the spans must never carry.
SECRETS = ("/tmp/secret-path", "rm -rf /srv/secret", "/srv/secret-data")


def traceparent() -> tuple[str, str, str]:
    """A fresh sampled W3C traceparent: (header, trace id hex, span id hex)."""
    trace_id, span_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced(make_runtime: Any, tmp_path: Path, exporter: InMemorySpanExporter) -> Runtime:
    """A runtime whose decisions are traced into ``exporter`` (with a spend budget)."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGETS)
    rt: Runtime = make_runtime(budgets=budgets)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rt.guardian.observers.tracer = SpanTracer(provider.get_tracer("warden"), rt.bundle.ref)
    return rt


@contextmanager
def served(rt: Runtime) -> Iterator[str]:
    """``create_app(rt)`` served by uvicorn on a free loopback port; yields its URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(rt), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)


def decisions(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == "warden.decision"]


def in_trace(exporter: InMemorySpanExporter, trace_id: str) -> list[ReadableSpan]:
    return [s for s in decisions(exporter) if f"{s.context.trace_id:032x}" == trace_id]


def assert_clean(exporter: InMemorySpanExporter, *secrets: str) -> None:
    """No span, attribute or event of any span carries one of ``secrets``."""
    for span in exporter.get_finished_spans():
        text = json.dumps(
            {
                "name": span.name,
                "attributes": dict(span.attributes or {}),
                "events": [(e.name, dict(e.attributes or {})) for e in span.events],
                "resource": dict(span.resource.attributes),
            },
            default=str,
        )
        for secret in secrets:
            assert secret not in text, (span.name, secret)


def test_acs_decisions_over_http_join_the_callers_trace(
    traced: Runtime, exporter: InMemorySpanExporter
) -> None:
    header: dict[str, str] = {}
    with served(traced) as url, httpx.Client(timeout=30) as http:
        agent = agent_client(
            lambda b: http.post(url + "/acs", content=b, headers=header).json(), traced
        )
        agent.hello()
        agent.call("steps/sessionStart", {})  # no traceparent: a trace of its own
        answers: dict[str, tuple[dict[str, Any], str, str]] = {}
        for name, tool, args in (
            ("allow", "read_file", {"path": SECRETS[0]}),
            ("deny", "bash", {"command": SECRETS[1]}),
            ("ask", "delete_file", {"path": SECRETS[2]}),
        ):
            tp, trace_id, span_id = traceparent()
            header["traceparent"] = tp
            answers[name] = (agent.tool_call(tool, args)["result"], trace_id, span_id)
    rules = {"allow": "tool-calls", "deny": "destructive-shell", "ask": "ask-before-delete"}
    tools = {"allow": "read_file", "deny": "bash", "ask": "delete_file"}
    for name, (result, trace_id, span_id) in answers.items():
        assert result["decision"] == name
        [span] = in_trace(exporter, trace_id)
        assert span.parent is not None and span.parent.is_remote
        assert f"{span.parent.span_id:016x}" == span_id
        attrs = dict(span.attributes or {})
        assert attrs["warden.wire"] == "acs"
        assert attrs["warden.decision"] == name
        assert rules[name] in attrs["warden.rule_ids"]
        assert tuple(attrs["warden.reason_codes"]) == tuple(result.get("reason_codes", ()))
        assert attrs["warden.tool"] == tools[name]
        assert attrs["warden.agent.id"] == "observed-agent"
        assert attrs["warden.method"] == "steps/toolCallRequest"
        assert attrs["warden.bundle.id"] == traced.bundle.ref.id
        assert attrs["warden.bundle.version"] == traced.bundle.ref.version
        # The span names the audit entry the answer published.
        assert attrs["warden.audit.entry_hash"] == result["chain_hash"]
        assert attrs["warden.audit.session_id"] == agent.session_id
        assert isinstance(attrs["warden.audit.sequence"], int)
        assert [e.name for e in span.events] == ["acs.decision"]
        assert span.events[0].attributes["decision"] == name  # type: ignore[index]
        # One child per stage, inside the decision's span, in pipeline order.
        children = sorted(
            (s for s in exporter.get_finished_spans() if s.parent == span.context),
            key=lambda s: s.start_time or 0,
        )
        assert [c.name for c in children] == ["warden.decide", "warden.gates", "warden.record"]
        assert span.start_time is not None and span.end_time is not None
        for child in children:
            assert child.start_time is not None and child.end_time is not None
            assert span.start_time <= child.start_time <= child.end_time <= span.end_time
    # sessionStart carried no traceparent: its span is a root of a new trace.
    roots = [s for s in decisions(exporter) if s.parent is None]
    assert [s.attributes["warden.wire"] for s in roots] == ["acs"]  # type: ignore[index]
    assert_clean(exporter, *SECRETS, traced.api_token)


def test_spend_quote_span(traced: Runtime, exporter: InMemorySpanExporter) -> None:
    tp, trace_id, _ = traceparent()
    with served(traced) as url:
        r = httpx.post(
            url + "/v1/quotes",
            json={"budgetId": "trace-org", "action": "buy", "amount": "12.50", "currency": "USD"},
            headers={
                "authorization": f"Bearer {traced.api_token}",
                "idempotency-key": "trace-quote-0001",
                "traceparent": tp,
            },
            timeout=30,
        )
    assert r.status_code == 200, r.text
    [span] = in_trace(exporter, trace_id)
    attrs = dict(span.attributes or {})
    assert attrs["warden.wire"] == "spend"
    assert attrs["warden.decision"] == "allow"
    assert attrs["warden.rule_ids"] == ("spend-quotes",)
    assert_clean(exporter, traced.api_token)


def test_kla_span_follows_the_records_correlation(
    traced: Runtime, exporter: InMemorySpanExporter
) -> None:
    ensure_agent(traced, "kla-agent")
    _, token = traced.api_keys.create("kla-agent", Role.AGENT, ())
    example = ROOT / "src" / "warden" / "schemas" / "kla" / "examples" / "basic-read.json"
    record = json.loads(example.read_text())
    _, record_trace, record_span = traceparent()
    record["correlation"].update(trace_id=record_trace, span_id=record_span)
    plain = {**record, "action_request_id": "req_trace_plain_0001"}
    plain["correlation"] = {
        k: v for k, v in record["correlation"].items() if k not in ("trace_id", "span_id")
    }
    header_tp, header_trace, _ = traceparent()
    auth = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    with served(traced) as url:
        # The record names its trace: that is the parent, whatever the header says.
        r = httpx.post(
            url + "/v1/action-requests",
            content=json.dumps(record),
            headers={**auth, "traceparent": header_tp},
        )
        assert r.status_code in (200, 201), r.text
        # A record without trace ids joins the HTTP traceparent.
        r2 = httpx.post(
            url + "/v1/action-requests",
            content=json.dumps(plain),
            headers={**auth, "traceparent": header_tp},
        )
        assert r2.status_code in (200, 201), r2.text
    [span] = in_trace(exporter, record_trace)
    assert span.parent is not None and f"{span.parent.span_id:016x}" == record_span
    attrs = dict(span.attributes or {})
    assert attrs["warden.wire"] == "kla"
    assert r.json()["data"]["decision"]["decision"] == "allow"
    assert attrs["warden.decision"] == "allow"
    assert attrs["warden.rule_ids"] == ("kla-actions",)
    assert attrs["warden.audit.action_request_id"] == record["action_request_id"]
    [plain_span] = in_trace(exporter, header_trace)
    assert plain_span.attributes["warden.audit.action_request_id"] == "req_trace_plain_0001"  # type: ignore[index]
    assert_clean(exporter, token, record["resource"]["id"], record["purpose"])


def test_adcp_check_governance_span(traced: Runtime, exporter: InMemorySpanExporter) -> None:
    ensure_agent(traced, "buyer-agent")
    _, token = traced.api_keys.create("buyer-agent", Role.AGENT, ())
    auth = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    plan = {
        "plan_id": "trace-plan",
        "brand": {"domain": "acmeoutdoor.example"},
        "objectives": "Q2 outdoor lifestyle campaign",
        "budget": {"total": 1000, "currency": "USD", "reallocation_threshold": 1000},
        "flight": {"start": "2020-01-01T00:00:00Z", "end": "2099-06-30T23:59:59Z"},
        "countries": ["US"],
    }
    check = {
        "plan_id": "trace-plan",
        "caller": "https://pinnacle-agency.example",
        "target_agent": "https://seller.example.com",
        "tool": "create_media_buy",
        "purchase_type": "media_buy",
        "proposed_commitment": {"amount": 600, "currency": "USD"},
        "payload": {
            "brand": {"domain": "acmeoutdoor.example"},
            "total_budget": {"amount": 600, "currency": "USD"},
            "start_time": "asap",
            "end_time": "2099-06-30T23:59:59Z",
            "packages": [{"product_id": "p1", "budget": 600, "pricing_option_id": "cpm"}],
            "idempotency_key": "cmb-" + "0" * 20 + "600",
        },
    }
    tp, trace_id, _ = traceparent()
    with served(traced) as url:
        synced = httpx.post(
            url + "/adcp/sync_plans",
            json={"idempotency_key": str(uuid.uuid4()), "plans": [plan]},
            headers=auth,
        )
        assert synced.status_code == 200, synced.text
        r = httpx.post(
            url + "/adcp/check_governance", json=check, headers={**auth, "traceparent": tp}
        )
    assert r.status_code == 200 and r.json()["verdict"] == "approved", r.text
    [span] = in_trace(exporter, trace_id)
    attrs = dict(span.attributes or {})
    assert attrs["warden.wire"] == "adcp"
    assert attrs["warden.decision"] == "allow"
    assert attrs["warden.tool"] == "create_media_buy"
    assert_clean(exporter, token, r.json()["governance_context"])


def test_a_failing_tracer_never_changes_a_decision(traced: Runtime) -> None:
    class Broken:
        def start_span(self, *a: Any, **k: Any) -> Any:
            raise RuntimeError("collector exploded")

    traced.guardian.observers.tracer = SpanTracer(Broken())  # type: ignore[arg-type]
    pipeline = Pipeline(traced.guardian)
    request = ActionRequest(
        method="steps/toolCallRequest",
        payload={},
        metadata={},
        tool={"name": "read_file"},
        args={},
        raw_command="",
        session={},
    )
    decided = pipeline.run(None, request)
    before = decided.verdict
    pipeline.finished("acs", decided)  # logs, never raises
    pipeline.finished_raw("acs", {"decision": "deny"}, decided.started, decided=decided)
    assert decided.verdict == before
    assert isinstance(before, Verdict) and before.decision in set(Effect)


def test_no_tracer_means_no_middleware(make_runtime: Any) -> None:
    rt: Runtime = make_runtime()
    assert rt.guardian.observers.tracer is None and rt.tracing is None
    assert type(create_app(rt)).__name__ == "AcsEndpoint"


@pytest.mark.parametrize("url", ["udp://collector:4318", "http://collector:4318\n"])
def test_bad_otlp_endpoint_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="otlp_endpoint"):
        Settings(otlp_endpoint=url)


class _Collector(BaseHTTPRequestHandler):
    """A loopback OTLP/HTTP receiver: keeps every ``/v1/traces`` body."""

    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["content-length"]))
        if self.path == "/v1/traces":
            type(self).bodies.append(body)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_otlp_endpoint_exports_spans(make_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``otlp_endpoint`` set: the SDK's OTLP/HTTP exporter posts the spans, as protobuf,
    to ``<endpoint>/v1/traces`` (a loopback receiver here)."""
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    _Collector.bodies = []
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    # Export each batch within 100 ms (the SDK's documented variable), not 5 s.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    tp, trace_id, span_id = traceparent()
    try:
        rt: Runtime = make_runtime(
            otlp_endpoint=f"http://127.0.0.1:{collector.server_port}/", replica_id="replica-t"
        )
        assert rt.tracing is not None and rt.guardian.observers.tracer is rt.tracing.tracer
        with served(rt) as url, httpx.Client(timeout=30) as http:
            agent = agent_client(
                lambda b: http.post(url + "/acs", content=b, headers={"traceparent": tp}).json(),
                rt,
            )
            agent.hello()
            agent.call("steps/sessionStart", {})
            denied = agent.tool_call("bash", {"command": SECRETS[1]})["result"]
        assert denied["decision"] == "deny"
        spans: list[Any] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            spans = []
            for body in list(_Collector.bodies):
                req = ExportTraceServiceRequest.FromString(body)
                for rs in req.resource_spans:
                    for ss in rs.scope_spans:
                        spans += [(rs.resource, s) for s in ss.spans]
            if sum(s.name == "warden.decision" for _, s in spans) >= 2:
                break
            time.sleep(0.05)
    finally:
        collector.shutdown()
        collector.server_close()
    decided = [(r, s) for r, s in spans if s.name == "warden.decision"]
    assert len(decided) == 2, [s.name for _, s in spans]
    for resource, span in decided:
        assert span.trace_id.hex() == trace_id and span.parent_span_id.hex() == span_id
        res = {a.key: a.value.string_value for a in resource.attributes}
        assert res["service.name"] == "warden" and res["service.instance.id"] == "replica-t"
    deny = [
        s
        for _, s in decided
        if any(a.key == "warden.decision" and a.value.string_value == "deny" for a in s.attributes)
    ]
    assert len(deny) == 1
    assert SECRETS[1].encode() not in b"".join(_Collector.bodies)


def test_serve_takes_the_trace_options() -> None:
    from typer.testing import CliRunner

    from warden.cli import app

    r = CliRunner().invoke(app, ["serve", "--otlp-endpoint", "ftp://x", "--data-dir", "/nx"])
    assert r.exit_code != 0 and "otlp_endpoint" in r.output
    r = CliRunner().invoke(app, ["serve", "--trace-sample-ratio", "2"])
    assert r.exit_code != 0 and "trace_sample_ratio" in r.output


def test_missing_sdk_stops_the_start(make_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from warden.errors import ConfigError

    # As if the otel extra were not installed: importing the exporter fails.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(ConfigError, match=r"warden\[otel\]"):
        make_runtime(otlp_endpoint="http://127.0.0.1:4318")


def test_sample_ratio_zero_keeps_only_sampled_callers(traced: Runtime) -> None:
    from opentelemetry import context
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.0)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traced.guardian.observers.tracer = SpanTracer(provider.get_tracer("warden"))
    pipeline = Pipeline(traced.guardian)
    request = ActionRequest(
        method="steps/toolCallRequest",
        payload={},
        metadata={},
        tool={"name": "read_file"},
        args={},
        raw_command="",
        session={},
    )
    pipeline.finished("acs", pipeline.run(None, request))  # a new trace: sampled out
    assert exporter.get_finished_spans() == ()
    tp, trace_id, _ = traceparent()  # the caller sampled its trace: kept
    token = context.attach(TraceContextTextMapPropagator().extract({"traceparent": tp}))
    try:
        pipeline.finished("acs", pipeline.run(None, request))
    finally:
        context.detach(token)
    assert [f"{s.context.trace_id:032x}" for s in decisions(exporter)] == [trace_id]
    assert {s.name for s in exporter.get_finished_spans()} == {
        "warden.decision",
        "warden.decide",
        "warden.gates",
        "warden.record",
    }
