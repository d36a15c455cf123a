"""Persistence behind one interface (:class:`~warden.store.base.Store`).

``open_store(url)`` picks the implementation from a database URL
(``sqlite:///path`` is the embedded default). Foreign database exceptions are
translated to :mod:`warden.errors` inside the implementations.
"""

from warden.store.base import ReplayKeys, SessionState, Store
from warden.store.sql import SqlStore, open_store

__all__ = ["ReplayKeys", "SessionState", "SqlStore", "Store", "open_store"]
