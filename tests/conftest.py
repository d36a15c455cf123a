"""Shared fixtures: fixed keys, in-process runtimes, a real `warden serve` over loopback,
and an independent response validator (python-jsonschema, not the runtime's jsonschema-rs)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource
from schedule import slow_first
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from warden.crypto.hmac_keys import SessionKeys, derive_agent_ikm
from warden.errors import ConfigError, StoreUnavailable
from warden.identity.agents import AgentCredential, AgentExists, AgentRegistry
from warden.runtime import Runtime
from warden.server.app import create_app
from warden.settings import Settings
from warden.wire.acs.client import AcsClient

# Every Runtime.start would otherwise freeze this process's heap (gc.freeze(), decision
# 320), keeping earlier tests' uncollected garbage for good; tests/ops/test_gc_freeze.py
# checks the default in processes of their own.
os.environ.setdefault("WARDEN_GC_FREEZE", "false")

ROOT = Path(__file__).resolve().parent.parent
ASSETS = Path(__file__).resolve().parent / "assets"
SCHEMAS = ROOT / "src" / "warden" / "schemas" / "acs"
SHARED = ROOT.parent / "shared"
DEFAULT_POLICY = ROOT / "examples" / "policies" / "default.yaml"
AGENTDOJO_POLICY = ROOT / "examples" / "policies" / "agentdojo.yaml"
TEST_IKM = bytes(range(32))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest modules first, so no worker is left with them at the end (schedule.py)."""
    slow_first(items)


def asset(name: str) -> Path:
    """A named test asset under tests/assets (see tests/assets/README.md)."""
    path = ASSETS / name
    assert path.exists(), f"missing test asset {name}"
    return path


#: The PostgreSQL server tests run against (this machine's: trust auth, database test).
POSTGRES_URL = os.environ.get(
    "WARDEN_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A fresh, empty PostgreSQL schema; yields a database URL whose search_path is it.

    The schema is dropped (with everything in it) afterwards. A server that cannot be
    reached fails the test: it is never skipped.
    """
    name = f"wt_{uuid.uuid4().hex[:16]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{name}"'))
        url = make_url(POSTGRES_URL).update_query_dict({"options": f"-csearch_path={name}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        admin.dispose()


_MIGRATED_SQLITE: list[Path] = []


def migrated_sqlite(path: Path) -> None:
    """Put an empty store at Warden's schema head at ``path`` unless a file is there: a
    copy of one this test process migrated once. Alembic's migrations take about half of
    a fresh runtime's start, and the in-process fixtures start thousands; a start on the
    copy opens a database already at the head, as every start after a data directory's
    first does. Migrating a fresh file is tested where it is the subject (tests/store,
    and every `warden serve` the suite starts on a new data directory)."""
    if path.exists():
        return
    if not _MIGRATED_SQLITE:
        from warden.store import open_store

        template = Path(tempfile.mkdtemp(prefix="warden-migrated-")) / "warden.db"
        open_store(f"sqlite:///{template}").close()  # its close checkpoints the WAL
        assert not Path(f"{template}-wal").exists() or Path(f"{template}-wal").stat().st_size == 0
        _MIGRATED_SQLITE.append(template)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(_MIGRATED_SQLITE[0], path)  # with the mode Warden created it with (0600)


_POSTGRES_TEMPLATE: list[str] = []
#: Stands for the schema's name in the template's SQL.
_SCHEMA_MARK = "wt_template_schema_mark"


def _search_path_schema(url: str) -> str:
    """The schema a URL from :func:`postgres_schema` points at (its ``search_path``)."""
    options = make_url(url).query.get("options", "")
    assert isinstance(options, str) and options.startswith("-csearch_path="), url
    return options.removeprefix("-csearch_path=")


def _libpq_url(url: str) -> str:
    return (
        make_url(url)
        .set(drivername="postgresql")
        .set(query={})
        .render_as_string(hide_password=False)
    )


def dump_schema(url: str) -> list[str]:
    """``pg_dump``'s SQL lines for the schema ``url`` points at (data as INSERTs, without
    owners, privileges or psql's meta-commands such as ``\\restrict``, whose key is random
    per dump)."""
    out = subprocess.run(
        ["pg_dump", "--schema", _search_path_schema(url), "--no-owner", "--no-privileges",
         "--inserts", "--dbname", _libpq_url(url)],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    return [line for line in out.splitlines() if not line.startswith("\\")]


def postgres_template_sql() -> str:
    """The SQL that puts Warden's schema head into an empty schema, with
    :data:`_SCHEMA_MARK` for the schema's name: ``pg_dump`` of a schema this test process
    migrated once with Alembic (tables, indexes, constraints, sequences and the rows the
    migrations write), made once per process. ``tests/store/test_postgres_template.py``
    checks that a schema made from it dumps exactly as a migrated one."""
    if not _POSTGRES_TEMPLATE:
        from warden.store import open_store

        with postgres_schema() as url:
            open_store(url).close()
            name = _search_path_schema(url)
            # The schema's own CREATE goes: the schema exists already.
            lines = [line for line in dump_schema(url) if line != f"CREATE SCHEMA {name};"]
        _POSTGRES_TEMPLATE.append("\n".join(lines).replace(name, _SCHEMA_MARK))
    return _POSTGRES_TEMPLATE[0]


def migrated_postgres(url: str) -> None:
    """Put an empty store at Warden's schema head into the PostgreSQL schema ``url``
    points at, unless it holds tables already: the template's SQL, one round trip, where
    Alembic's migrations take about 0.6 s. The PostgreSQL counterpart of
    :func:`migrated_sqlite`; migrating an empty schema stays tested where it is the
    subject (tests/store, and every ``warden serve`` the suite starts on a new schema)."""
    import psycopg

    name = _search_path_schema(url)
    with psycopg.connect(_libpq_url(url), autocommit=True) as conn:
        present = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", (name,)
        ).fetchone()
        if present and present[0]:
            return
        sql = postgres_template_sql().replace(_SCHEMA_MARK, name)
        with conn.transaction():
            conn.execute(sql.encode())


def migrated_store_url(url: str) -> None:
    """:func:`migrated_sqlite` or :func:`migrated_postgres`, by ``url``'s backend."""
    if url.startswith("sqlite:///"):
        migrated_sqlite(Path(url.removeprefix("sqlite:///")))
    elif url.startswith("postgresql"):
        migrated_postgres(url)


