"""The bundle's ``provenance`` section: tool marks, source trust and the four gates.

Validated at bundle load (:class:`ProvenanceSpec`, all fields strict, unknown keys
refused). Shape (every member optional)::

    provenance:
      consequential_tools: [send_money, send_email, "delete_*"]   # globs
      external_sinks: [send_email, post_webpage]                  # globs
      sinks:                             # destination arguments per tool glob (issue 20)
        get_webpage: [url]
        send_email: [recipients, cc, bcc]
      argument_scope: all                # all | sinks: which arguments FIDES P-T and
                                         # AARM (taint: arguments) look at
      trusted_sources: [get_iban]        # source_id globs whose untrusted-origin data is trusted
      confidential_sources: [read_file]  # source_id globs whose data is confidential (FIDES P-F)
      unknown_trust: untrusted           # how gates treat an argument of unknown trust
                                         # (default untrusted: fail closed)
      inference: false                   # label arguments for clients that send no provenance
      inference_min_length: 4
      ask: {approver: {type: human, id: security}, timeout_seconds: 600}
      limits: {nodes_per_step: 1000, nodes_per_session: 20000, derived_from: 64, lineage_depth: 256}
      gates:
        fides: {enabled: true, p_t: ask, p_f: deny}
        ibac: {enabled: true, on_mismatch: ask, scope: consequential}
        aarm: {enabled: true, on_taint: ask, lookback_steps: 0, taint: arguments}
        camel: {enabled: true, on_violation: deny, protected_arguments: {send_money: [recipient]}}
        sinks: {enabled: true, on_untrusted: ask}
"""

from __future__ import annotations

import fnmatch
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from warden.core.tool_names import fold, fold_patterns, matches_any


class _Strict(BaseModel):
    # strict: ``enabled: "yes"`` or ``lookback_steps: "3"`` is refused, not coerced.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


Action = Literal["ask", "deny", "off"]


class AskApprover(_Strict):
    type: Literal["human", "agent", "service"] = "human"
    id: str = Field(default="security", min_length=1, max_length=64)


class AskTarget(_Strict):
    """Who a gate's ``ask`` goes to and how long it waits (ACS ``ask_details``)."""

    approver: AskApprover = AskApprover()
    timeout_seconds: int = Field(default=600, ge=1, strict=True)
    timeout_disposition: Literal["allow", "deny"] = "deny"


class FidesSpec(_Strict):
    """FIDES: P-T (integrity: no untrusted argument into a consequential call) and P-F
    (confidentiality: no confidential data into an external sink)."""

    enabled: bool = False
    p_t: Action = "ask"
    p_f: Action = "deny"


class IbacSpec(_Strict):
    """IBAC: a call's capability must be within the session's parsed intent. ``scope``
    says which calls are checked; a ``strict`` intent denies whatever ``on_mismatch`` says."""

    enabled: bool = False
    on_mismatch: Literal["ask", "deny", "defer"] = "ask"
    scope: Literal["consequential", "all"] = "consequential"
    require_intent: bool = False


class AarmSpec(_Strict):
    """AARM: untrusted content that entered the session (within ``lookback_steps`` steps;
    0 = the whole session) makes a consequential call asked or denied.

    ``taint`` says which content counts: ``arguments`` (the default, issue 20) only the
    untrusted content the call's arguments derive from (their lineage, within the
    bundle's ``argument_scope``); ``session`` (strict, opt-in) any untrusted content the
    session ever read, whatever the call's arguments are (``aarm_cumulative_taint``)."""

    enabled: bool = False
    on_taint: Literal["ask", "deny"] = "ask"
    lookback_steps: int = Field(default=0, ge=0, strict=True)
    taint: Literal["arguments", "session"] = "arguments"


class SinksSpec(_Strict):
    """The destination rule (issue 20): an argument the bundle's ``sinks`` names (where
    data goes or comes from: a URL, a recipient, an IBAN, a channel) whose value derives
    from untrusted content is ``on_untrusted`` (at least an ask), for any tool, reads
    included. On by default; it fires only for the arguments ``sinks`` declares."""

    enabled: bool = True
    on_untrusted: Literal["ask", "deny"] = "ask"


class CamelSpec(_Strict):
    """CaMeL: a protected argument of a consequential call whose dependency graph reaches
    untrusted data is refused or asked. ``protected_arguments`` maps a tool glob to the
    argument names it protects; a consequential tool not listed protects every argument."""

    enabled: bool = False
    on_violation: Literal["ask", "deny"] = "deny"
    protected_arguments: dict[str, list[str]] = Field(default_factory=dict)

    def protected(self, tool: str, arg: str) -> bool:
        for pattern, names in self.protected_arguments.items():
            if fnmatch.fnmatchcase(tool, pattern):
                return arg in names
        return True


