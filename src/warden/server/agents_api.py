"""The agent identity registry over REST: ``/v1/agents`` (admin keys only).

Same envelope and authentication as the rest of ``/v1`` (success ``{data, nextActions}``,
refusal ``{blockedBy, resolution}``). ``POST /v1/agents`` registers an agent and returns
its first ACS key once (``credential: {agent_id, key_id, ikm}``); ``GET /v1/agents``,
``GET /v1/agents/{id}`` (with its key ids), ``POST /v1/agents/{id}/rotate`` (a new key,
shown once; the previous ones revoked) and ``POST /v1/agents/{id}/revoke``. Every change
is an audit event on the agent's ``agents`` chain, naming the admin principal.
Refusals: ``agent:not_found`` (404), ``agent:exists`` (409), ``agent:revoked`` (409),
``input:invalid`` (400).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Security
from fastapi.responses import Response
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from warden.errors import ConfigError
from warden.identity.agents import (
    Agent,
    AgentExists,
    AgentNotFound,
    AgentRegistry,
    AgentRevoked,
    undefined_budget_warning,
)
from warden.identity.api_keys import ApiKeys, Role
from warden.wire.spend.auth import KeyAuth, caller
from warden.wire.spend.models import ErrorEnvelope, Success
from warden.wire.spend.render import Refusal, invalid, json_response, success
from warden.wire.spend.routes import PREFIX, RawBody, make_route_class


class AgentView(BaseModel):
    """One agent (:meth:`warden.identity.agents.Agent.as_dict`), with its key ids."""

    model_config = ConfigDict(extra="allow")

    agent_id: str
    owner: str
    groups: list[str]
    budgets: list[str]
    created_at: str
    revoked_at: str | None
    active: bool


class Credential(BaseModel):
    agent_id: str
    key_id: str
    ikm: str = Field(description="64 hex characters; shown this once, never stored.")


class AgentData(BaseModel):
    agent: AgentView


class AgentCreated(BaseModel):
    agent: AgentView
    credential: Credential
    warning: str | None = Field(
        default=None,
        description="Present when a listed budget is not defined yet (registered anyway).",
    )


class KeyIssued(BaseModel):
    credential: Credential


class AgentList(BaseModel):
    agents: list[AgentView]
    count: int


class AddAgent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_id: StrictStr
    owner: StrictStr
    groups: Annotated[list[StrictStr], Field(max_length=32)] = []
    budgets: Annotated[list[StrictStr], Field(max_length=64)] = []


def _refusal(exc: Exception) -> Refusal:
    if isinstance(exc, AgentNotFound):
        return Refusal("agent:not_found", 404, exc.message)
    if isinstance(exc, AgentExists):
        return Refusal("agent:exists", 409, exc.message)
    if isinstance(exc, AgentRevoked):
        return Refusal("agent:revoked", 409, exc.message)
    if isinstance(exc, ConfigError):
        return invalid(exc.message)
    raise exc


def agents_router(
    registry: AgentRegistry, keys: ApiKeys, *, max_body_bytes: int = 1 << 20
) -> APIRouter:
    """The ``/v1/agents`` routes (admin), in the OpenAPI document."""
    router = APIRouter(
        prefix=PREFIX + "/agents",
        tags=["agent identities"],
        route_class=make_route_class(KeyAuth(keys), max_body_bytes, role=Role.ADMIN),
        responses={"4XX": {"model": ErrorEnvelope, "description": "Refused: see blockedBy"}},
        dependencies=[Security(HTTPBearer(auto_error=False, description="An admin API key"))],
    )

    def view(agent: Agent) -> AgentView:
        return AgentView(**agent.as_dict())

    @router.get("", response_model=Success[AgentList], summary="List every agent")
    def list_agents() -> Response:
        views = [view(a) for a in registry.list()]
        return json_response(
            200,
            success(AgentList(agents=views, count=len(views)), ["GET /v1/agents/{id} shows one"]),
        )

    @router.post(
        "",
        response_model=Success[AgentCreated],
        summary="Register an agent; its first ACS key is returned once",
    )
    def add_agent(raw: RawBody, body: AddAgent) -> Response:
        try:
            agent, cred = registry.add(
                body.agent_id, body.owner, body.groups, body.budgets, by=caller().principal
            )
        except (ConfigError, AgentExists) as exc:
            raise _refusal(exc) from exc
        data = AgentCreated(agent=view(agent), credential=Credential(**cred.as_dict()))
        undefined = registry.undefined_budgets(agent.budgets)
        if undefined:
            data.warning = "; ".join(undefined_budget_warning(b) for b in undefined)
        return json_response(
            200,
            success(
                data,
                [
                    "Give the credential to the agent now: Warden cannot show it again",
                    f"POST /v1/agents/{agent.agent_id}/rotate issues a new key",
                ],
            ),
        )

    @router.get("/{agent_id}", response_model=Success[AgentData], summary="Show one agent")
    def show_agent(agent_id: str) -> Response:
        agent = registry.get(agent_id)
        if agent is None:
            raise _refusal(AgentNotFound(f"no agent {agent_id!r}"))
        doc: dict[str, Any] = agent.as_dict()
        doc["keys"] = [k.as_dict() for k in registry.keys(agent_id)]
        return json_response(
            200,
            success(
                AgentData(agent=AgentView(**doc)),
                [f"POST /v1/agents/{agent_id}/rotate issues a new key"],
            ),
        )

    @router.post(
        "/{agent_id}/rotate",
        response_model=Success[KeyIssued],
        summary="Issue a new ACS key (returned once) and revoke the previous ones",
    )
    def rotate_agent(agent_id: str, raw: RawBody) -> Response:
        try:
            cred = registry.rotate(agent_id, by=caller().principal)
        except (AgentNotFound, AgentRevoked) as exc:
            raise _refusal(exc) from exc
        return json_response(
            200,
            success(
                KeyIssued(credential=Credential(**cred.as_dict())),
                ["Give the new key to the agent now: its previous keys no longer verify"],
            ),
        )

    @router.post(
        "/{agent_id}/revoke",
        response_model=Success[AgentData],
        summary="Revoke an agent, its ACS keys and its agent API keys",
    )
    def revoke_agent(agent_id: str, raw: RawBody) -> Response:
        try:
            agent = registry.revoke(agent_id, by=caller().principal)
        except AgentNotFound as exc:
            raise _refusal(exc) from exc
        return json_response(
            200,
            success(
                AgentData(agent=view(agent)),
                ["The agent's ACS and API keys no longer authenticate, on every replica"],
            ),
        )

    return router
