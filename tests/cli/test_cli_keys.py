"""``warden keys create | list | revoke`` on a real SQLite database (Typer's CliRunner)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
import typer
from conftest import TEST_IKM, ensure_agent, write_key
from typer.testing import CliRunner, Result

from warden.cli_keys import keys_app
from warden.identity import ApiKeys, Role, api_key_pepper
from warden.store import open_store

app = typer.Typer()
app.add_typer(keys_app, name="keys")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    write_key(data / "ikm.key")
    open_store(f"sqlite:///{data / 'warden.db'}").close()  # what `warden serve` does first
    return data


def run(*args: str) -> Result:
    return CliRunner().invoke(app, ["keys", *args], env={"COLUMNS": "200"})


def test_create_list_revoke_round_trip(data_dir: Path) -> None:
    dd = ["--data-dir", str(data_dir)]
    made = run("create", "--principal", "alice@example.com", "--role", "approver",
               "--group", "ops", "--group", "finance", "--json", *dd)  # fmt: skip
    assert made.exit_code == 0, made.output
    created = json.loads(made.stdout)
    assert created["principal"] == "alice@example.com" and created["role"] == "approver"
    assert created["groups"] == ["finance", "ops"]
    assert re.fullmatch(rf"wdn_{created['key_id']}_[A-Za-z0-9_-]{{43}}", created["token"])
    assert "only once" in made.stderr

    # the printed token really authenticates, with the IKM-derived pepper
    store = open_store(f"sqlite:///{data_dir / 'warden.db'}", migrate=False)
    try:
        keys = ApiKeys(store, api_key_pepper(TEST_IKM))
        identity = keys.authenticate(created["token"])
        assert identity is not None and identity.key_id == created["key_id"]
        assert identity.role is Role.APPROVER and identity.groups == ("finance", "ops")
    finally:
        store.close()

    ensure_agent(data_dir, "bot")
    other = json.loads(run("create", "--principal", "bot", "--role", "agent", "--json", *dd).stdout)

    listed = run("list", "--json", *dd)
    assert listed.exit_code == 0, listed.output
    entries = json.loads(listed.stdout)
    assert [(e["key_id"], e["principal"], e["role"], e["groups"], e["revoked_at"])
            for e in entries] == [
        (created["key_id"], "alice@example.com", "approver", ["finance", "ops"], None),
        (other["key_id"], "bot", "agent", [], None),
    ]  # fmt: skip
    assert created["token"] not in listed.output and "secret_hash" not in listed.output

    revoked = run("revoke", created["key_id"], *dd)
    assert revoked.exit_code == 0, revoked.output
    assert created["key_id"] in revoked.stdout

    after = {e["key_id"]: e for e in json.loads(run("list", "--json", *dd).stdout)}
    assert after[created["key_id"]]["revoked_at"] is not None
    assert after[other["key_id"]]["revoked_at"] is None

    store = open_store(f"sqlite:///{data_dir / 'warden.db'}", migrate=False)
    try:
        keys = ApiKeys(store, api_key_pepper(TEST_IKM))
        assert keys.authenticate(created["token"]) is None
        assert keys.authenticate(other["token"]) is not None
    finally:
        store.close()


def test_human_output(data_dir: Path) -> None:
    dd = ["--data-dir", str(data_dir)]
    made = run("create", "--principal", "carol", "--role", "admin", *dd)
    assert made.exit_code == 0, made.output
    token = made.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"wdn_[0-9a-f]{12}_[A-Za-z0-9_-]{43}", token)
    assert "only once" in made.stderr
    listed = run("list", *dd)
    assert listed.exit_code == 0 and "carol" in listed.stdout and "admin" in listed.stdout
    assert token not in listed.stdout


def test_list_empty(data_dir: Path) -> None:
    result = run("list", "--json", "--data-dir", str(data_dir))
    assert result.exit_code == 0 and json.loads(result.stdout) == []


def test_revoke_unknown_key_exits_1(data_dir: Path) -> None:
    result = run("revoke", "0123456789ab", "--data-dir", str(data_dir))
    assert result.exit_code == 1
    assert "no API key" in result.stderr
    as_json = run("revoke", "0123456789ab", "--json", "--data-dir", str(data_dir))
    assert as_json.exit_code == 1 and as_json.stdout == ""  # nothing on stdout: no report
    assert "no API key" in as_json.stderr


def _log_state(data_dir: Path) -> tuple[int, list[tuple[str, str | None]]]:
    """The transparency log's leaf count and every key's ``(key_id, revoked_at)``."""
    with sqlite3.connect(data_dir / "warden.db") as conn:
        leaves = conn.execute("SELECT next_index FROM log_state").fetchone()[0]
        keys = conn.execute("SELECT key_id, revoked_at FROM api_keys ORDER BY key_id").fetchall()
    return leaves, keys


def test_revoking_twice_says_so_and_writes_nothing(data_dir: Path) -> None:
    """Decision 771: a second revocation changes nothing, adds no log leaf, says so
    (exit 0: the key is revoked, as asked)."""
    dd = ["--data-dir", str(data_dir)]
    made = json.loads(run("create", "--principal", "dave", "--role", "admin", "--json", *dd).stdout)
    key_id = made["key_id"]
    first = run("revoke", key_id, "--json", *dd)
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout)
    assert doc["key_id"] == key_id and doc["already_revoked"] is False
    assert doc["revoked_at"] is not None and doc["principal"] == "dave"
    before = _log_state(data_dir)

    again = run("revoke", key_id, *dd)
    assert again.exit_code == 0, again.output
    assert f"{key_id} was already revoked at {doc['revoked_at']}" in again.stdout
    again_json = run("revoke", key_id, "--json", *dd)
    assert again_json.exit_code == 0, again_json.output
    assert json.loads(again_json.stdout) == {**doc, "already_revoked": True}
    assert _log_state(data_dir) == before  # no new leaf, revoked_at unchanged


@pytest.mark.parametrize(
    "args",
    [
        ["--principal", "alice smith", "--role", "agent"],
        ["--principal", "alice", "--role", "root"],
        ["--principal", "alice", "--role", "approver", "--group", "bad group"],
    ],
    ids=["principal", "role", "group"],
)
def test_create_bad_input_exits_2(data_dir: Path, args: list[str]) -> None:
    result = run("create", *args, "--json", "--data-dir", str(data_dir))
    assert result.exit_code == 2, result.output
    assert "error" in result.stderr and result.stdout == ""
    assert json.loads(run("list", "--json", "--data-dir", str(data_dir)).stdout) == []


def test_missing_database_or_key_exits_2(tmp_path: Path) -> None:
    no_db = tmp_path / "fresh"
    write_key(no_db / "ikm.key")
    result = run("list", "--data-dir", str(no_db))
    assert result.exit_code == 2 and "no database" in result.stderr
    assert not (no_db / "warden.db").exists()

    no_key = tmp_path / "nokey"
    no_key.mkdir()
    open_store(f"sqlite:///{no_key / 'warden.db'}").close()
    result = run("create", "--principal", "a", "--role", "agent", "--data-dir", str(no_key))
    assert result.exit_code == 2 and "key file" in result.stderr


def test_database_url_and_key_file_options(tmp_path: Path) -> None:
    db = tmp_path / "elsewhere.db"
    open_store(f"sqlite:///{db}").close()
    key = write_key(tmp_path / "k" / "ikm.key")
    opts = ["--database-url", f"sqlite:///{db}", "--key-file", str(key),
            "--data-dir", str(tmp_path / "unused")]  # fmt: skip
    ensure_agent(f"sqlite:///{db}", "dave")
    made = run("create", "--principal", "dave", "--role", "agent", "--json", *opts)
    assert made.exit_code == 0, made.output
    assert [e["principal"] for e in json.loads(run("list", "--json", *opts).stdout)] == ["dave"]
