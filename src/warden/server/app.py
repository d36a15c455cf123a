"""The ASGI application: mounts the wires; health and readiness.

``POST /acs`` serves ACS JSON-RPC (always HTTP 200 with a JSON-RPC body, like
the reference Guardians); the body is read up to the configured cap and no
further. ``GET /healthz`` is liveness; ``GET /readyz`` checks the store.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from warden import __version__
from warden.errors import InvalidRequest, WardenError
from warden.runtime import Runtime
from warden.wire.acs.render import error_response


def _json(body: dict[str, Any]) -> Response:
    return Response(
        json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8"),
        media_type="application/json",
    )


def create_app(runtime: Runtime) -> FastAPI:
    """Build the FastAPI app around a started :class:`Runtime`."""
    app = FastAPI(title="Warden", version=__version__)
    acs = runtime.acs

    @app.post("/acs", include_in_schema=False)
    async def acs_endpoint(request: Request) -> Response:
        limit = acs.max_body_bytes
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return _json(
                    error_response(
                        None,
                        InvalidRequest(
                            f"request body exceeds {limit} bytes", reason="body_too_large"
                        ),
                    )
                )
            chunks.append(chunk)
        return _json(acs.handle(b"".join(chunks)))

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.get("/readyz")
    async def readyz() -> Response:
        try:
            runtime.store.counts()
        except WardenError as exc:
            return JSONResponse({"status": "unavailable", "reason": exc.reason}, status_code=503)
        return JSONResponse({"status": "ready", "bundle": runtime.bundle.ref.to_wire()})

    return app
