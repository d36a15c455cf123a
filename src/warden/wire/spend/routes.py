"""The Governed Spend REST routes (``/v1``): HTTP in, :class:`SpendWire` operations, HTTP out.

Every route requires an API key (:mod:`.auth`) with the route's role, checked first,
before the body is read. Every answer is a seed ``003_…`` envelope, including FastAPI's own
validation and body errors: the router's route class renders them (there is no
``422 {detail}`` under ``/v1``), and :class:`SpendBodyCap` stops reading a body at the
configured size. The operations themselves are in :mod:`.operations`.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from fastapi import APIRouter, Depends, Header, Request, Security
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from warden.approvals.desk import ApprovalDesk
from warden.core.guardian import Guardian
from warden.core.media import query_pairs, query_params_problem
from warden.crypto.canonical import parse_request_json
from warden.identity.api_keys import ApiKeys, Role
from warden.spend.engine import SpendEngine
from warden.store.idempotency import KEY_PATTERN, KEY_RULE, Idempotency, InvalidIdempotencyKey
from warden.wire.spend.auth import KeyAuth, checks_caller_in_transaction
from warden.wire.spend.models import (
    BudgetData,
    BudgetDefineData,
    BudgetDefinition,
    BudgetIncreaseRequest,
    BudgetListData,
    CommitData,
    CommitRequest,
    ErrorEnvelope,
    QuoteData,
    QuoteRequest,
    ReasonRequest,
    ReceiptData,
    ReleaseData,
    ReservationData,
    Resolution,
    Success,
    TaskData,
    UndoData,
)
from warden.wire.spend.operations import SpendWire, WireStore
from warden.wire.spend.render import Refusal, dump, invalid, json_response, refusal_for

PREFIX = "/v1"


def error_response(exc: BaseException) -> Response:
    refusal = refusal_for(exc)
    return json_response(refusal.status, dump(refusal.envelope()), refusal.headers)


def validation_refusal(exc: RequestValidationError) -> Refusal:
    """FastAPI's request validation errors as the spend error envelope (never 422)."""
    errors = list(exc.errors())
    for err in errors:
        loc = tuple(str(p) for p in err.get("loc", ()))
        if loc[:1] == ("header",) and loc[-1].lower() == "idempotency-key":
            return refusal_for(InvalidIdempotencyKey(KEY_RULE))
        if err.get("type") == "json_invalid":
            detail = (err.get("ctx") or {}).get("error", "invalid JSON")
            return invalid(
                f"the body is not valid JSON: {detail}",
                gate="input:invalid_json",
                hint="send one JSON object with content-type: application/json",
            )
        if loc == ("body",) and (
            err.get("type") in ("missing", "model_attributes_type")
            and not isinstance(err.get("input"), dict)
        ):
            return invalid(
                "the body must be one JSON object sent with content-type: application/json"
            )
    parts = []
    for err in errors[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())[1:]) or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return invalid("invalid request: " + "; ".join(parts) + more)


class _BodyTooLarge(Exception):
    """The body grew past the cap while it was read (no or a false content-length)."""


def _too_large(limit: int) -> Refusal:
    return Refusal(
        "input:body_too_large",
        413,
        f"the request body is larger than {limit} bytes",
        resolution=Resolution(type="retry", hint=f"send at most {limit} bytes"),
    )


def http_refusal(exc: StarletteHTTPException, limit: int) -> Refusal:
    if isinstance(exc.__cause__, _BodyTooLarge) or exc.status_code == 413:
        return _too_large(limit)
    return invalid(f"the request could not be read: {exc.detail}")


class SpendBodyCap:
    """ASGI middleware: a ``/v1`` request body stops being read past ``limit`` bytes.

    A declared ``content-length`` over the cap is refused before reading (after the
    token check, in the route); a body without one raises while it is read, and the
    route answers ``413 input:body_too_large``. Nothing beyond the cap is buffered.
    """

    def __init__(self, app: ASGIApp, limit: int, prefix: str = PREFIX) -> None:
        self.app = app
        self.limit = limit
        self.prefix = prefix + "/"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        seen = 0

        async def receive_capped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _BodyTooLarge
            return message

        await self.app(scope, receive_capped, send)


