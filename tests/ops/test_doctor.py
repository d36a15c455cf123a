"""warden doctor (issue 18 item 5): each failing check (bad key permissions, unreachable
database, bad bundle, old migration, bad webhooks) exits 1 and names the problem; the
--json document follows schemas/cli/doctor.json; a healthy deployment passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from conftest import DEFAULT_POLICY, write_key
from jsonschema import Draft202012Validator
from sqlalchemy import create_engine, text

from warden import native
from warden.cli_output import cli_schema
from warden.crypto.asymmetric import load_or_create_mldsa_key
from warden.crypto.ed25519_keys import load_or_create_signing_key
from warden.crypto.keystore import load_or_create_api_token
from warden.store.sql import _alembic_config, head_revision, open_store

SCHEMA = Draft202012Validator(cli_schema("doctor"))


def doctor(data: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-m", "warden", "doctor", "--data-dir", str(data), "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=next(p for p in data.parents if p.is_dir()),
        env={k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")},
    )
    doc = json.loads(done.stdout) if done.stdout else {}
    if doc:
        errors = [e.message for e in SCHEMA.iter_errors(doc)]
        assert not errors, errors
    return done.returncode, doc, done.stderr


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in doc["checks"]}


@pytest.fixture
def deployment(tmp_path: Path, database_url: str) -> tuple[Path, str]:
    """A data dir whose key files exist (0600, each one a key serve loads: doctor loads
    them as serve does, decision 1192) and whose database is at head."""
    data = tmp_path / "data"
    write_key(data / "ikm.key")
    load_or_create_api_token(data / "api.token")
    load_or_create_signing_key(data / "signing.key")
    load_or_create_signing_key(data / "governance-signing.key")
    load_or_create_mldsa_key(data / "mldsa.key")
    open_store(database_url).close()
    return data, database_url


def test_healthy_deployment_passes(deployment: tuple[Path, str]) -> None:
    data, url = deployment
    code, doc, _ = doctor(data, "--database-url", url)
    checks = by_name(doc)
    assert code == 0 and doc["ok"] is True, doc
    assert checks["database"]["status"] == "ok" and head_revision() in checks["database"]["message"]
    assert checks["key:ikm"]["status"] == "ok"
    assert checks["bundle"]["status"] == "ok"
    if url.startswith("sqlite"):
        # Never presented as passed: SQLite has no server clock to compare with.
        assert checks["clock_skew"]["status"] == "skip"
        assert "not applicable" in checks["clock_skew"]["message"]
    else:
        assert checks["clock_skew"]["status"] == "ok"


def test_key_readable_by_others_fails(deployment: tuple[Path, str]) -> None:
    data, url = deployment
    (data / "ikm.key").chmod(0o644)
    code, doc, _ = doctor(data, "--database-url", url)
    assert code == 1 and doc["ok"] is False
    ikm = by_name(doc)["key:ikm"]
    assert ikm["status"] == "fail" and "chmod 600" in ikm["message"] and "0o644" in ikm["message"]


@pytest.mark.parametrize(
    ("file", "check"),
    [("checkpoint.key", "key:checkpoint"), ("request-signing.key", "key:request_signing")],
)
def test_log_and_request_signing_keys_are_checked(
    deployment: tuple[Path, str], file: str, check: str
) -> None:
    """The transparency log's checkpoint key and AdCP's RFC 9421 request-signing key are
    key files like the others: not there yet is a warning, readable by others a failure."""
    data, url = deployment
    code, doc, _ = doctor(data, "--database-url", url)
    assert code == 0 and by_name(doc)[check]["status"] == "warn", doc
    (data / file).write_text("x" * 40)
    (data / file).chmod(0o644)
    code, doc, _ = doctor(data, "--database-url", url)
    found = by_name(doc)[check]
    assert code == 1 and found["status"] == "fail" and "chmod 600" in found["message"], doc
    assert str(data / file) in found["message"]


def test_old_migration_fails(deployment: tuple[Path, str]) -> None:
    data, url = deployment
    head = head_revision()
    previous = ScriptDirectory.from_config(_alembic_config()).get_revision(head).down_revision
    assert isinstance(previous, str)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": previous})
    engine.dispose()
    code, doc, _ = doctor(data, "--database-url", url)
    db = by_name(doc)["database"]
    assert code == 1 and db["status"] == "fail"
    assert previous in db["message"] and "warden db upgrade" in db["message"]


def test_unreachable_database_fails(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_key(data / "ikm.key")
    code, doc, _ = doctor(
        data, "--database-url", "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"
    )
    checks = by_name(doc)
    assert code == 1 and checks["database"]["status"] == "fail"
    assert "cannot be reached" in checks["database"]["message"]
    assert checks["clock_skew"]["status"] == "skip"


def test_bad_bundle_budgets_and_webhooks_fail(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_key(data / "ikm.key")
    bad_bundle = tmp_path / "bad.yaml"
    bad_bundle.write_text("id: x\nversion: 1\nrules: [{id: r, effect: maybe}]\n")
    hooks = tmp_path / "hooks.yaml"
    secret = "a-long-enough-secret-0123456789-abc"
    hook = f"webhooks:\n  - {{id: h, url: 'http://127.0.0.1:9/x', secret: '{secret}'}}\n"
    hooks.write_text(hook)
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text("- {id: b, kind: org, currency: USD, cap: 1.5, period: day}\n")
    cfg = tmp_path / "warden.toml"
    cfg.write_text(
        f'policy = "{bad_bundle.name}"\nwebhooks = "{hooks.name}"\nbudgets = "{budgets.name}"\n'
    )
    code, doc, _ = doctor(data, "--config", str(cfg))
    checks = by_name(doc)
    assert code == 1
    assert checks["bundle"]["status"] == "fail" and "bad.yaml" in checks["bundle"]["message"]
    assert checks["budgets"]["status"] == "fail"
    # A loopback destination is outside an empty allow-list.
    assert checks["webhooks"]["status"] == "fail"
    assert "allow_networks" in checks["webhooks"]["message"]
    hooks.write_text("allow_networks: [loopback]\n" + hook)
    cfg.write_text(f'policy = "{DEFAULT_POLICY}"\nwebhooks = "{hooks.name}"\n')
    code, doc, _ = doctor(data, "--config", str(cfg))
    assert by_name(doc)["webhooks"]["status"] == "ok", doc
    assert by_name(doc)["bundle"]["status"] == "ok"


def test_invalid_settings_exit_2_with_no_report(tmp_path: Path) -> None:
    cfg = tmp_path / "warden.toml"
    cfg.write_text("colour = 'blue'\n")
    code, doc, err = doctor(tmp_path / "data", "--config", str(cfg))
    assert code == 2 and doc == {} and "unknown key 'colour'" in err


@pytest.mark.parametrize(
    ("state", "reason", "status", "says"),
    [
        ("native", "", "ok", ["runs compiled (mypyc)"]),
        (
            "python",
            "",
            "ok",
            ["pure Python", "slower", "pip install -e .", "without WARDEN_PURE_PYTHON", "README"],
        ),
        (
            "stale",
            "2 module(s) changed since they were compiled (warden.ids, warden.json_text)",
            "warn",
            ["stale build", "warden.ids, warden.json_text", "rebuild", "pip install -e ."],
        ),
        ("stale", "", "warn", ["stale build", "sources changed", "pip install -e ."]),
        ("bogus", "", "warn", ["unknown build state 'bogus'"]),
    ],
)
def test_the_native_check_for_each_build_state(
    state: str, reason: str, status: str, says: list[str]
) -> None:
    """A compiled build passes; a pure-Python install passes too (supported) but says it is
    slower and how to compile; a stale build warns and says to rebuild, with the guard's
    own reason when it gave one."""
    from warden.doctor import check_native

    check = check_native(state, reason)
    assert (check.name, check.status) == ("native", status)
    for said in says:
        assert said in check.message, (said, check.message)
    if state != "python":
        assert "pure Python" not in check.message


PROBE_DOCTOR = """
import json, sys
import warden.native as n
sys.stderr.write(json.dumps({"state": n.state, "reason": n.reason}) + "\\n")
from warden.launch import main
sys.argv = ["warden", *sys.argv[1:]]
main()
"""


def test_doctor_json_reports_the_build_state_of_its_own_process(tmp_path: Path) -> None:
    """End to end: ``warden doctor --json`` has the ``native`` check, and it is what that
    process's guard (``warden.native.state``) found."""
    from warden.doctor import check_native

    data = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-c", PROBE_DOCTOR, "doctor", "--data-dir", str(data), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")},
    )
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("{")]
    seen = json.loads(line)
    doc = json.loads(done.stdout)
    assert not [e.message for e in SCHEMA.iter_errors(doc)]
    assert doc["checks"][-1]["name"] == "native"
    assert by_name(doc)["native"] == check_native(seen["state"], seen["reason"]).to_json()
    # The same interpreter on the same sources as this test: the same build state.
    assert seen["state"] == native.state