class LimitsSpec(_Strict):
    """What one step or session may add to the provenance graph. A step over a limit is
    refused with ``-32602`` and records nothing (docs/provenance.md)."""

    nodes_per_step: int = Field(default=1000, ge=1, le=100_000)
    nodes_per_session: int = Field(default=20_000, ge=1, le=1_000_000)
    derived_from: int = Field(default=64, ge=1, le=10_000)
    lineage_depth: int = Field(default=256, ge=1, le=100_000)


class GatesSpec(_Strict):
    fides: FidesSpec = FidesSpec()
    ibac: IbacSpec = IbacSpec()
    aarm: AarmSpec = AarmSpec()
    camel: CamelSpec = CamelSpec()
    sinks: SinksSpec = SinksSpec()


class ProvenanceSpec(_Strict):
    """The ``provenance`` section of a bundle (docs/provenance.md)."""

    consequential_tools: list[str] = Field(default_factory=list)
    external_sinks: list[str] = Field(default_factory=list)
    #: Destination arguments per tool glob (the first glob matching the tool, caselessly,
    #: gives its list): where data goes or comes from. Read by the sink rule, and by
    #: FIDES P-T and argument-taint AARM when ``argument_scope`` is ``sinks``.
    sinks: dict[str, list[str]] = Field(default_factory=dict)
    #: Which arguments FIDES P-T and AARM (``taint: arguments``) look at: ``all`` of a
    #: consequential call's arguments, or only its ``sinks`` (issue 20, decision 522).
    argument_scope: Literal["all", "sinks"] = "all"
    trusted_sources: list[str] = Field(default_factory=list)
    confidential_sources: list[str] = Field(default_factory=list)
    #: Fail closed by default: an argument without provenance, or deriving from ids Warden
    #: never recorded, counts as untrusted unless the bundle opts into ``trusted``.
    unknown_trust: Literal["trusted", "untrusted"] = "untrusted"
    inference: bool = False
    inference_min_length: int = Field(default=4, ge=1, le=256, strict=True)
    ask: AskTarget = AskTarget()
    limits: LimitsSpec = LimitsSpec()
    gates: GatesSpec = GatesSpec()

    @model_validator(mode="after")
    def _gates_can_fire(self) -> ProvenanceSpec:
        """A gate switched on that could never fire is a mistake in the bundle."""
        g = self.gates
        problems = []
        if not self.consequential_tools:
            need = [
                name
                for name, on in (
                    ("fides (p_t)", g.fides.enabled and g.fides.p_t != "off"),
                    ("ibac (scope: consequential)", g.ibac.enabled and g.ibac.scope != "all"),
                    ("aarm", g.aarm.enabled),
                    ("camel", g.camel.enabled),
                )
                if on
            ]
            if need:
                problems.append(
                    f"gates {', '.join(need)} are enabled but consequential_tools is empty, "
                    "so they can never fire; list the tools they guard"
                )
        if self.argument_scope == "sinks" and not self.sinks:
            problems.append(
                "argument_scope is sinks but the bundle declares no sinks, so FIDES P-T and "
                "AARM would look at no argument; declare the destination arguments in sinks"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def enabled_gates(self) -> list[str]:
        """The names of the gates switched on, in order (``sinks`` only when the bundle
        declares destination arguments)."""
        names = [n for n in ("fides", "ibac", "aarm", "camel") if getattr(self.gates, n).enabled]
        if self.gates.sinks.enabled and self.sinks:
            names.append("sinks")
        return names

    def sink_arguments(self, tool: str) -> tuple[str, ...]:
        """The destination arguments the bundle declares for ``tool`` (the first glob in
        ``sinks`` matching it, both folded as tool names are (decision 166): matching
        more is stricter); () for none."""
        folded = fold(tool)
        for pattern, names in self.sinks.items():
            if fnmatch.fnmatchcase(folded, fold(pattern)):
                return tuple(names)
        return ()

    def guards(self, tool: str, arg: str) -> bool:
        """Whether FIDES P-T and argument-taint AARM look at ``arg`` of ``tool``."""
        return self.argument_scope == "all" or arg in self.sink_arguments(tool)

    # Caseless where matching more is stricter (a gate guards more calls, more sources
    # count as confidential); exact where it would loosen (trusted sources, and CaMeL's
    # protected_arguments, whose unlisted tools protect every argument). Decision 166.
    def is_consequential(self, tool: str) -> bool:
        return matches_any(tool, fold_patterns(self.consequential_tools), case_sensitive=False)

    def is_external_sink(self, tool: str) -> bool:
        return matches_any(tool, fold_patterns(self.external_sinks), case_sensitive=False)

    def is_trusted_source(self, source_id: str) -> bool:
        return bool(source_id) and any(
            fnmatch.fnmatchcase(source_id, p) for p in self.trusted_sources
        )

    def is_confidential_source(self, source_id: str) -> bool:
        return matches_any(
            source_id, fold_patterns(self.confidential_sources), case_sensitive=False
        )