def make_route_class(
    auth: KeyAuth, limit: int, role: Role | None = None, *, any_role: bool = False
) -> type[APIRoute]:
    """A route class that authenticates first (``role``; by default admin for PUT and
    agent otherwise; ``any_role``: any valid key), caps the body, then renders every
    failure as a seed ``003_…`` error envelope."""

    class _Route(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()
            # Defining budgets (the PUT route) is an administrator's job; the rest is an
            # agent's. The catch-all that answers unknown routes admits any key.
            catch_all = "{rest:path}" in self.path or self.path == PREFIX
            need = (
                None
                if any_role or catch_all
                else role or (Role.ADMIN if self.methods == {"PUT"} else Role.AGENT)
            )

            remembered = getattr(self.endpoint, "checks_caller_in_transaction", False)
            known = _query_params(self.dependant)

            async def guarded(request: Request) -> Response:
                try:
                    auth.check(
                        request.headers.getlist("authorization"), need, remembered=remembered
                    )
                    query = not catch_all and request.scope["query_string"]  # mostly b"": no parse
                    if query and (problem := query_params_problem(query_pairs(query), *known)):
                        raise invalid(problem)
                    length = request.headers.get("content-length", "")
                    if length.isdigit() and int(length) > limit:
                        raise _too_large(limit)
                    # Parsed strictly before FastAPI reads it, so every route names the
                    # problem (FastAPI only says "There was an error parsing the body").
                    if not catch_all:  # an unknown path is answered 404 whatever its body
                        await strict_body(request)
                    return await handler(request)
                except _BodyTooLarge:  # read by a dependency, not by FastAPI's body parser
                    return error_response(_too_large(limit))
                except RequestValidationError as exc:
                    return error_response(validation_refusal(exc))
                except StarletteHTTPException as exc:
                    return error_response(http_refusal(exc, limit))
                except ClientDisconnect:
                    raise  # nobody to answer: the app's handler (decision 1202)
                except Exception as exc:  # noqa: BLE001 - every failure gets an envelope
                    return error_response(exc)

            return guarded

    return _Route


def _query_params(dependant: Dependant) -> tuple[frozenset[str], frozenset[str]]:
    """The query parameters of a route (and its dependencies), and those that take one
    value: any other is refused 400 (decision 1180), and so is a repeat of one (1035)."""

    def many(annotation: Any) -> bool:
        if get_origin(annotation) in (list, tuple, set, frozenset, Sequence):
            return True
        return get_origin(annotation) in (Union, UnionType) and any(
            many(arg) for arg in get_args(annotation)
        )

    def fields(d: Dependant) -> list[Any]:
        return [*d.query_params, *(f for sub in d.dependencies for f in fields(sub))]

    found = fields(dependant)
    single = (f.alias for f in found if not many(f.field_info.annotation))
    return frozenset(f.alias for f in found), frozenset(single)


async def strict_body(request: Request) -> Any:
    """The body as one strict JSON value (``None`` if empty), parsed once per request.

    Raises :class:`~warden.errors.ParseError` in
    :func:`~warden.crypto.canonical.parse_request_json`'s words, the ones
    ``/v1/action-requests`` and the other wires use ("body is not valid UTF-8",
    "arrays and objects are nested deeper than 128 levels", "invalid JSON: …"),
    answered ``400 input:invalid_json``; ``_BodyTooLarge`` past the body cap.
    """
    if not hasattr(request.state, "strict_body"):
        raw = await request.body()
        request.state.strict_body = parse_request_json(raw) if raw.strip() else None
    return request.state.strict_body


async def _strict_body(request: Request) -> Any:
    """The body parsed strictly (duplicate keys, NaN refused): what idempotency hashes.

    Two ``Idempotency-Key`` headers are refused: which one would count is ambiguous.
    """
    if len(request.headers.getlist("idempotency-key")) > 1:
        raise invalid(
            "send one Idempotency-Key header, not several",
            gate="input:invalid_idempotency_key",
            hint="send the request again with a single Idempotency-Key header",
        )
    return await strict_body(request)


RawBody = Annotated[Any, Depends(_strict_body)]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        pattern=KEY_PATTERN,
        description="Replays the stored answer of the first request with this key "
        "(same body) instead of running it again; see docs/decisions.md.",
    ),
]
_ERRORS: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorEnvelope, "description": "Refused: blockedBy names the gate"},
    "5XX": {"model": ErrorEnvelope, "description": "Warden could not complete the request"},
}


