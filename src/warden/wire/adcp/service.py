"""One AdCP task call, whatever the transport: :meth:`AdcpService.call`.

The REST routes (:mod:`.rest`) and the MCP tools (:mod:`.mcp`) only parse and render;
this is where a call is checked and run, in this order:

1. the caller's role (an ``agent`` or ``admin`` API key) — else ``PERMISSION_DENIED``;
2. the task name — else ``UNSUPPORTED_FEATURE``; ``adcp_major_version`` other than 3 —
   ``VERSION_UNSUPPORTED``;
3. the request against its schema — ``INVALID_REQUEST``, before any cache (§1.5 rule 1);
4. the idempotency key, if any (required by the schema on ``sync_plans`` and
   ``report_plan_outcome``; on the other tasks the replay rules apply when one is sent;
   ``get_adcp_capabilities`` ignores it): a replay answers the stored body with
   ``replayed: true``; a different request under the key is ``IDEMPOTENCY_CONFLICT``
   (nothing of the first disclosed); a key past the declared window is
   ``IDEMPOTENCY_EXPIRED`` (never re-run);
5. a new cache entry counts against the (agent, account) insert rate — over it,
   ``RATE_LIMITED`` with ``retry_after``, never cached (:mod:`.rate_limit`);
6. the task, in one store transaction with the key's claim and its stored answer: only
   ``completed``/``submitted`` answers are stored; an error rolls everything back, claim
   included, so errors are never cached and change nothing. Concurrent duplicates:
   the claim's primary key lets the first insert win and the others wait for its
   commit, then replay it (wait-and-replay, §1.5 rule 9): one effect.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from warden.adcp.adjustments import report_plan_adjustment
from warden.adcp.callers import revoked_key, still_live
from warden.adcp.checks import Checks
from warden.adcp.errors import AdcpError, unavailable
from warden.adcp.outcomes import report_plan_outcome
from warden.adcp.plan_sync import check_plans, sync_plans
from warden.adcp.rate_limit import InsertRateLimiter
from warden.adcp.reads import capabilities, get_plan_audit_logs, get_task_status
from warden.adcp.state import AdcpState, Answer, Call
from warden.errors import (
    CouldNotDecide,
    InputRejected,
    InvalidRequest,
    StoreUnavailable,
    failure_log_level,
)
from warden.identity.api_keys import Identity, KeyRevoked, KeyStillLive, Role
from warden.store.idempotency import (
    Idempotency,
    IdempotencyConflict,
    IdempotencyExpired,
    IdempotencyInFlight,
)
from warden.wire.adcp.controller import ControllerError, comply_test_controller
from warden.wire.adcp.envelope import echoable_context_id, envelope, failure
from warden.wire.adcp.idempotency import cacheable, key_of, request_hash, scope_of
from warden.wire.adcp.schemas import TASK_SCHEMAS, check_request

log = logging.getLogger(__name__)

Handler = Callable[[Call, Any], Answer]
CACHED_STATUSES = ("completed", "submitted")
CONTROLLER = "comply_test_controller"


@dataclass(frozen=True)
class Reply:
    """A rendered answer: the body (envelope fields at its root), whether it is a
    failure (MCP ``isError``), and the REST HTTP status."""

    body: dict[str, Any]
    failed: bool
    http_status: int


class AdcpService:
    """The AdCP governance agent's tasks over one :class:`AdcpState`."""

    def __init__(
        self,
        state: AdcpState,
        idempotency: Idempotency,
        rate_limiter: InsertRateLimiter | None = None,
        *,
        test_controller: bool = False,
    ) -> None:
        self.state = state
        self.idempotency = idempotency
        self.rate_limiter = rate_limiter or InsertRateLimiter()
        self.checks = Checks(state)
        st = state
        self.handlers: dict[str, Handler] = {
            "get_adcp_capabilities": lambda c, tx: capabilities(st, c, tx),
            "sync_plans": lambda c, tx: sync_plans(st, c, tx),
            "check_governance": self.checks.check_governance,
            "report_plan_outcome": lambda c, tx: report_plan_outcome(st, c, tx),
            "report_plan_adjustment": lambda c, tx: report_plan_adjustment(st, c, tx),
            "get_plan_audit_logs": lambda c, tx: get_plan_audit_logs(st, c, tx),
            "get_task_status": lambda c, tx: get_task_status(st, c, tx),
        }
        assert set(self.handlers) == set(TASK_SCHEMAS)
        state.compliance_mode = test_controller
        if test_controller:
            #: The compliance runner's seeding hook (sandbox accounts only; no schema),
            #: served only when the operator turns it on (``--adcp-test-controller``):
            #: otherwise it is neither listed nor routed (``UNSUPPORTED_FEATURE``).
            self.handlers[CONTROLLER] = lambda c, tx: comply_test_controller(st, c, tx)

    @property
    def tasks(self) -> list[str]:
        return list(self.handlers)

    def call(
        self, task: str, request: Any, who: Identity, live: KeyStillLive | None = None
    ) -> Reply:
        """Run ``task`` for ``who`` (see the module docstring); never raises for a
        request's fault: every failure is a :class:`Reply` with ``failed`` set. ``live``:
        ``who`` was answered from memory (decision 810); a key revoked since raises
        ``AUTH_INVALID`` for the wire to answer as its own, and changes nothing."""
        reply = self._checked(task, request, who, live)
        still_live(live, reply.failed)
        return reply

    def _checked(self, task: str, request: Any, who: Identity, live: KeyStillLive | None) -> Reply:
        req = request if isinstance(request, dict) else {}
        # Only an object is echoed (core/context.json); any other is refused below.
        context = req.get("context") if isinstance(req.get("context"), dict) else None
        context_id = echoable_context_id(req.get("context_id")) or f"ctx_{uuid.uuid4().hex}"
        try:
            if not isinstance(request, dict):
                raise AdcpError("INVALID_REQUEST", "the request must be one JSON object")
            return self._call(task, req, who, context, context_id, live)
        except KeyRevoked:
            raise revoked_key() from None
        except ControllerError as exc:
            body = failure(exc, context_id=context_id, context=context)
            body.update(success=False, error=exc.error, error_detail=exc.message)
            return Reply(body, True, exc.http_status)
        except AdcpError as exc:
            return Reply(
                failure(exc, context_id=context_id, context=context), True, exc.http_status
            )
        except IdempotencyConflict as exc:
            err = AdcpError(
                "IDEMPOTENCY_CONFLICT",
                "this idempotency_key was already used for a different request",
            )
            return self._fail(err, context_id, context, exc)
        except IdempotencyExpired as exc:
            err = AdcpError(
                "IDEMPOTENCY_EXPIRED",
                "this idempotency_key's replay window has passed; the request was not run "
                "again (use a new key)",
            )
            return self._fail(err, context_id, context, exc)
        except IdempotencyInFlight as exc:
            err = AdcpError(
                "IDEMPOTENCY_IN_FLIGHT",
                "the first request with this idempotency_key has not finished; retry with "
                "the same key",
                retry_after=1,
            )
            return self._fail(err, context_id, context, exc)
        except (InvalidRequest, InputRejected) as exc:
            err = AdcpError("INVALID_REQUEST", exc.message)
            return self._fail(err, context_id, context, exc)
        except (StoreUnavailable, CouldNotDecide) as exc:
            log.log(
                failure_log_level(exc), "adcp %s could not complete: %s", task, exc.diagnostics()
            )
            return self._fail(unavailable(), context_id, context, exc)

    @staticmethod
    def _fail(err: AdcpError, context_id: str, context: Any, cause: Exception) -> Reply:
        err.__cause__ = cause
        return Reply(failure(err, context_id=context_id, context=context), True, err.http_status)

    def _call(
        self,
        task: str,
        req: dict[str, Any],
        who: Identity,
        context: Any,
        context_id: str,
        live: KeyStillLive | None,
    ) -> Reply:
        if not who.may(Role.AGENT):
            raise AdcpError(
                "PERMISSION_DENIED",
                f"the {who.role.value} key of {who.principal} may not call AdCP tasks "
                "(it needs the agent or admin role)",
            )
        handler = self.handlers.get(task)
        if handler is None:
            raise AdcpError("UNSUPPORTED_FEATURE", f"no AdCP task {task!r} here")
        major = req.get("adcp_major_version")
        if major is not None and major != 3:
            raise AdcpError(
                "VERSION_UNSUPPORTED",
                "this governance agent speaks AdCP major version 3",
                field="adcp_major_version",
                details={"supported_versions": ["3.2"]},
            )
        stated_plan = None
        if task == "check_governance" and legacy_execution(req):
            # A 3.0/3.1 client's execution check also carries plan_id and a payload (the
            # AdCP 6.x SDK injects them); the token is the binding (decisions.md).
            stated_plan = req.get("plan_id")
            req = {k: v for k, v in req.items() if k not in LEGACY_EXECUTION_EXTRAS}
        if "context" in req and not isinstance(req["context"], dict):
            raise AdcpError(
                "INVALID_REQUEST", "context must be a JSON object when sent", field="context"
            )
        number_problem(req)
        if task != CONTROLLER:
            check_request(task, req)
        if task == "sync_plans":
            check_plans(req)  # before anything is counted or claimed
        key = None if task in ("get_adcp_capabilities", CONTROLLER) else key_of(req)
        st = self.state
        if task == "get_task_status":
            st.desk.expire_due()  # an unanswered review resolves (denied) before it is read
        call = Call(who, req, st.clock(), stated_plan_id=stated_plan)
        with st.store.transaction() as tx:
            if live is not None:  # refused from the statement that carries BEGIN on
                live.guard(tx)
            if task == "check_governance" and isinstance(req.get("plan_id"), str):
                st.check_reads(tx, who.principal, req["plan_id"])
            if key is not None:
                scope = scope_of(who.principal, req)
                stored = self.idempotency.begin(
                    tx.idempotency_keys, scope, key, request_hash(task, req)
                )
                if stored is None:
                    # A new cache entry: counted, and refused (rolled back, so never
                    # cached) over the per-(agent, account) rate (§1.5 rule 8).
                    cost = len(req["plans"]) if task == "sync_plans" else 1
                    self.rate_limiter.take(scope, task, cost)
                if stored is not None:
                    if live is not None:
                        live.settle(tx)
                    body = _stored(stored.body)
                    return Reply(
                        envelope(
                            body,
                            status=str(body.pop("status")),
                            context_id=str(body.pop("context_id", context_id)),
                            context=context,
                            replayed=True,
                            message=body.pop("message", None),
                            task_id=body.pop("task_id", None),
                        ),
                        False,
                        stored.status_code,
                    )
            answer = handler(call, tx)
            if live is not None:
                live.settle(tx)
            body = envelope(
                answer.body,
                status=answer.status,
                context_id=context_id,
                context=context,
                message=answer.message,
                task_id=answer.task_id,
            )
            http = 202 if answer.status == "submitted" else 200
            if key is not None and answer.status in CACHED_STATUSES:
                self.idempotency.finish(tx.idempotency_keys, scope, key, http, cacheable(body))
        return Reply(body, False, http)


