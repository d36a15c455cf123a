"""Domain types shared by every wire: the action request and the verdict.

An :class:`ActionRequest` is built only by a wire adapter's parser; a
:class:`Verdict` is what the Guardian returns and each wire renders. The
decision vocabulary is the ACS five (spec §6) plus a ``warn`` flag on allow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any, Literal

from warden.crypto.jcs_fast import JcsRoute, jcs_route


class Effect(StrEnum):
    """A disposition (ACS §6). Strength orders combining: deny > ask > defer > modify > allow."""

    ALLOW = "allow"
    MODIFY = "modify"
    DEFER = "defer"
    ASK = "ask"
    DENY = "deny"

    @property
    def strength(self) -> int:
        return _STRENGTH[self]


_STRENGTH = {Effect.ALLOW: 0, Effect.MODIFY: 1, Effect.DEFER: 2, Effect.ASK: 3, Effect.DENY: 4}

ALL_EFFECTS = frozenset(Effect)

#: ``ActionRequest.mcp`` of a step that is not a wrapped MCP message.
NO_MCP: dict[str, str] = {"kind": "", "method": ""}


@dataclass(frozen=True)
class PolicyReference:
    """One rule that fired: ACS ``policy_references[]`` item."""

    policy_id: str
    policy_version: str
    rule_id: str
    policy_name: str | None = None

    def to_wire(self) -> dict[str, str]:
        out = {
            "policy_id": self.policy_id,
            "policy_version": self.policy_version,
            "rule_id": self.rule_id,
        }
        if self.policy_name:
            out["policy_name"] = self.policy_name
        return out

    @cached_property
    def wire_is_direct(self) -> bool:
        """True when :meth:`to_wire` holds only exact ``str`` values (its JCS is the sorted
        encoder's output; the fields are frozen, so it holds for every later call)."""
        return (
            type(self.policy_id) is str
            and type(self.policy_version) is str
            and type(self.rule_id) is str
            and (not self.policy_name or type(self.policy_name) is str)
        )


@dataclass(frozen=True)
class BundleRef:
    """Identity of the bundle a verdict came from: id, version, content digest."""

    id: str
    version: str
    digest: str

    def to_wire(self) -> dict[str, str]:
        return {"id": self.id, "version": self.version, "digest": self.digest}

    @cached_property
    def wire_is_direct(self) -> bool:
        """True when :meth:`to_wire` holds only exact ``str`` values (as for
        :attr:`PolicyReference.wire_is_direct`)."""
        return type(self.id) is str and type(self.version) is str and type(self.digest) is str


#: CEL ``agent`` for a caller whose identity Warden did not verify.
NO_AGENT: dict[str, Any] = {"id": "", "owner": "", "groups": [], "budgets": [], "verified": False}


def agent_facts(agent_id: str, owner: str, groups: Any = (), budgets: Any = ()) -> dict[str, Any]:
    """CEL ``agent`` for a verified caller: ``{id, owner, groups, budgets, verified: true}``."""
    return {
        "id": agent_id,
        "owner": owner,
        "groups": list(groups),
        "budgets": list(budgets),
        "verified": True,
    }


def user_id_claim(metadata: Any) -> str:
    """``metadata.user_context.user_id`` when it is a string, else "" (a claim only)."""
    ctx = metadata.get("user_context") if isinstance(metadata, dict) else None
    uid = ctx.get("user_id") if isinstance(ctx, dict) else None
    return uid if isinstance(uid, str) else ""


#: How Warden verified a caller: a registered agent's key (ACS HMAC or an agent API
#: key), an operator/service API key, the shared master IKM (``--unsafe-shared-ikm``:
#: nothing verified about who), or a signed record's key (KLA).
PrincipalKind = Literal["agent", "api_key", "shared_ikm"]


@dataclass(frozen=True)
class Principal:
    """The authenticated caller (stage 1).

    ``id`` is the principal Warden verified (an agent id, an API key's principal);
    ``key_id`` the credential that proved it; ``agent`` the CEL ``agent`` facts
    (``{id, owner, groups, budgets, verified}``, :data:`~warden.core.types.NO_AGENT`
    when nothing about the caller's identity was verified).
    """

    kind: PrincipalKind
    id: str
    key_id: str = ""
    agent: dict[str, Any] = field(default_factory=lambda: dict(NO_AGENT))

    @property
    def verified(self) -> bool:
        return bool(self.agent.get("verified"))


@dataclass(frozen=True)
class ActionRequest:
    """A proposed step, in wire-independent terms.

    ``method`` is the ACS method (``steps/toolCallRequest``,
    ``protocols/MCP/tools/call`` …); ``tool`` is ``{name, version, provider,
    operation, capability}`` with empty strings where absent; ``args`` are the
    unwrapped argument values; ``permitted`` the dispositions the hook allows.
    ``mcp`` is ``{kind, method}`` for a wrapped MCP message: ``kind`` is ``request``,
    ``notification`` or ``response`` as Warden classified the message, ``method`` the
    MCP method (``tools/call``); both empty for any other step (CEL ``mcp``).
    """

    method: str
    payload: dict[str, Any]
    metadata: dict[str, Any]
    tool: dict[str, str]
    args: dict[str, Any]
    raw_command: str
    session: dict[str, Any]
    permitted: frozenset[Effect] = ALL_EFFECTS
    mcp: dict[str, str] = field(default_factory=lambda: dict(NO_MCP))
    #: The step's :class:`~warden.provenance.facts.ProvenanceView` when the bundle has a
    #: ``provenance`` section (CEL ``provenance``; the provenance gates read it).
    provenance: Any = None
    #: The caller as Warden verified it (CEL ``agent``): ``{id, owner, groups, budgets,
    #: verified}``; ``verified`` False (and the rest empty) when nothing was verified
    #: (the shared IKM, ``--unsafe-shared-ikm``) (issue 15).
    agent: dict[str, Any] = field(default_factory=lambda: dict(NO_AGENT))
    #: What the caller says about itself and Warden did not verify (CEL ``claims``):
    #: ``{user_id}`` from ``metadata.user_context.user_id`` ("" when absent).
    claims: dict[str, Any] = field(default_factory=lambda: {"user_id": ""})

    @property
    def tool_name(self) -> str:
        return self.tool.get("name", "")


@dataclass(frozen=True)
class Verdict:
    """The Guardian's answer for one step.

    ``decision`` is final (already substituted for the hook's permitted set);
    ``modifications``/``ask_details``/``defer_details`` are present exactly when
    the decision needs them (ACS §6). ``failure`` carries operator detail when
    the verdict is a fail-closed deny; it goes to the ledger, never the wire.
    ``spend`` is what the spend gate did for this step (a reservation taken or
    refused, a settlement or release); it goes into the hashed entry.
    ``cited_provenance_ids`` are the provenance ids that drove the verdict (ACS §5);
    ``provenance_summary`` is the session's summary after this step and
    ``intent_extension`` a capability an approved step added to the intent (both go
    into the hashed entry).
    """

    decision: Effect
    reasoning: str
    reason_codes: tuple[str, ...] = ()
    policy_references: tuple[PolicyReference, ...] = ()
    bundle: BundleRef | None = None
    warn: bool = False
    modifications: dict[str, Any] | None = None
    ask_details: dict[str, Any] | None = None
    defer_details: dict[str, Any] | None = None
    policy_data: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    spend: dict[str, Any] | None = None
    cited_provenance_ids: tuple[str, ...] = ()
    provenance_summary: dict[str, Any] | None = None
    intent_extension: dict[str, Any] | None = None

    def jcs_route(self, *scalars: Any) -> JcsRoute:
        """The RFC 8785 route (:class:`~warden.crypto.jcs_fast.JcsRoute`) of a value made of
        ``scalars`` and of what a response or an entry renders of this verdict: the
        reasoning, reason codes and cited ids, the references and bundle (frozen, checked
        once each), and one walk of the policy's and gates' own objects (``policy_data``,
        the details, ``modifications``, ``spend``, the provenance summary, the intent
        extension, the failure text), as :func:`~warden.crypto.jcs_fast.jcs_route` finds it.
        Such a value is then canonicalized without a walk of its own (decision 947)."""
        for ref in self.policy_references:
            if not ref.wire_is_direct:
                return JcsRoute.UNSURE
        if self.bundle is not None and not self.bundle.wire_is_direct:
            return JcsRoute.UNSURE
        # One walk of a list of them: a list's route is the largest of its items'.
        return jcs_route(
            [
                self.reasoning,
                self.failure,
                self.policy_data,
                self.modifications,
                self.ask_details,
                self.defer_details,
                self.spend,
                self.provenance_summary,
                self.intent_extension,
                *self.reason_codes,
                *self.cited_provenance_ids,
                *scalars,
            ]
        )

    def but(self, **changes: Any) -> Verdict:
        """``dataclasses.replace(self, **changes)``, without its field walk and the frozen
        ``__init__`` (one ``object.__setattr__`` per field): ~0.7 µs against ~4.3 µs
        (decision 892). The fields not named keep their objects, as with ``replace``; a
        name that is not a field raises ``TypeError``. Valid while :class:`Verdict` has
        no ``__slots__``, ``__post_init__`` or init-only field
        (tests/gates/test_verdict_but.py holds it to ``replace``)."""
        if not _VERDICT_FIELDS.issuperset(changes):
            unknown = sorted(set(changes) - _VERDICT_FIELDS)
            raise TypeError(f"Verdict has no field(s) {unknown}")
        if not _VERDICT_HAS_DICT:
            # Compiled by mypyc: a native class keeps its fields in C slots, not in a
            # ``__dict__``, and refuses ``object.__new__`` (decision 1161).
            return _native_but(self, changes)
        out = object.__new__(Verdict)
        fields = out.__dict__
        fields.update(self.__dict__)
        fields.update(changes)
        return out


def _native_but(v: Verdict, changes: dict[str, Any]) -> Verdict:
    """:meth:`Verdict.but` for the compiled class: the constructor called directly with
    every field, a native call where ``dataclasses.replace`` walks the fields in Python
    (~3 µs; decision 333). tests/gates/test_verdict_but.py compares it with ``replace`` for
    every field, also where this module runs as Python."""
    get = changes.get
    return Verdict(
        decision=get("decision", v.decision),
        reasoning=get("reasoning", v.reasoning),
        reason_codes=get("reason_codes", v.reason_codes),
        policy_references=get("policy_references", v.policy_references),
        bundle=get("bundle", v.bundle),
        warn=get("warn", v.warn),
        modifications=get("modifications", v.modifications),
        ask_details=get("ask_details", v.ask_details),
        defer_details=get("defer_details", v.defer_details),
        policy_data=get("policy_data", v.policy_data),
        failure=get("failure", v.failure),
        spend=get("spend", v.spend),
        cited_provenance_ids=get("cited_provenance_ids", v.cited_provenance_ids),
        provenance_summary=get("provenance_summary", v.provenance_summary),
        intent_extension=get("intent_extension", v.intent_extension),
    )


_VERDICT_FIELDS = frozenset(Verdict.__dataclass_fields__)
#: False when this module is compiled by mypyc (a native class: no instance ``__dict__``).
_VERDICT_HAS_DICT = Verdict.__dictoffset__ != 0