#: The secret files a runtime generates on its first start in a data directory.
GENERATED_KEY_FILES = (
    "api.token",
    "signing.key",
    "mldsa.key",
    "checkpoint.key",
    "governance-signing.key",
    "request-signing.key",
)
_KEY_TEMPLATE: list[Path] = []


def seeded_keys(data: Path) -> None:
    """Give ``data`` (a data directory no runtime has started in) the key files a first
    start generates, copied from a directory one runtime of this test process generated
    them in. Each generation writes six files with an ``fsync`` each and derives an
    ML-DSA key, a fifth of an in-process runtime's start; the in-process fixtures start
    thousands. The runtime then loads them, as every start after a data directory's
    first does; generating them is tested where it is the subject (tests/crypto,
    tests/identity, and every ``warden serve`` the suite starts on a new data
    directory). Runtimes of one test share these keys, as replicas sharing a data
    directory would; a test that needs runtimes with keys of their own passes
    ``fresh_keys=True`` to ``make_runtime``."""
    if not _KEY_TEMPLATE:
        template = Path(tempfile.mkdtemp(prefix="warden-keys-"))
        key = write_key(template / "ikm.key")
        migrated_sqlite(template / "warden.db")
        Runtime.start(Settings(data_dir=template, policy=DEFAULT_POLICY, key_file=key)).close()
        _KEY_TEMPLATE.append(template)
    data.mkdir(parents=True, exist_ok=True)
    for name in GENERATED_KEY_FILES:
        if not (data / name).exists():
            shutil.copy2(_KEY_TEMPLATE[0] / name, data / name)  # mode 0600 kept


#: The two store backends; fixtures parametrized over these run every test on both.
BACKEND_IDS = ("sqlite", "postgresql")


