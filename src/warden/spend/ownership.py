"""Whose budgets, reservations and receipts a spend wire caller may touch (issue 14 item 1).

- A **budget** is readable by the principals it is bound to (its ``principals``: the
  caller's principal or ``group:<name>`` of one of its key's groups) and by admin keys;
  it is **spendable** (quote) only by the principals it is bound to — an admin key too
  spends only where it is bound itself.
- A **reservation** or **receipt** belongs to the principal that took the hold. Its
  owner may read and conclude it (commit, release, undo); an admin key may read any.
- To an agent key, anything not its own answers exactly as a missing one does (``404
  input:unknown_budget|reservation|receipt``, byte for byte the same body). An admin
  key, which may read it anyway, gets ``403 auth:forbidden`` when it tries to spend as
  someone else: hiding what it can read would only mislead it.
- An AdCP plan's budget (``adcp:…``, created by ``sync_plans``) is managed through AdCP
  alone: the spend wire lists and reads it but refuses to quote against it, redefine it
  or ask to raise it, or any of these for a budget under it (``409 budget:other_wire``,
  :func:`not_managed_elsewhere`), which would go around ``check_governance``'s plan
  gates (decisions 923, 940). A budgets file may not define one either
  (:mod:`warden.spend.config`).
- A hold another wire took (AdCP ``check_governance``, the ACS spend gate) is concluded
  by that wire: its owner may read it here, and commit/release/undo answer ``409
  reservation:other_wire``.

The spend wire renders :class:`~warden.spend.errors.NotOwner` and
:class:`~warden.spend.errors.OtherWire` (:func:`warden.wire.spend.render.refusal_for`).
docs/decisions.md, "Hardening (issue 14): spend ownership".
"""

from __future__ import annotations

from warden.identity.api_keys import Identity, Role
from warden.spend.budgets import ADCP_BUDGET_PREFIX, Budget
from warden.spend.engine import SpendEngine
from warden.spend.errors import (
    NotOwner,
    OtherWire,
    OtherWireBudget,
    UnknownBudget,
    UnknownReceipt,
    UnknownReservation,
)
from warden.spend.records import Receipt, Reservation

#: The ``meta["wire"]`` of the holds this wire takes (and so may conclude).
SPEND_WIRE = "spend"


def is_admin(who: Identity) -> bool:
    return who.role is Role.ADMIN


def is_bound(budget: Budget, who: Identity) -> bool:
    """True if ``who`` may spend ``budget``: its ``principals`` name the caller or one of
    its groups, or (an agent key) the agent registry lists the budget for the agent
    (issue 15: either admin-set binding suffices)."""
    return budget.spendable_by(who.principal, who.groups) or budget.id in who.budgets


def may_read_budget(budget: Budget, who: Identity) -> bool:
    """True if ``who`` may read ``budget``: bound to it, or an admin key."""
    return is_admin(who) or is_bound(budget, who)


_OWNER_HINT = (
    "use a key of the principal it belongs to; an admin key reads every budget, "
    "reservation and receipt but never spends as someone else"
)


def _forbidden(message: str, hint: str = _OWNER_HINT) -> NotOwner:
    return NotOwner(message, hint=hint)


def readable_path(eng: SpendEngine, budget_id: str, who: Identity) -> list[Budget]:
    """The path (budget first) of a budget ``who`` may read. Raises
    :class:`UnknownBudget` when it is absent or not readable (one answer for both)."""
    path = eng.path(budget_id)
    if not may_read_budget(path[0], who):
        raise UnknownBudget.of(budget_id)
    return path


def spendable_path(eng: SpendEngine, budget_id: str, who: Identity) -> list[Budget]:
    """The path of a budget ``who`` may quote against. Raises :class:`UnknownBudget` when
    it is absent or not readable, :class:`NotOwner` (``403 auth:forbidden`` on the spend
    wire) when an admin key is not bound to it."""
    path = readable_path(eng, budget_id, who)
    if not is_bound(path[0], who):
        raise _forbidden(
            f"budget {budget_id} is not bound to {who.principal}; its principals are "
            f"{', '.join(path[0].principals) or 'none (nobody may spend it)'}"
        )
    return path


__all__ = ["ADCP_BUDGET_PREFIX"]  # defined beside the budgets (the bundle checks it)


