"""Recognising constraint violations from any DB-API driver (sqlite3, psycopg 3)."""

from __future__ import annotations

from sqlalchemy import exc as sa_exc


def is_integrity(exc: BaseException) -> bool:
    """A unique/primary-key (or other constraint) violation: sqlite3's and psycopg's
    ``IntegrityError`` (psycopg raises subclasses such as ``UniqueViolation``), or
    SQLAlchemy's wrapper of either."""
    if isinstance(exc, sa_exc.IntegrityError):
        return True
    return any(cls.__name__ == "IntegrityError" for cls in type(exc).__mro__)
