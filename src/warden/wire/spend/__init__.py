"""The Governed Agent Spend wire (seed ``003_…``; specs/adcp-spend-kla.md §2): REST under
``/v1`` — quotes that reserve, commit, release, undo, budgets, budget requests, tasks.

Parse and render only: the spend engine decides whether a spend fits
(:mod:`warden.spend`); :mod:`.routes` maps HTTP to engine calls and
:mod:`.render` maps outcomes to the envelope.
"""

from warden.wire.spend.routes import PREFIX, SpendBodyCap, spend_router

__all__ = ["PREFIX", "SpendBodyCap", "spend_router"]