def spend_router(
    engine: SpendEngine,
    store: WireStore,
    *,
    keys: ApiKeys,
    guardian: Guardian,
    idempotency: Idempotency | None = None,
    max_body_bytes: int = 1 << 20,
    desk: ApprovalDesk | None = None,
) -> APIRouter:
    """The ``/v1`` router of the Governed Spend wire, every route in the OpenAPI document.

    ``keys`` authenticate every route (agent role; admin to define budgets);
    ``idempotency`` the replay rules (TTL, clock); ``max_body_bytes`` the largest body
    read (413 beyond); ``guardian`` decides each quote (``spend/quote``) in the pipeline,
    whose gates file its desk ask and hold it; ``desk`` files and matches the approvals
    a quote or budget request needs.
    """
    wire = SpendWire(
        engine,
        store,
        KeyAuth(keys),
        idempotency or Idempotency(),
        max_body_bytes,
        guardian,
        desk,
    )
    route_class = make_route_class(wire.auth, max_body_bytes)
    router = APIRouter(
        prefix=PREFIX,
        tags=["governed spend"],
        route_class=route_class,
        responses=_ERRORS,
        dependencies=[
            Security(
                HTTPBearer(
                    auto_error=False,
                    description="An API key (`warden keys create`); the bootstrap admin key "
                    "is <data-dir>/api.token",
                )
            )
        ],
    )

    @router.post(
        "/quotes",
        response_model=Success[QuoteData],
        summary="Quote and reserve a spend (holds the amount against every budget on the path)",
    )
    @checks_caller_in_transaction
    def create_quote(body: QuoteRequest, raw: RawBody, key: IdempotencyKey = None) -> Response:
        return wire.mutate(
            "POST /v1/quotes",
            {},
            raw,
            key,
            lambda tx, eng: wire.quote(tx, eng, body),
            lambda tx: wire.quote_reads(tx, body),
        )

    @router.post(
        "/reservations/{reservation_id}/commit",
        response_model=Success[CommitData],
        summary="Commit a reserved spend at its actual cost",
    )
    def commit_reservation(
        reservation_id: str, body: CommitRequest, raw: RawBody, key: IdempotencyKey = None
    ) -> Response:
        return wire.mutate(
            "POST /v1/reservations/{id}/commit",
            {"id": reservation_id},
            raw,
            key,
            lambda tx, eng: wire.commit(tx, eng, reservation_id, body),
        )

    @router.post(
        "/reservations/{reservation_id}/release",
        response_model=Success[ReleaseData],
        summary="Release a reserved spend (the action failed or was cancelled)",
    )
    def release_reservation(
        reservation_id: str,
        raw: RawBody,
        body: ReasonRequest | None = None,
        key: IdempotencyKey = None,
    ) -> Response:
        return wire.mutate(
            "POST /v1/reservations/{id}/release",
            {"id": reservation_id},
            raw,
            key,
            lambda tx, eng: wire.release(tx, eng, reservation_id, body or ReasonRequest()),
        )

    @router.get(
        "/reservations/{reservation_id}",
        response_model=Success[ReservationData],
        summary="Read a reservation",
    )
    def get_reservation(reservation_id: str) -> Response:
        return wire.read(lambda tx, eng: wire.get_reservation(tx, eng, reservation_id))

    @router.get(
        "/receipts/{receipt_id}", response_model=Success[ReceiptData], summary="Read a receipt"
    )
    def get_receipt(receipt_id: str) -> Response:
        return wire.read(lambda tx, eng: wire.get_receipt(tx, eng, receipt_id))

    @router.post(
        "/receipts/{receipt_id}/undo",
        response_model=Success[UndoData],
        summary="Undo a committed spend (its amount returns to every budget it was charged to)",
    )
    def undo_receipt(
        receipt_id: str,
        raw: RawBody,
        body: ReasonRequest | None = None,
        key: IdempotencyKey = None,
    ) -> Response:
        return wire.mutate(
            "POST /v1/receipts/{id}/undo",
            {"id": receipt_id},
            raw,
            key,
            lambda tx, eng: wire.undo(tx, eng, receipt_id, body or ReasonRequest()),
        )

    @router.get("/budgets", response_model=Success[BudgetListData], summary="List the USD budgets")
    def list_budgets() -> Response:
        budgets = store.budgets()
        return wire.read(lambda tx, eng: wire.list_budgets(tx, eng, budgets))

    @router.get(
        "/budgets/{budget_id}",
        response_model=Success[BudgetData],
        summary="Read a budget: cap, period, usage in the current bucket, remaining on its path",
    )
    def get_budget(budget_id: str) -> Response:
        return wire.read(lambda tx, eng: wire.get_budget(tx, eng, budget_id))

    @router.put(
        "/budgets/{budget_id}",
        response_model=Success[BudgetDefineData],
        status_code=200,
        responses={201: {"model": Success[BudgetDefineData], "description": "Created"}},
        summary="Define or update a budget (admin)",
    )
    def put_budget(
        budget_id: str, body: BudgetDefinition, raw: RawBody, key: IdempotencyKey = None
    ) -> Response:
        return wire.mutate(
            "PUT /v1/budgets/{id}",
            {"id": budget_id},
            raw,
            key,
            lambda tx, eng: wire.define(tx, eng, budget_id, body),
        )

    @router.post(
        "/budget-requests",
        status_code=403,
        response_model=ErrorEnvelope,
        summary="Ask a human to raise a budget's cap (answers approval:required with a task)",
    )
    def request_budget_increase(
        body: BudgetIncreaseRequest, raw: RawBody, key: IdempotencyKey = None
    ) -> Response:
        return wire.mutate(
            "POST /v1/budget-requests",
            {},
            raw,
            key,
            lambda tx, eng: wire.request_increase(tx, eng, body),
        )

    @router.get("/tasks/{task_id}", response_model=Success[TaskData], summary="Read a task")
    def get_task(task_id: str) -> Response:
        return wire.read(lambda tx, eng: wire.get_task(tx, eng, task_id))

    any_method = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

    # ``/v1`` itself too: the app does not redirect slashes (a bare 307 is no answer).
    @router.api_route("", methods=any_method, include_in_schema=False)
    @router.api_route("/{rest:path}", methods=any_method, include_in_schema=False)
    def unknown_route(request: Request) -> Response:
        allowed = sorted(
            {
                m
                for r in router.routes
                if isinstance(r, APIRoute)
                and r.endpoint is not unknown_route
                and r.path_regex.match(request.url.path)
                for m in (r.methods or ())
            }
        )
        if allowed:
            raise Refusal(
                "input:method_not_allowed",
                405,
                f"{request.method} is not allowed on {request.url.path}; use {', '.join(allowed)}",
                resolution=Resolution(type="retry", hint=f"use {', '.join(allowed)}"),
                headers={"Allow": ", ".join(allowed)},
            )
        raise Refusal(
            "input:unknown_route",
            404,
            f"no route {request.method} {request.url.path}",
            resolution=Resolution(type="retry", hint="the routes are listed in /openapi.json"),
        )

    return router


__all__ = ["PREFIX", "SpendBodyCap", "make_route_class", "spend_router"]
