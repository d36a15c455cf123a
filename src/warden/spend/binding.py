"""Who may spend a budget: its ``principals`` binding (issue 14 item 1).

A budget lists the principals it is bound to; an entry is either an API key principal
(``deploy-bot``) or a group of API keys written ``group:<name>`` (``group:finance``: any
key created with ``--group finance``). Only a caller named by an entry may quote against
the budget; a budget bound to nobody (the empty list) is spendable by nobody. Binding is
per budget, never inherited: an agent bound to ``acme.ops.bot`` spends through it on
``acme.ops`` and ``acme`` (the path), but may not quote against ``acme.ops`` itself unless
bound to it too (docs/decisions.md, "Hardening (issue 14): spend ownership").

The entry syntax is that of API keys (:mod:`warden.identity.api_keys`, whose patterns are
repeated here because that module imports the store, which imports this package).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: The prefix that makes a binding entry a group rather than a principal.
GROUP_PREFIX = "group:"
#: At most this many entries per budget.
MAX_PRINCIPALS = 64

PRINCIPAL = re.compile(r"^[A-Za-z0-9_.:@+-]{1,200}$")
GROUP = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def entry_problem(entry: object) -> str | None:
    """Why ``entry`` cannot be a binding entry, or None when it can."""
    if not isinstance(entry, str):
        return f"principals entry {entry!r} must be a string"
    if entry.startswith(GROUP_PREFIX):
        if not GROUP.match(entry[len(GROUP_PREFIX) :]):
            return (
                f"principals entry {entry!r}: a group is group:<name>, the name 1 to 64 "
                "letters, digits and _ . : -"
            )
        return None
    if not PRINCIPAL.match(entry):
        return (
            f"principals entry {entry!r}: a principal is 1 to 200 letters, digits and "
            "_ . : @ + - (write a group as group:<name>)"
        )
    return None


def principals_problems(entries: object) -> list[str]:
    """Every reason ``entries`` is not a valid ``principals`` list (empty when it is):
    a list (or tuple) of at most :data:`MAX_PRINCIPALS` entries, each valid."""
    if not isinstance(entries, list | tuple):
        return ["principals must be a list of principals and group:<name> entries"]
    problems = [p for p in (entry_problem(e) for e in entries) if p is not None]
    if len(set(map(str, entries))) > MAX_PRINCIPALS:
        problems.append(f"a budget is bound to at most {MAX_PRINCIPALS} entries")
    return problems


def normalized(entries: Iterable[str]) -> tuple[str, ...]:
    """``entries`` sorted and deduplicated: the one stored form of a binding, so equal
    bindings compare (and upsert) equal."""
    return tuple(sorted(set(entries)))


def is_bound(principals: Iterable[str], principal: str, groups: Iterable[str]) -> bool:
    """True if a caller ``principal`` in ``groups`` is named by ``principals``.

    Membership is literal: an admin key is *not* in every group here (unlike the
    approval desk's :meth:`Identity.in_group`), so an admin spends only on budgets bound
    to its own principal or to a group its key was created with.
    """
    # An entry starting with group: names a group only, so a principal that happens to
    # be called "group:ops" is not a member of group ops.
    mine = {GROUP_PREFIX + g for g in groups}
    if not principal.startswith(GROUP_PREFIX):
        mine.add(principal)
    return any(entry in mine for entry in principals)


__all__ = [
    "GROUP_PREFIX",
    "MAX_PRINCIPALS",
    "entry_problem",
    "is_bound",
    "normalized",
    "principals_problems",
]
