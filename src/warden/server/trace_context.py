"""The caller's W3C Trace Context on every HTTP request (issue 18 item 3).

:class:`TraceContext` wraps the whole ASGI app (``POST /acs`` and every REST wire) when
traces are exported: it reads the request's ``traceparent`` (and ``tracestate``) header
with the W3C propagator and makes it the current OpenTelemetry context while the request
is served, so :mod:`warden.core.tracing` parents the decision's span on the caller's
span. A missing or malformed header leaves no parent (the span starts a new trace); the
request itself is never refused for it. Without traces configured the app is not
wrapped at all (no per-request cost).
"""

from __future__ import annotations

from opentelemetry import context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.types import ASGIApp, Receive, Scope, Send

_PROPAGATOR = TraceContextTextMapPropagator()
_HEADERS = frozenset({b"traceparent", b"tracestate"})


class TraceContext:
    """ASGI middleware: the request's ``traceparent`` is the current trace context."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name in _HEADERS
        }
        if not carrier:
            await self.app(scope, receive, send)
            return
        token = context.attach(_PROPAGATOR.extract(carrier))
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)
