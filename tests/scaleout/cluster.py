"""Several real `warden serve` processes on one database, for the scale-out tests.

Every replica shares the data directory (the IKM, the bootstrap admin token, the signing
keys) and the database URL, as replicas behind a load balancer share mounted secrets and
one PostgreSQL. ``kill`` sends SIGKILL (no shutdown hook runs); ``restart`` brings the
replica back on its port.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from conftest import ASSETS, TEST_IKM, free_port, write_key

from warden.ledger.verify import VerifyReport, verify_records
from warden.store import open_store
from warden.store.sql import SqlStore

POLICY = ASSETS / "scaleout" / "cluster.yaml"
BUDGETS = ASSETS / "scaleout" / "budgets.yaml"


@dataclass
class Replica:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Cluster:
    database_url: str
    data_dir: Path
    replicas: list[Replica] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def token(self) -> str:
        return (self.data_dir / "api.token").read_text().strip()

    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    def _spawn(self, port: int) -> Replica:
        log = self.data_dir / f"serve-{port}.log"
        with log.open("ab") as fh:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "warden",
                    "serve",
                    "--port",
                    str(port),
                    "--data-dir",
                    str(self.data_dir),
                    "--database-url",
                    self.database_url,
                    "--policy",
                    str(POLICY),
                    "--budgets",
                    str(BUDGETS),
                    "--log-level",
                    "warning",
                ],
                stdout=fh,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
            )
        return Replica(port, proc, log)

    @staticmethod
    def _wait_ready(replica: Replica, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if replica.proc.poll() is not None:
                raise RuntimeError(f"warden serve exited early:\n{replica.log.read_text()}")
            try:
                if httpx.get(replica.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError(f"warden serve did not start:\n{replica.log.read_text()}")

    def start(self, n: int) -> None:
        """Start ``n`` replicas at the same moment (they race to migrate and register)."""
        new = [self._spawn(free_port()) for _ in range(n)]
        self.replicas.extend(new)
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(self._wait_ready, new))

    def kill(self, i: int) -> None:
        """SIGKILL replica ``i``: no shutdown code runs, in-flight requests are lost."""
        self.replicas[i].proc.send_signal(signal.SIGKILL)
        self.replicas[i].proc.wait(10)

    def restart(self, i: int) -> None:
        replica = self._spawn(self.replicas[i].port)
        self.replicas[i] = replica
        self._wait_ready(replica)

    def stop(self) -> None:
        for r in self.replicas:
            if r.proc.poll() is None:
                r.proc.terminate()
        for r in self.replicas:
            try:
                r.proc.wait(15)
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait(10)

    def store(self) -> SqlStore:
        return open_store(self.database_url, migrate=False)

    def verify(self) -> VerifyReport:
        """Verify every chain in the database (raises IntegrityError on the first break)."""
        store = self.store()
        try:
            return verify_records(store.iter_records(), ikm=TEST_IKM)
        finally:
            store.close()

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        store = self.store()
        try:
            with store.transaction() as tx:
                cur = tx._cur  # noqa: SLF001 - a test reading raw rows
                cur.execute(store._q(sql), params)  # noqa: SLF001
                return [tuple(r) for r in cur.fetchall()]
        finally:
            store.close()


def make_cluster(database_url: str, data_dir: Path, **env: str) -> Iterator[Cluster]:
    """A cluster (not yet started) on ``database_url``; stopped afterwards."""
    write_key(data_dir / "ikm.key", TEST_IKM)
    cluster = Cluster(database_url, data_dir, env=env)
    try:
        yield cluster
    finally:
        cluster.stop()
