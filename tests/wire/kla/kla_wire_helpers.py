"""Helpers for the action request wire tests: a caller per API key that validates every
answer against the seed ``003_…`` envelope (``check_envelope`` from the spend wire
helpers, imported by path), the example records, and bundle writing."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conftest import ROOT, ensure_agent
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spend"))
from spend_wire_helpers import Reply, assert_error, check_envelope, db_rows  # noqa: E402

from warden.identity.api_keys import Role  # noqa: E402
from warden.kla.digest import record_digest  # noqa: E402
from warden.runtime import Runtime  # noqa: E402

__all__ = [
    "BASIC",
    "CREDIT",
    "Caller",
    "Reply",
    "assert_error",
    "db_rows",
    "key",
    "load",
    "record_digest",
    "write_evidence",
]

EXAMPLES = ROOT / "src" / "warden" / "schemas" / "kla" / "examples"
BASIC = EXAMPLES / "basic-read.json"
CREDIT = EXAMPLES / "credit-disposition.json"


def load(path: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return value


@dataclass
class Caller:
    """One API key's view of the server; every answer's envelope is checked."""

    client: Any  # TestClient or httpx.Client
    token: str
    principal: str = ""

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content: bytes | None = None,
        headers: dict[str, str] | list[tuple[str, str]] | None = None,
    ) -> Reply:
        """``headers`` as a list of pairs may repeat a header."""
        pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
        h = [("Authorization", f"Bearer {self.token}"), *pairs]
        if content is not None:
            if not any(name.lower() == "content-type" for name, _ in h):
                h.append(("content-type", "application/json"))
            r = self.client.request(method, path, content=content, headers=h)
        elif body is not None:
            r = self.client.request(method, path, json=body, headers=h)
        else:
            r = self.client.request(method, path, headers=h)
        assert r.headers["content-type"].startswith("application/json"), r.text
        parsed = r.json()
        check_envelope(r.status_code, parsed, mutating=False)
        return Reply(r.status_code, parsed, r.headers)

    def submit(self, record: Any, *, signature: str | None = None, kid: str | None = None) -> Reply:
        headers: dict[str, str] = {}
        if signature is not None:
            headers["X-Warden-Signature"] = signature
        if kid is not None:
            headers["X-Warden-Key-Id"] = kid
        if isinstance(record, Path):
            return self.call(
                "POST", "/v1/action-requests", content=record.read_bytes(), headers=headers
            )
        if isinstance(record, bytes):
            return self.call("POST", "/v1/action-requests", content=record, headers=headers)
        return self.call("POST", "/v1/action-requests", record, headers=headers)

    def outcome(self, rid: str, body: dict[str, Any]) -> Reply:
        return self.call("POST", f"/v1/action-requests/{rid}/outcome", body)

    def show(self, rid: str) -> Reply:
        return self.call("GET", f"/v1/action-requests/{rid}")


def key(rt: Runtime, client: TestClient, principal: str, role: Role, *groups: str) -> Caller:
    ensure_agent(rt, principal, role)
    _, token = rt.api_keys.create(principal, role, groups)
    return Caller(client, token, principal)


def write_evidence(data: dict[str, Any], directory: Path) -> Path:
    """Write a ``GET /v1/executions/{id}/evidence`` answer in the bundle layout."""
    (directory / "keys").mkdir(parents=True)
    (directory / "manifest.json").write_text(json.dumps(data["manifest"]), encoding="utf-8")
    lines = "".join(
        json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n" for line in data["records"]
    )
    (directory / "records.jsonl").write_text(lines, encoding="utf-8")
    (directory / "keys" / "jwks.json").write_text(json.dumps(data["keys"]), encoding="utf-8")
    return directory
