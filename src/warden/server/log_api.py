"""The transparency log over HTTP: ``/v1/log/*`` (issue 17).

Public reads, no API key: a checkpoint and proofs carry hashes only, never an entry's
content, and a log that only its operator can read is no transparency log.

* ``GET /v1/log/checkpoint``: the newest signed checkpoint, a C2SP signed note
  (``text/plain; charset=utf-8``) with every cosignature stored for it; header
  ``Warden-Checkpoint-Final: true|false`` (enough witnesses cosigned it).
* ``GET /v1/log/checkpoint/final``: the newest checkpoint cosigned by
  ``log_witness_quorum`` configured witnesses, with their cosignatures (404 if none yet).
* ``GET /v1/log/key``: the checkpoint key as a C2SP verifier key (``<origin>+<key id>+
  <base64>``); pin it out of band, this is for convenience.
* ``GET /v1/log/inclusion?index=I&size=N``: ``{index, size, leaf_hash, root_hash,
  proof[]}`` (base64), RFC 9162 §2.1.3.
* ``GET /v1/log/consistency?from=M&to=N``: ``{from, to, from_root, to_root, proof[]}``
  (base64), RFC 9162 §2.1.4.
* ``POST /v1/log/cosignatures``: a witness posts this log's checkpoint note carrying its
  cosignature line(s) (text/plain); only configured witness keys are accepted. ``{stored}``.

Refusals use the ``/v1`` envelope (``{blockedBy, message, retryable}``):
``log:invalid_params`` (400; also a query parameter the route does not take, or one
given twice, decisions 1180, 1035), ``log:not_found`` (404), ``log:cosignature_refused``
(400), ``log:unavailable`` (503).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from warden.core.media import query_pairs, query_params_problem
from warden.tlog.merkle import ProofError
from warden.tlog.note import NoteError
from warden.tlog.service import LogForked, TransparencyLog
from warden.wire.spend.render import Refusal, dump, json_response

_MAX_NOTE_BYTES = 64 * 1024
_NOTE_TYPE = "text/plain; charset=utf-8"
#: The verifier keys ``GET /v1/log/key?alg=`` serves (no ``alg``: the Ed25519 key).
_KEY_ALGS = ("ed25519", "ml-dsa-65")
_PREFIX = "/v1/log"


def _refuse(gate: str, status: int, message: str) -> Response:
    return json_response(status, dump(Refusal(gate, status, message).envelope()))


def _query(*, required: bool, **params: str) -> dict[str, Any]:
    """An ``openapi_extra`` naming the query parameters a route reads from the request
    (FastAPI does not see them): ``/openapi.json`` lists them, and :class:`_LogRoute`
    refuses any other. Each is a string here; the endpoint checks its value."""
    return {
        "parameters": [
            {
                "name": name,
                "in": "query",
                "required": required,
                "description": text,
                "schema": {"type": "string"},
            }
            for name, text in params.items()
        ]
    }


class _LogRoute(APIRoute):
    """A ``/v1/log`` route that refuses a query parameter it does not take, or one given
    twice, ``400 log:invalid_params`` before the endpoint runs (the rule of
    :func:`~warden.core.media.query_params_problem`, as on the rest of ``/v1``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        declared = tuple(
            p["name"]
            for p in (self.openapi_extra or {}).get("parameters", ())
            if p["in"] == "query"
        )

        async def checked(request: Request) -> Response:
            query = request.scope["query_string"]
            if query and (problem := query_params_problem(query_pairs(query), declared, declared)):
                return _refuse("log:invalid_params", 400, problem)
            return await handler(request)

        return checked


def _int_param(request: Request, name: str) -> int:
    raw = request.query_params.getlist(name)
    if len(raw) != 1:
        raise ValueError(f"give exactly one query parameter {name}=<non-negative integer>")
    value = raw[0]
    if not value.isascii() or not value.isdigit() or len(value) > 19:
        raise ValueError(f"{name} must be a non-negative decimal integer, got {value!r}")
    return int(value)


def log_router(tlog: TransparencyLog) -> APIRouter:
    """The ``/v1/log`` routes (no authentication; see the module docstring)."""
    router = APIRouter(prefix=_PREFIX, tags=["transparency log"], route_class=_LogRoute)

    @router.get("/checkpoint", summary="The newest signed checkpoint (C2SP signed note)")
    async def checkpoint() -> Response:
        try:
            cp = await run_in_threadpool(tlog.latest)
            if cp is None:
                return _refuse("log:not_found", 404, "no checkpoint has been signed yet")
            sigs = await run_in_threadpool(tlog.cosignatures, cp.tree_size)
            final = await run_in_threadpool(tlog.final)
        except Exception as exc:  # noqa: BLE001 - the database is unreachable
            return _refuse("log:unavailable", 503, f"the log cannot be read: {exc}")
        is_final = final is not None and final[0].tree_size == cp.tree_size
        return Response(
            tlog.with_cosignatures(cp, sigs),
            200,
            media_type=_NOTE_TYPE,
            headers={"Warden-Checkpoint-Final": "true" if is_final else "false"},
        )

    @router.get(
        "/key",
        summary="The checkpoint verifier key (C2SP vkey)",
        openapi_extra=_query(required=False, alg="ed25519 (the default) or ml-dsa-65"),
    )
    async def key(request: Request) -> Response:
        # ?alg=ml-dsa-65: the ML-DSA-65 vkey of the checkpoints' second line (issue 21).
        alg = request.query_params.get("alg")
        if alg not in (None, *_KEY_ALGS):
            accepted = " or ".join(_KEY_ALGS)
            return _refuse(
                "log:invalid_params",
                400,
                f"the query parameter alg must be {accepted}, not {alg!r:.40}",
            )
        if alg == "ml-dsa-65":
            if tlog.pq_signer is None:
                return _refuse("log:not_found", 404, "checkpoints are not signed with ML-DSA-65")
            return Response(tlog.pq_signer.vkey() + "\n", 200, media_type=_NOTE_TYPE)
        return Response(tlog.signers[0].vkey() + "\n", 200, media_type=_NOTE_TYPE)

    @router.get("/checkpoint/final", summary="The newest checkpoint enough witnesses cosigned")
    async def final_checkpoint() -> Response:
        found = await run_in_threadpool(tlog.final)
        if found is None:
            return _refuse(
                "log:not_found",
                404,
                f"no checkpoint has {tlog.quorum} witness cosignature(s) yet",
            )
        return Response(tlog.with_cosignatures(*found), 200, media_type=_NOTE_TYPE)

    @router.get(
        "/inclusion",
        summary="An inclusion proof (RFC 9162 §2.1.3)",
        openapi_extra=_query(required=True, index="the leaf's index", size="the tree size"),
    )
    async def inclusion(request: Request) -> Response:
        try:
            index, size = _int_param(request, "index"), _int_param(request, "size")
            return json_response(200, await run_in_threadpool(tlog.inclusion, index, size))
        except (ValueError, ProofError) as exc:
            return _refuse("log:invalid_params", 400, str(exc))
        except LogForked as exc:
            return _refuse("log:unavailable", 503, str(exc))

    @router.get(
        "/consistency",
        summary="A consistency proof (RFC 9162 §2.1.4)",
        openapi_extra=_query(
            required=True, **{"from": "the older tree size", "to": "the newer tree size"}
        ),
    )
    async def consistency(request: Request) -> Response:
        try:
            first, second = _int_param(request, "from"), _int_param(request, "to")
            return json_response(200, await run_in_threadpool(tlog.consistency, first, second))
        except (ValueError, ProofError) as exc:
            return _refuse("log:invalid_params", 400, str(exc))
        except LogForked as exc:
            return _refuse("log:unavailable", 503, str(exc))

    @router.post("/cosignatures", summary="A witness's cosignature (C2SP tlog-cosignature)")
    async def cosignatures(request: Request) -> Response:
        body = await request.body()
        if len(body) > _MAX_NOTE_BYTES:
            return _refuse("log:cosignature_refused", 400, "a checkpoint note is at most 64 KiB")
        try:
            text = body.decode("utf-8")
            stored = await run_in_threadpool(tlog.add_cosignatures, text)
        except UnicodeDecodeError:
            return _refuse("log:cosignature_refused", 400, "the body is not UTF-8 text")
        except NoteError as exc:
            return _refuse("log:cosignature_refused", 400, str(exc))
        return json_response(200, {"stored": stored})

    return router
