"""The suite's migrated PostgreSQL template (``migrated_postgres`` in conftest) makes the
same schema as Alembic's migrations: a test on the template's copy runs against exactly
the store a fresh ``warden`` start would make. Compared by ``pg_dump`` of each schema,
with the schema's name taken out."""

from __future__ import annotations

from conftest import _search_path_schema, dump_schema, migrated_postgres, postgres_schema

from warden.store import open_store
from warden.store.sql import current_revision, head_revision


def _dump(url: str) -> str:
    return "\n".join(dump_schema(url)).replace(_search_path_schema(url), "SCHEMA")


def test_template_copy_dumps_as_a_migrated_schema() -> None:
    with postgres_schema() as migrated, postgres_schema() as copied:
        open_store(migrated).close()
        migrated_postgres(copied)
        expected, got = _dump(migrated), _dump(copied)
    assert expected.count("CREATE TABLE SCHEMA.") >= 20  # the dump holds the schema
    assert got == expected


def test_template_copy_is_at_the_head_and_left_alone_once_made() -> None:
    with postgres_schema() as url:
        migrated_postgres(url)
        before = _dump(url)
        migrated_postgres(url)  # a schema with tables is left as it is
        assert _dump(url) == before
        assert current_revision(url) == head_revision()