#: A key file of each kind with content serve refuses, and the words of serve's refusal.
BAD_KEYS = [
    ("ikm.key", "nothex", "key:ikm", "is not hex text"),
    ("api.token", "abcdefg", "key:api_token", "at least 32 are required"),
    ("signing.key", "garbage", "key:signing", "not an unencrypted PEM private key"),
    ("governance-signing.key", "garbage", "key:governance", "not an unencrypted PEM"),
    ("checkpoint.key", "garbage", "key:checkpoint", "not an unencrypted PEM private key"),
    ("request-signing.key", "garbage", "key:request_signing", "not an unencrypted PEM"),
    ("mldsa.key", "garbage", "key:mldsa", "is not a PKCS#8 PEM key"),
]


@pytest.mark.parametrize(("file", "content", "check", "says"), BAD_KEYS)
def test_a_key_file_serve_refuses_fails(
    deployment: tuple[Path, str], file: str, content: str, check: str, says: str
) -> None:
    """Each key file is loaded with serve's own loader (issue 16 s12 item 3): one whose
    content serve refuses fails doctor with the loader's message, mode 0600 or not, and
    serve refuses it too with that same message. Doctor never rewrites the file."""
    data, url = deployment
    path = data / file
    path.write_text(content + "\n")
    path.chmod(0o600)
    before = path.stat()
    code, doc, _ = doctor(data, "--database-url", url)
    found = by_name(doc)[check]
    assert code == 1 and doc["ok"] is False, doc
    assert found["status"] == "fail" and says in found["message"], found
    assert str(path) in found["message"]
    others = [c for c in doc["checks"] if c["name"].startswith("key:") and c["name"] != check]
    assert all(c["status"] in ("ok", "warn") for c in others), others
    after = path.stat()
    assert path.read_text() == content + "\n"
    assert (after.st_mtime_ns, after.st_ino) == (before.st_mtime_ns, before.st_ino)
    served = subprocess.run(
        [sys.executable, "-m", "warden", "serve", "--data-dir", str(data), "--port", "0"]
        + ["--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=data.parent,
        env={k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")},
    )
    assert served.returncode == 2, served.stderr
    assert says in served.stderr and "Traceback" not in served.stderr


def test_healthy_keys_load_and_missing_ones_are_not_created(tmp_path: Path) -> None:
    """A key file that loads is ok ("loads"); one that is absent stays a warning (serve
    creates it) and doctor does not create it."""
    data = tmp_path / "data"
    write_key(data / "ikm.key")
    code, doc, _ = doctor(data)
    checks = by_name(doc)
    assert code == 0, doc
    assert checks["key:ikm"]["status"] == "ok" and "loads" in checks["key:ikm"]["message"]
    assert checks["data_dir"]["status"] == "ok"
    for name in ("key:api_token", "key:signing", "key:mldsa", "key:checkpoint"):
        assert checks[name]["status"] == "warn" and "serve creates it" in checks[name]["message"]
    assert sorted(p.name for p in data.iterdir()) == ["ikm.key"]


def test_an_absent_data_dir_that_serve_can_create_is_a_warning(tmp_path: Path) -> None:
    data = tmp_path / "not" / "yet"
    code, doc, _ = doctor(data)
    checks = by_name(doc)
    assert code == 0 and checks["data_dir"]["status"] == "warn", doc
    assert "serve creates it" in checks["data_dir"]["message"]
    assert list(tmp_path.iterdir()) == []  # not created, and the probe left nothing


def test_a_data_dir_that_is_a_file_fails(tmp_path: Path) -> None:
    """Doctor makes serve's (and every command's) check of the data directory: a regular
    file fails it, and so does every key file that would live in it."""
    data = tmp_path / "data"
    data.write_text("not a folder")
    code, doc, _ = doctor(data)
    checks = by_name(doc)
    assert code == 1 and doc["ok"] is False
    assert checks["data_dir"]["status"] == "fail"
    assert checks["data_dir"]["message"] == (f"data directory {data} exists and is not a directory")
    assert checks["key:ikm"]["status"] == "fail"
    assert data.read_text() == "not a folder"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_a_data_dir_serve_cannot_create_fails(tmp_path: Path) -> None:
    """`/proc/forbidden` used to pass ("serve creates it") though serve cannot create it,
    even as root (mkdir in /proc fails whatever the permission bits say)."""
    code, doc, _ = doctor(Path("/proc/forbidden"))
    checks = by_name(doc)
    assert code == 1 and doc["ok"] is False
    assert checks["data_dir"]["status"] == "fail"
    assert "/proc/forbidden does not exist and cannot be created" in checks["data_dir"]["message"]
    for name in ("key:ikm", "key:api_token", "key:signing"):
        assert checks[name]["status"] == "fail", checks[name]
        assert "serve cannot create it" in checks[name]["message"]
    assert checks["database"]["status"] == "fail"
    assert not Path("/proc/forbidden").exists()
