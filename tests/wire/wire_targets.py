"""One interface over the two ways tests reach Warden's ACS service.

``InProcess`` calls ``AcsService.handle`` on a runtime; ``OverHttp`` posts to a real
``warden serve`` subprocess and reads its SQLite database read-only. Both return the
response parsed *strictly* (an ``Infinity`` or duplicate key in a response fails the test)
and both report row counts, so a test can assert that nothing was written.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Protocol

import httpx
from conftest import Server, agent_client, service_client

from warden.crypto.canonical import parse_strict_json
from warden.runtime import Runtime
from warden.wire.acs.client import AcsClient, http_transport

TABLES = ("sessions", "replay_keys", "entries")


class Target(Protocol):
    name: str

    def send(self, body: bytes) -> dict[str, Any]: ...

    def counts(self) -> dict[str, int]: ...

    def client(self, **kw: Any) -> AcsClient: ...


class InProcess:
    name = "in_process"

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def send(self, body: bytes) -> dict[str, Any]:
        response = self.rt.acs.handle(body)
        # What a transport would put on the wire must be strict JSON.
        parsed: dict[str, Any] = parse_strict_json(json.dumps(response, allow_nan=False))
        return parsed

    def counts(self) -> dict[str, int]:
        return dict(self.rt.store.counts())

    def client(self, **kw: Any) -> AcsClient:
        return service_client(self.rt, **kw)


class OverHttp:
    name = "http"

    def __init__(self, server: Server) -> None:
        self.server = server
        self.http = httpx.Client(timeout=30.0)

    def send(self, body: bytes) -> dict[str, Any]:
        r = self.http.post(
            self.server.acs_url, content=body, headers={"content-type": "application/json"}
        )
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("application/json")
        parsed: dict[str, Any] = parse_strict_json(r.content)
        return parsed

    def counts(self) -> dict[str, int]:
        db = sqlite3.connect(f"file:{self.server.data_dir / 'warden.db'}?mode=ro", uri=True)
        try:
            return {t: int(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES}
        finally:
            db.close()

    def client(self, **kw: Any) -> AcsClient:
        return agent_client(
            http_transport(self.server.acs_url, self.http), self.server.database_url, **kw
        )

    def close(self) -> None:
        self.http.close()