@pytest.fixture(params=BACKEND_IDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL for an empty store: a SQLite file under tmp_path, or a fresh
    PostgreSQL schema (dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'warden.db'}"
    else:
        with postgres_schema() as url:
            yield url


@pytest.fixture
def ikm() -> bytes:
    return TEST_IKM


def write_key(path: Path, ikm: bytes = TEST_IKM) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ikm.hex() + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def make_runtime(tmp_path: Path) -> Iterator[Callable[..., Runtime]]:
    """Build in-process runtimes on a SQLite file under tmp_path."""
    made: list[Runtime] = []

    def make(policy: Path = DEFAULT_POLICY, fresh_keys: bool = False, **overrides: Any) -> Runtime:
        data = tmp_path / f"data{len(made)}"
        key = write_key(data / "ikm.key")
        settings = Settings(data_dir=data, policy=policy, key_file=key, **overrides)
        if settings.database_url is None:
            migrated_sqlite(data / "warden.db")
        if not fresh_keys:
            seeded_keys(data)
        rt = Runtime.start(settings)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()


@pytest.fixture
def make_backend_runtime(tmp_path: Path, database_url: str) -> Iterator[Callable[..., Runtime]]:
    """``make_runtime`` on each store backend (parametrized by ``database_url``): every
    runtime it builds shares that one database, as replicas do. A module that proves a
    guarantee on both backends overrides ``make_runtime`` with this."""
    made: list[Runtime] = []

    def make(policy: Path = DEFAULT_POLICY, fresh_keys: bool = False, **overrides: Any) -> Runtime:
        data = tmp_path / f"data{len(made)}"
        key = write_key(data / "ikm.key")
        if not fresh_keys:
            seeded_keys(data)
        overrides.setdefault("database_url", database_url)
        settings = Settings(data_dir=data, policy=policy, key_file=key, **overrides)
        migrated_store_url(settings.resolved_database_url())
        rt = Runtime.start(settings)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()


@pytest.fixture
def runtime(make_runtime: Callable[..., Runtime]) -> Runtime:
    """A runtime from ``make_runtime``: on SQLite, or on both backends in a module that
    overrides ``make_runtime`` with ``make_backend_runtime``."""
    return make_runtime()


@pytest.fixture
def app_client(runtime: Runtime) -> Iterator[TestClient]:
    """The REST app over ``runtime`` in process (its lifespan started and stopped)."""
    with TestClient(create_app(runtime)) as client:
        yield client


def run_sql(rt: Runtime, statement: str) -> None:
    """Run ``statement`` on ``rt``'s database behind Warden's back (a test's tampering)."""
    with rt.store.engine.begin() as conn:
        conn.exec_driver_sql(statement)


def verify_json(rt: Runtime) -> tuple[int, dict[str, Any]]:
    """``warden verify --json`` on ``rt``'s data directory: (exit code, its document)."""
    from typer.testing import CliRunner

    from warden.cli import app

    out = CliRunner().invoke(app, ["verify", "--data-dir", str(rt.settings.data_dir), "--json"])
    return out.exit_code, json.loads(out.stdout)


def fixed_key_id(agent_id: str) -> str:
    """The fixed key id tests register ``agent_id``'s first key under."""
    return "agk_" + hashlib.sha256(agent_id.encode()).hexdigest()[:16]


def registered_agent_keys(agent_id: str = "observed-agent") -> SessionKeys:
    """The session keys of ``agent_id``'s first test key (what Warden verifies with)."""
    return SessionKeys(derive_agent_ikm(TEST_IKM, fixed_key_id(agent_id)))


def _credential(registry: AgentRegistry, agent_id: str, owner: str | None) -> AgentCredential:
    if registry.get(agent_id) is None:
        try:
            _, cred = registry.add(
                agent_id, owner or f"{agent_id}.owner", key_id=fixed_key_id(agent_id)
            )
            return cred
        except (AgentExists, ConfigError, StoreUnavailable):
            pass  # registered by a concurrent caller a moment ago
    active = [k for k in registry.keys(agent_id) if k.revoked_at is None]
    assert active, f"agent {agent_id} has no active key"
    return registry.credential(active[-1].key_id)


def agent_credential(
    target: Runtime | str,
    agent_id: str = "observed-agent",
    owner: str | None = None,
    *,
    audited: bool = True,
) -> AgentCredential:
    """The ACS credential of ``agent_id`` (registered on first use, with its audit entry
    as production writes it; owner ``<agent_id>.owner`` unless given) on a runtime or on
    the database at a URL (a ``warden serve`` subprocess or replicas started with
    TEST_IKM). The registration is a ``warden-agents:<id>`` chain of one entry: ``warden
    verify`` rebuilds the agent table from it (issue 17), so an agent registered without
    it would be a row no leaf explains. ``audited=False`` leaves the chain out, for tests
    of exported chains that want only their own sessions (never verify such a database)."""
    from warden.ledger.ledger import Ledger

    if isinstance(target, Runtime):
        if not audited:
            return _credential(AgentRegistry(target.store, TEST_IKM), agent_id, owner)
        return _credential(target.agents or AgentRegistry(target.store, TEST_IKM), agent_id, owner)
    from warden.store import open_store

    store = open_store(target, migrate=False)
    try:
        ledger = Ledger(store, SessionKeys(TEST_IKM), "warden")
        return _credential(AgentRegistry(store, TEST_IKM, ledger), agent_id, owner)
    finally:
        store.close()


def agent_client(
    transport: Callable[[bytes], dict[str, Any]], target: Runtime | str, **kw: Any
) -> AcsClient:
    """An AcsClient over ``transport`` signing as the registered agent ``kw["agent_id"]``
    (default ``observed-agent``) of ``target`` (see :func:`agent_credential`).

    ``key_id=X`` instead signs with the key of the registered agent ``X`` while claiming
    ``agent_id`` (what the older tests meant by "another key on this session")."""
    signer = kw.pop("key_id", None)
    claimed = kw.pop("agent_id", "observed-agent")
    audited = kw.pop("audited", True)
    cred = agent_credential(target, signer or claimed, kw.pop("owner", None), audited=audited)
    return AcsClient.for_agent(transport, cred, agent_id=claimed, **kw)


def ensure_agent(target: Runtime | str | Path, principal: str, role: str = "agent") -> None:
    """Register ``principal`` as an agent (test set-up, audited) when ``role`` is
    ``agent``: an agent API key belongs to a registered agent (issue 15). ``target`` is a
    runtime, a database URL, or a data directory holding ``warden.db``."""
    if role != "agent":
        return
    if isinstance(target, Path):
        target = f"sqlite:///{target / 'warden.db'}"
    agent_credential(target, principal)


def warden_cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``warden ARGS`` as a subprocess in ``cwd``, with none of this process's ``WARDEN_*``
    variables but the given ones (text output, 120 s timeout)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")}
    return subprocess.run(
        [sys.executable, "-m", "warden", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**clean, **env},
    )


def bearer(rt: Runtime, principal: str, role: Any) -> dict[str, str]:
    """The ``Authorization`` header of a new API key of ``principal`` with ``role`` (no
    groups) in ``rt``, registering the agent first when the role is ``agent``."""
    ensure_agent(rt, principal, role)
    _, token = rt.api_keys.create(principal, role, ())
    return {"Authorization": f"Bearer {token}"}


def claiming(client: AcsClient, agent_id: str) -> AcsClient:
    """A client on ``client``'s session and key that claims another ``agent_id``."""
    other = copy.copy(client)
    other.agent_id = agent_id
    return other


def service_client(rt: Runtime, **kw: Any) -> AcsClient:
    """An AcsClient talking to ``rt`` in process (no HTTP), as a registered agent."""
    return agent_client(rt.acs.handle, rt, **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A real `warden serve` subprocess on loopback."""

    url: str
    data_dir: Path
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def acs_url(self) -> str:
        return self.url + "/acs"

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.data_dir / 'warden.db'}"

    def client(self, **kw: Any) -> AcsClient:
        """A signed ACS client over real HTTP (one request per connection: nothing to leak),
        as a registered agent of this server's database."""
        return agent_client(self.post, self.database_url, **kw)

    def post(self, body: bytes | str) -> dict[str, Any]:
        data = body.encode() if isinstance(body, str) else body
        r = httpx.post(self.acs_url, content=data, headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
        parsed: dict[str, Any] = r.json()
        return parsed

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_server(data_dir: Path, policy: Path = DEFAULT_POLICY, *extra: str) -> Server:
    """``warden serve`` on ``data_dir`` over loopback. A new data directory on SQLite gets
    the migrated store and the seeded keys first (:func:`migrated_sqlite`,
    :func:`seeded_keys`), so the server starts as on any day after its first. A first
    start (migrating, generating keys, then serving) is run by the tests that start
    ``warden serve`` themselves: tests/ops/test_tls.py, tests/ops/test_config_file.py,
    and ``mcp-proxy``'s in tests/wire/mcp/test_mcp_proxy_first_run.py."""
    write_key(data_dir / "ikm.key") if not (data_dir / "ikm.key").exists() else None
    if (
        not any(arg.startswith("--database-url") for arg in extra)
        and not (data_dir / "warden.db").exists()
    ):
        migrated_sqlite(data_dir / "warden.db")
        seeded_keys(data_dir)
    port = free_port()
    log = data_dir / f"serve-{port}.log"
    with log.open("wb") as fh:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "warden",
                "serve",
                "--port",
                str(port),
                "--data-dir",
                str(data_dir),
                "--policy",
                str(policy),
                "--log-level",
                "warning",
                *extra,
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=str(data_dir),
            env={**os.environ},
        )
    url = f"http://127.0.0.1:{port}"
    # Generous: a start takes about a second alone, but 20 s and more on a loaded machine.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"warden serve exited early:\n{log.read_text()}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return Server(url, data_dir, proc, log)
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"warden serve did not start:\n{log.read_text()}")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "srv")
    yield srv
    srv.stop()


def _load_registry() -> Registry:
    reg: Registry = Registry()
    for path in SCHEMAS.rglob("*.json"):
        doc = json.loads(path.read_text())
        reg = reg.with_resource(doc["$id"], Resource.from_contents(doc))
    return reg


_REGISTRY = _load_registry()
_SEED = json.loads((SCHEMAS / "response-envelope.json").read_text())
_RESPONSE_VALIDATOR = Draft202012Validator(
    _SEED, registry=_REGISTRY, format_checker=FormatChecker()
)


def assert_valid_response(response: dict[str, Any]) -> None:
    """Validate a response against the seed 000_… ACS response-envelope schema."""
    errors = sorted(_RESPONSE_VALIDATOR.iter_errors(response), key=lambda e: list(e.path))
    assert not errors, f"response does not validate: {[e.message for e in errors]}\n{response}"
