"""Policy bundles: load, validate, compile CEL, index rules, evaluate, explain.

Public surface: :func:`load_bundle`, :class:`Bundle`, :class:`PolicyEngine`,
:class:`Evaluation`. CEL errors are translated to :mod:`warden.errors` here.
"""

from warden.policy.bundle import Bundle, Rule, load_bundle, parse_bundle
from warden.policy.engine import Evaluation, PolicyEngine, RuleTrace

__all__ = [
    "Bundle",
    "Evaluation",
    "PolicyEngine",
    "Rule",
    "RuleTrace",
    "load_bundle",
    "parse_bundle",
]
