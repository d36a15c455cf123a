"""What every AdCP task shares: the store, the spend ledger, the Guardian, the approval
desk, the audit chain, the governance-token signer and the clock — and the few
operations several tasks need (the plan's budget, its chain entry, reading our own
tokens back).

Every state change a task makes goes through one store transaction ``tx``
(``SqlStore.transaction()``): its rows (:func:`warden.store.adcp_sql.adcp_rows`), the
spend ledger joined to it (:meth:`SpendEngine.within`), desk tasks, and the
``warden/adcp.<event>`` audit entry appended by :meth:`AdcpState.audit` — so an effect
and its audit entry commit together or not at all.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Protocol

from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import OKPKey

from warden.adcp._jose import ProfileRegistry
from warden.adcp.errors import AdcpError
from warden.adcp.governance_token import GovernanceSigner
from warden.approvals.desk import ApprovalDesk, DeskTx
from warden.core.guardian import Guardian
from warden.crypto.canonical import parse_strict_json
from warden.identity.api_keys import Identity
from warden.ledger.ledger import Ledger
from warden.ledger.warden_chain import WardenChain, chain_session_id
from warden.spend.audit import spend_session_id
from warden.spend.budgets import Period, period_key
from warden.spend.engine import SpendEngine
from warden.store.adcp_sql import PlanRow, SqlAdcp, adcp_rows
from warden.store.idempotency import IdempotencyKeys

CHAIN_KIND = "adcp"
_REGISTRY = ProfileRegistry(["EdDSA"])


class AdcpTx(DeskTx, Protocol):
    """One store write transaction as the AdCP wire uses it."""

    @property
    def idempotency_keys(self) -> IdempotencyKeys: ...

    def usage(self, budget_id: str, bucket: str) -> tuple[Decimal, Decimal]: ...


class AdcpStore(Protocol):
    def transaction(self) -> AbstractContextManager[Any]: ...


def budget_id_for(principal: str, plan_id: str) -> str:
    """The spend-ledger budget of a caller's plan: ``adcp:`` + 40 hex characters."""
    digest = hashlib.sha256(f"{principal}\x00{plan_id}".encode()).hexdigest()
    return f"adcp:{digest[:40]}"


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass(frozen=True)
class Call:
    """One task invocation: who asked, the validated request, and when."""

    who: Identity
    request: dict[str, Any]
    now: datetime
    #: The ``plan_id`` a pre-3.2 execution check stated beside its token (checked, then
    #: ignored: the token binds the plan).
    stated_plan_id: Any = None


@dataclass(frozen=True)
class Answer:
    """A task's successful answer: body fields and the envelope ``status`` (completed or
    submitted), with ``task_id``/``message`` for an async submission."""

    body: dict[str, Any]
    status: str = "completed"
    task_id: str | None = None
    message: str | None = None


class AdcpState:
    """The shared pieces (see the module docstring). Thread-safe: each task runs in its
    own store transaction."""

    def __init__(
        self,
        store: AdcpStore,
        engine: SpendEngine,
        guardian: Guardian,
        desk: ApprovalDesk,
        ledger: Ledger,
        signer: GovernanceSigner,
        *,
        replay_ttl_seconds: int,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.store = store
        self.engine = engine
        self.guardian = guardian
        self.desk = desk
        self.signer = signer
        self.replay_ttl_seconds = replay_ttl_seconds
        #: Compliance-testing mode (``--adcp-test-controller``): the one API key the
        #: AdCP runner holds may also accept the adjustments it reported.
        self.compliance_mode = False
        #: The ``request_signing`` capability block (None: not advertised).
        self.request_signing: dict[str, Any] | None = None
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        self.chain = WardenChain(
            ledger,
            CHAIN_KIND,
            lambda: self.clock(),
            negotiated=lambda name: {"kind": "adcp_plan", "plan": name},
        )
        self._public = OKPKey.import_key(signer.public_jwk())

    @staticmethod
    def rows(tx: Any) -> SqlAdcp:
        return adcp_rows(tx)

    def audit(
        self, tx: Any, principal: str, plan_id: str, event: str, detail: dict[str, Any]
    ) -> str:
        """Append ``warden/adcp.<event>`` to the plan's chain in ``tx``; its entry hash."""
        name = f"{principal}/{plan_id}"
        entry = self.chain.append(tx, name, event, new_id(event), detail)
        return str(entry["entry_hash"])

    def check_reads(self, tx: Any, principal: str, plan_id: str) -> None:
        """What an intent check of ``plan_id`` reads, sent with its transaction's
        ``BEGIN`` (a hint; decision 704): the plan budget (an org budget of no period,
        :func:`~warden.adcp.plan_money.apply_cap`), its usage row, locked, and the heads
        of its spend chain (a hold) and of the plan's chain (the check's entry), locked."""
        prefetch = getattr(tx, "prefetch", None)
        if prefetch is None:
            return
        budget = budget_id_for(principal, plan_id)
        prefetch(
            budgets=(budget,),
            usage=((budget, period_key(Period.NONE, self.clock())),),
            chains=(
                spend_session_id(budget),
                chain_session_id(CHAIN_KIND, f"{principal}/{plan_id}"),
            ),
        )

    def plan(self, tx: Any, principal: str, plan_id: str) -> PlanRow:
        """The caller's plan; ``PLAN_NOT_FOUND`` when absent *or another caller's* (one
        answer for both)."""
        row = self.rows(tx).plan(principal, plan_id)
        if row is None:
            raise AdcpError("PLAN_NOT_FOUND", f"no plan {plan_id!r}", field="plan_id")
        return row

    def budget_state(self, tx: Any, budget_id: str) -> tuple[Decimal, Decimal, Decimal]:
        """(held, settled, remaining) of a plan's budget now."""
        eng = self.engine.within(tx)
        bucket = period_key(eng.path(budget_id)[0].period, eng.now())
        held, settled = tx.usage(budget_id, bucket)
        return held, settled, eng.remaining(budget_id)[0]

    def token_claims(self, token: str) -> dict[str, Any]:
        """The claims of a ``governance_context`` this agent issued (signature checked
        with our own key). ``INVALID_REQUEST`` for anything else — the details are not
        disclosed."""
        try:
            obj = jws.deserialize_compact(token, self._public, registry=_REGISTRY)
            claims = parse_strict_json(obj.payload)
        except (JoseError, ValueError, TypeError) as exc:
            raise AdcpError(
                "INVALID_REQUEST",
                "governance_context is not a token this governance agent issued",
                field="governance_context",
            ) from exc
        if not isinstance(claims, dict) or claims.get("iss") != self.signer.issuer:
            raise AdcpError(
                "INVALID_REQUEST",
                "governance_context is not a token this governance agent issued",
                field="governance_context",
            )
        return claims


def rfc3339(at: datetime) -> str:
    """RFC 3339 UTC with microseconds (fixed width, so text order is time order)."""
    return at.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def wire_number(value: Decimal) -> int | float:
    """A Decimal amount as the JSON number AdCP carries."""
    return int(value) if value == value.to_integral_value() else float(value)