def not_managed_elsewhere(verb: str, *budget_ids: str | None) -> None:
    """Raise :class:`OtherWireBudget` (``409 budget:other_wire``) when one of
    ``budget_ids`` (a budget and its path, or its parent) is an AdCP plan's budget, which
    the spend wire may not ``verb`` (decision 923)."""
    for budget_id in budget_ids:
        if budget_id is None or not budget_id.startswith(ADCP_BUDGET_PREFIX):
            continue
        raise OtherWireBudget(
            f"budget {budget_id} is an AdCP plan's budget: AdCP manages it (sync_plans sets "
            "its cap, check_governance spends it), so the spend wire does not "
            f"{verb} it or a budget under it; it may only list and read it"
        )


def readable_reservation(eng: SpendEngine, rid: str, who: Identity) -> Reservation:
    """A reservation ``who`` owns, or any for an admin key; else :class:`UnknownReservation`
    exactly as for a missing one."""
    res = eng.reservation(rid)
    if res.principal != who.principal and not is_admin(who):
        raise UnknownReservation.of(rid)
    return res


#: Who took a hold of another wire, by its ``meta["wire"]``.
_TAKEN_BY = {"adcp": "AdCP (report_plan_outcome concludes it)", "acs": "the ACS spend gate"}


def _not_owner(what: str, who: Identity, owner: str | None, wire: object) -> NotOwner:
    if owner is None:
        # Owned by nobody: the ACS gate and AdCP hold without a spend-wire principal
        # (or a hold older than owners). "Another principal's" would send the admin
        # looking for a key that does not exist.
        taken = (
            f"was taken by {_TAKEN_BY.get(str(wire), str(wire))}"
            if wire not in (None, SPEND_WIRE)
            else "was taken before holds had owners"
        )
        return _forbidden(
            f"{what} has no owner on the spend wire: it {taken}; {who.principal} may read it only",
            hint="no key concludes it on the spend wire; an admin key reads it but never "
            "spends as someone else",
        )
    return _forbidden(f"{what} belongs to another principal; {who.principal} may read it only")


def _other_wire(what: str, wire: object) -> OtherWire:
    return OtherWire(
        f"{what} was taken by {_TAKEN_BY.get(str(wire), str(wire))}; that wire concludes it, not "
        "the spend wire",
    )


def concludable_reservation(eng: SpendEngine, rid: str, who: Identity) -> Reservation:
    """A reservation ``who`` owns and this wire took, to commit or release. Raises
    :class:`UnknownReservation` (absent or not readable), NotOwner`` (an
    admin key, not the owner: ``403 auth:forbidden``), :class:`OtherWire` (``409
    reservation:other_wire``)."""
    res = readable_reservation(eng, rid, who)
    if res.principal != who.principal:
        raise _not_owner(f"reservation {rid}", who, res.principal, res.meta.get("wire"))
    if res.meta.get("wire", SPEND_WIRE) != SPEND_WIRE:
        raise _other_wire(f"reservation {rid}", res.meta.get("wire"))
    return res


def readable_receipt(eng: SpendEngine, rcp: str, who: Identity) -> Receipt:
    """A receipt ``who`` owns, or any for an admin key; else :class:`UnknownReceipt`
    exactly as for a missing one (as :func:`readable_reservation`)."""
    receipt = eng.receipt(rcp)
    if receipt.principal != who.principal and not is_admin(who):
        raise UnknownReceipt.of(rcp)
    return receipt


def undoable_receipt(eng: SpendEngine, rcp: str, who: Identity) -> Receipt:
    """A receipt ``who`` owns of a hold this wire took. Raises :class:`UnknownReceipt`
    (absent, or another's to an agent key), ``403 auth:forbidden`` (an admin key, not the
    owner), ``409 reservation:other_wire``."""
    receipt = eng.receipt(rcp)
    if receipt.principal != who.principal:
        if not is_admin(who):
            raise UnknownReceipt.of(rcp)
        held = eng.reservation(receipt.reservation_id)
        raise _not_owner(f"receipt {rcp}", who, receipt.principal, held.meta.get("wire"))
    res = eng.reservation(receipt.reservation_id)
    if res.meta.get("wire", SPEND_WIRE) != SPEND_WIRE:
        raise _other_wire(f"receipt {rcp}", res.meta.get("wire"))
    return receipt


__all__ = [
    "concludable_reservation",
    "may_read_budget",
    "not_managed_elsewhere",
    "readable_path",
    "readable_receipt",
    "readable_reservation",
    "spendable_path",
    "undoable_receipt",
]
