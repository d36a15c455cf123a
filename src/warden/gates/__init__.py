"""Gates: built-in checks beside the policy rules (DESIGN.md "Layout").

A gate runs after the Guardian's policy verdict and may tighten it (never loosen
it), with side effects the verdict then records. Built so far:
:class:`~warden.gates.spend.SpendGate` (a priced tool call reserves its cost).
"""

from warden.gates.spend import SpendGate, SpendStep

__all__ = ["SpendGate", "SpendStep"]
