"""Gates: built-in checks beside the policy rules (DESIGN.md "Layout").

A gate runs after the Guardian's policy verdict and may tighten it (never loosen
it), with side effects the verdict then records, through the pipeline's one ``Gate``
protocol (:mod:`warden.core.pipeline`). Built so far:
:class:`~warden.gates.spend.SpendGate` (a priced tool call reserves its cost),
:mod:`warden.gates.approval` (ACS: an ask meets the desk) and
:class:`~warden.gates.desk.DeskAsk` (the spend wire's and KLA's desk ask, in the step's
own transaction) and :class:`~warden.gates.quote_hold.QuoteHold` (the spend quote's hold,
in the quote's transaction); AdCP's review and plan-money gates live with their domain
(:mod:`warden.adcp.check_gates`).
"""

from warden.gates.spend import SpendGate, SpendStep

__all__ = ["SpendGate", "SpendStep"]
