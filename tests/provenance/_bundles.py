"""Bundles for the provenance tests: gates switched on over an allow-all rule set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

BASE: dict[str, Any] = {
    "warden_bundle": 1,
    "id": "provenance-test",
    "version": "1",
    "default": "allow",
    "rules": [
        {
            "id": "everything",
            "hooks": ["steps/*", "protocols/MCP/*"],
            "effect": "allow",
        }
    ],
}

SECTION: dict[str, Any] = {
    "consequential_tools": ["send_money", "send_email"],
    "external_sinks": ["send_email"],
    "trusted_sources": ["get_iban"],
    "confidential_sources": ["read_file"],
}


def write_bundle(
    tmp: Path, *, gates: dict[str, Any], rules: list[dict[str, Any]] | None = None, **extra: Any
) -> Path:
    doc = dict(BASE)
    doc["provenance"] = {**SECTION, **extra, "gates": gates}
    if rules is not None:
        doc["rules"] = rules
    path = tmp / "bundle.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path
