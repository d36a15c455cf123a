"""The approval desk over REST: ``/v1/approvals`` (list, show, approve, deny, re-route).

Same envelope and authentication as the rest of ``/v1`` (seed ``003_…``: success
``{data, nextActions}``, refusal ``{blockedBy, resolution}``). Listing and deciding
need an ``approver`` (or ``admin``) key; a task's requesting agent may read its own
task. Refusals: ``approval:task_not_found`` (404), ``approval:not_permitted`` (403:
maker-checker, approver group), ``approval:task_conflict`` (409: already decided,
expired, already voted), ``input:invalid`` (400).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Security
from fastapi.responses import Response
from fastapi.security import HTTPBearer
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr

from warden.approvals.desk import ApprovalDesk, TaskNotFound
from warden.approvals.group_check import empty_group_warning
from warden.approvals.tasks import ApprovalState, Task, TaskKind, TaskWire
from warden.identity.api_keys import ApiKeys, Role
from warden.reasons import NO_REASON, says_something
from warden.wire.spend.auth import KeyAuth, caller
from warden.wire.spend.models import ErrorEnvelope, Success
from warden.wire.spend.render import json_response, success
from warden.wire.spend.routes import PREFIX, RawBody, make_route_class

StateFilter = Literal["pending", "approved", "denied", "expired", "consumed", "canceled", "all"]


class ApprovalTask(BaseModel):
    """One approval task (:meth:`warden.approvals.tasks.Task.to_dict`)."""

    model_config = ConfigDict(extra="allow")

    id: str
    kind: str
    state: str
    status: str
    wire: str
    created_at: str
    updated_at: str
    expires_at: str
    action: dict[str, Any]
    action_hash: str
    scope: str
    requester: dict[str, Any]
    approver_group: str
    approvals_required: int
    question: str
    timeout_disposition: str
    correlation: dict[str, Any]
    policy: dict[str, Any]
    votes: list[dict[str, Any]]
    history: list[dict[str, Any]]
    consumed_by: dict[str, Any] | None
    detail: dict[str, Any]
    url: str | None = None


class ApprovalList(BaseModel):
    tasks: list[ApprovalTask]
    count: int
    truncated: bool = Field(description="More tasks match than `limit` returned.")


class ApprovalData(BaseModel):
    task: ApprovalTask
    warning: str | None = Field(
        default=None,
        description="Set when the change was made but may not be what was meant: a task "
        "re-routed to a group in which no active approver key is (yet).",
    )


def _not_blank(text: str) -> str:
    # The desk's own rule (ApprovalDesk.deny), refused here in this wire's format.
    if not says_something(text):
        raise ValueError(f"a deny must say why; {NO_REASON}")
    return text


def _none_or_something(text: str) -> str:
    # An optional reason may be left out (""), but one given must say something: an
    # invisible reason would be recorded as if it said why.
    if text and not says_something(text):
        raise ValueError(f"a reason, when given, must say something; {NO_REASON}")
    return text


class VoteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[StrictStr, Field(max_length=2000), AfterValidator(_none_or_something)] = ""


class DenyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[StrictStr, Field(min_length=1, max_length=2000), AfterValidator(_not_blank)]


class RerouteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
    reason: Annotated[StrictStr, Field(max_length=2000), AfterValidator(_none_or_something)] = ""


def _next(task: Task) -> list[str]:
    if task.state is ApprovalState.PENDING:
        return [
            f"POST /v1/approvals/{task.id}/approve {{reason}} approves "
            f"({len(task.approvals())}/{task.approvals_required} so far)",
            f'POST /v1/approvals/{task.id}/deny {{"reason"}} denies',
            f'POST /v1/approvals/{task.id}/reroute {{"group", "reason"}} sends it elsewhere',
        ]
    if task.state is ApprovalState.APPROVED:
        if task.kind is TaskKind.ACTION_REQUEST:
            return [
                "The requester may now act and record the outcome (POST "
                "/v1/action-requests/{id}/outcome); the approval authorizes one tool call"
            ]
        return ["The requester resubmits the same action; it is allowed once"]
    return ["The task is decided; its trail is in history"]


def approvals_router(
    desk: ApprovalDesk, keys: ApiKeys, *, max_body_bytes: int = 1 << 20
) -> APIRouter:
    """The ``/v1/approvals`` routes, in the OpenAPI document."""
    auth = KeyAuth(keys)
    route_class = make_route_class(auth, max_body_bytes, role=Role.APPROVER)
    read_class = make_route_class(auth, max_body_bytes, any_role=True)
    router = APIRouter(
        prefix=PREFIX + "/approvals",
        tags=["approval desk"],
        route_class=route_class,
        responses={"4XX": {"model": ErrorEnvelope, "description": "Refused: see blockedBy"}},
        dependencies=[Security(HTTPBearer(auto_error=False, description="An API key"))],
    )

    def answer(task: Task) -> Response:
        return json_response(
            200, success(ApprovalData(task=ApprovalTask(**desk.view(task))), _next(task))
        )

    @router.get(
        "",
        response_model=Success[ApprovalList],
        summary="List approval tasks (default: pending), newest first",
    )
    def list_approvals(
        state: StateFilter = "pending",
        group: Annotated[str | None, Query(max_length=64)] = None,
        wire: TaskWire | None = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
    ) -> Response:
        states = () if state == "all" else (ApprovalState(state),)
        tasks = desk.list(states=states, group=group, wire=wire, limit=limit + 1)
        views = [ApprovalTask(**desk.view(t)) for t in tasks[:limit]]
        steps = ["GET /v1/approvals/{taskId} shows one task and its trail"]
        if len(tasks) > limit:
            steps.append(f"More than {limit} match: raise limit (at most 500) or filter")
        data = ApprovalList(tasks=views, count=len(views), truncated=len(tasks) > limit)
        return json_response(200, success(data, steps))

    # Reading one task is open to its requesting agent too, so it has its own route class.
    read = APIRouter(
        prefix=PREFIX + "/approvals",
        tags=["approval desk"],
        route_class=read_class,
        responses={"4XX": {"model": ErrorEnvelope, "description": "Refused: see blockedBy"}},
        dependencies=[Security(HTTPBearer(auto_error=False, description="An API key"))],
    )

    @read.get(
        "/{task_id}",
        response_model=Success[ApprovalData],
        summary="Show one approval task: action, policy, requester, votes and trail",
    )
    def show_approval(task_id: str) -> Response:
        who = caller()
        task = desk.get(task_id)
        if task is None or not (who.may(Role.APPROVER) or who.principal in task.requester.names()):
            # Absent and not-yours read the same.
            raise TaskNotFound(f"no approval task {task_id!r}")
        return answer(task)

    @router.post(
        "/{task_id}/approve",
        response_model=Success[ApprovalData],
        summary="Approve (one vote; N distinct approvers when the rule needs N)",
    )
    def approve(task_id: str, raw: RawBody, body: VoteRequest | None = None) -> Response:
        return answer(desk.approve(task_id, caller(), (body or VoteRequest()).reason))

    @router.post(
        "/{task_id}/deny",
        response_model=Success[ApprovalData],
        summary="Deny with a reason (one deny decides)",
    )
    def deny(task_id: str, raw: RawBody, body: DenyRequest) -> Response:
        return answer(desk.deny(task_id, caller(), body.reason))

    @router.post(
        "/{task_id}/reroute",
        response_model=Success[ApprovalData],
        summary="Re-route a pending task to another approver group",
    )
    def reroute(task_id: str, raw: RawBody, body: RerouteRequest) -> Response:
        task = desk.reroute(task_id, caller(), body.group, body.reason)
        warning = empty_group_warning(keys, task.approver_group)
        if warning is None:
            return answer(task)
        data = ApprovalData(task=ApprovalTask(**desk.view(task)), warning=warning)
        return json_response(200, success(data, [*_next(task), warning]))

    both = APIRouter()
    both.include_router(read)
    both.include_router(router)
    return both