#: What a pre-3.2 execution check may carry beside its token, ignored (the token binds).
LEGACY_EXECUTION_EXTRAS = frozenset(
    {"plan_id", "payload", "tool", "target_agent", "proposed_commitment", "purchase_type"}
)


def legacy_execution(req: dict[str, Any]) -> bool:
    """An execution check (a token with planned delivery or metrics) from a client that
    does not declare AdCP 3.2 (no ``adcp_version``, or one before 3.2)."""
    if "governance_context" not in req:
        return False
    if "planned_delivery" not in req and "delivery_metrics" not in req:
        return False
    version = req.get("adcp_version")
    if not isinstance(version, str):
        return True
    major, _, rest = version.partition(".")
    minor = rest.split("-")[0].split(".")[0]
    return major == "3" and minor.isdigit() and int(minor) < 2


#: The largest magnitude a request number may have: JSON's interoperable range and
#: RFC 8785's (token payload hashes), far above any amount of money.
MAX_NUMBER = 2**53 - 1


def number_problem(value: Any, pointer: str = "") -> None:
    """``INVALID_REQUEST`` naming the first number of ``value`` that is not finite
    (``NaN``/``Infinity``, which MCP's JSON parser lets through, or an overflow such as
    ``1e400``) or beyond ±(2^53 − 1); the number itself is not echoed."""
    stack: list[tuple[Any, str]] = [(value, pointer)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, dict):
            stack.extend((x, f"{at}/{_escape(str(k))}") for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((x, f"{at}/{i}") for i, x in enumerate(v))
        elif isinstance(v, float) and math.isnan(v):
            raise AdcpError(
                "INVALID_REQUEST", f"NaN at {at or '/'} is not a JSON number", field=_path(at)
            )
        elif isinstance(v, float) and math.isinf(v):
            raise AdcpError(
                "INVALID_REQUEST",
                f"the number at {at or '/'} is infinite or too large for a double (e.g. 1e400)",
                field=_path(at),
            )
        elif isinstance(v, int | float) and not isinstance(v, bool) and abs(v) > MAX_NUMBER:
            raise AdcpError(
                "INVALID_REQUEST",
                f"the number at {at or '/'} is too large: at most {MAX_NUMBER} in magnitude",
                field=_path(at),
            )


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _path(pointer: str) -> str | None:
    from warden.wire.adcp.schemas import _jsonpath

    return _jsonpath(pointer) if pointer else None


def _stored(text: str) -> dict[str, Any]:
    from warden.crypto.canonical import parse_strict_json

    value = parse_strict_json(text)
    assert isinstance(value, dict)
    return value
