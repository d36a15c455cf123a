"""JSON Schemas Warden validates against, shipped in the package (nothing fetched).

``acs/`` holds the ACS v0.1 set (see acs/README.md for provenance of each file).
:func:`schema_set` is a folder's compiled validators, one per process, resolved through a
jsonschema-rs registry keyed by ``$id``;
a missing or unparsable schema stops start-up (ConfigError), never a request.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema_rs

from warden.errors import ConfigError


@cache
def load_folder(folder: str) -> dict[str, dict[str, Any]]:
    """All schemas under ``schemas/<folder>`` by relative path (``hooks/x.json``).

    ``examples/`` folders hold instances, not schemas, and are skipped.
    """
    root = resources.files("warden.schemas").joinpath(folder)
    out: dict[str, dict[str, Any]] = {}

    def walk(node: Any, prefix: str) -> None:
        for child in node.iterdir():
            name = f"{prefix}{child.name}"
            if child.is_dir():
                if child.name != "examples":
                    walk(child, name + "/")
            elif child.name.endswith(".json"):
                try:
                    out[name] = json.loads(child.read_text(encoding="utf-8"))
                except (OSError, ValueError) as exc:
                    raise ConfigError(f"schema {folder}/{name} is unreadable: {exc}") from exc

    walk(root, "")
    if not out:
        raise ConfigError(f"no schemas found under warden/schemas/{folder}")
    return out


class SchemaSet:
    """Compiled validators for one schema folder, resolved through one registry."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.docs = load_folder(folder)
        try:
            self.registry = jsonschema_rs.Registry([(d["$id"], d) for d in self.docs.values()])
        except (KeyError, ValueError, jsonschema_rs.ReferencingError) as exc:
            raise ConfigError(f"schema registry for {folder} is invalid: {exc}") from exc
        self._validators: dict[str, Any] = {}

    def validator(self, path: str, *, fragment: str | None = None) -> Any:
        """The validator for ``path`` (optionally ``#/$defs/...`` fragment), cached."""
        key = path + (fragment or "")
        v = self._validators.get(key)
        if v is None:
            doc = self.docs.get(path)
            if doc is None:
                raise ConfigError(f"schema {self.folder}/{path} is not shipped")
            schema: dict[str, Any] = (
                doc if fragment is None else {"$ref": f"{doc['$id']}{fragment}"}
            )
            try:
                v = jsonschema_rs.validator_for(
                    schema,
                    registry=self.registry,
                    validate_formats=True,
                    base_uri=doc["$id"] if fragment is None else None,
                )
            except (ValueError, jsonschema_rs.ReferencingError) as exc:
                raise ConfigError(f"schema {self.folder}/{path} does not compile: {exc}") from exc
            self._validators[key] = v
        return v

    def first_error(
        self, path: str, instance: Any, *, fragment: str | None = None
    ) -> tuple[str, str] | None:
        """``(json_pointer, message)`` of the first error, or None when valid."""
        v = self.validator(path, fragment=fragment)
        if v.is_valid(instance):
            return None
        for err in v.iter_errors(instance):
            pointer = "".join(
                "/" + str(p).replace("~", "~0").replace("/", "~1") for p in err.instance_path
            )
            return pointer, err.message
        return "", "invalid"  # pragma: no cover - is_valid and iter_errors agree


@cache
def schema_set(folder: str) -> SchemaSet:
    """The process's one :class:`SchemaSet` for ``schemas/<folder>``: compiled once and
    shared by every service in the process (validators are immutable; compiling the ACS
    set cost each runtime's start several milliseconds). Raises ConfigError as
    :class:`SchemaSet` does."""
    return SchemaSet(folder)
