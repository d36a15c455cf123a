"""Persistence behind one interface (:class:`~warden.store.base.Store`).

``open_store(url)`` picks the implementation from a database URL
(``sqlite:///path`` is the embedded default). Foreign database exceptions are
translated to :mod:`warden.errors` inside the implementations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from warden.store.base import ReplayKeys, SessionState, Store

if TYPE_CHECKING:
    from warden.store.sql import SqlStore, open_store

__all__ = ["ReplayKeys", "SessionState", "SqlStore", "Store", "open_store"]


def __getattr__(name: str) -> Any:
    """:class:`SqlStore` and :func:`open_store` on first use (PEP 562): SQLAlchemy loads
    only where a database is opened, not where :mod:`warden.store.base`'s types are
    named (``warden policy explain`` parses a request without a store)."""
    if name not in ("SqlStore", "open_store"):
        raise AttributeError(f"module 'warden.store' has no attribute {name!r}")
    from warden.store import sql

    value = getattr(sql, name)
    globals()[name] = value
    return value
