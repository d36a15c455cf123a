"""``warden agents`` on AdCP RFC 9421 signing keys as a user meets them: one key is
registered once (decision 620), a revoked agent's keys show as revoked, the same refusal
gets the same exit code as ``agents add-key`` (1 unknown agent, 2 revoked agent or
refused key; decision 621), a second revocation says so, and a refused file is named."""

from __future__ import annotations

import json
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from warden.adcp.rfc9421.keys import public_jwk
from warden.cli import app
from warden.runtime import Runtime


def test_signing_key_commands(runtime: Runtime, tmp_path: Path) -> None:
    data = ["--data-dir", str(runtime.settings.data_dir)]
    runner = CliRunner()

    def warden(*args: str) -> tuple[int, str]:
        result = runner.invoke(app, ["agents", *args, *data])
        return result.exit_code, result.output

    assert warden("add", "buyer-bot", "--owner", "alice", "--json")[0] == 0
    assert warden("add", "demo-agent", "--owner", "bob", "--json")[0] == 0
    key = tmp_path / "buyer-bot.jwk"
    key.write_text(json.dumps(public_jwk(Ed25519PrivateKey.generate(), "buyer-bot-2026")))
    assert warden("add-signing-key", "buyer-bot", "--key", str(key))[0] == 0

    # The same key under another kid or for another agent: refused, exit 2, nothing written.
    code, out = warden("add-signing-key", "demo-agent", "--key", str(key), "--kid", "other")
    assert code == 2 and "already registered" in out, out
    code, out = warden("revoke-signing-key", "buyer-bot-2026")
    assert code == 0 and out.startswith("revoked signing key buyer-bot-2026 at"), out
    code, out = warden("revoke-signing-key", "buyer-bot-2026")
    assert code == 0 and "was already revoked at" in out, out
    code, out = warden("add-signing-key", "demo-agent", "--key", str(key), "--kid", "other")
    assert code == 2 and "already registered" in out, out
    code, out = warden("show", "demo-agent", "--json")
    assert json.loads(out)["signing_keys"] == []

    # Unknown agent → 1, revoked agent → 2: as `agents add-key`.
    fresh = tmp_path / "fresh.jwk"
    fresh.write_text(json.dumps(public_jwk(Ed25519PrivateKey.generate(), "fresh")))
    assert warden("add-signing-key", "nobody", "--key", str(fresh))[0] == 1
    assert warden("add-signing-key", "demo-agent", "--key", str(fresh))[0] == 0
    assert warden("revoke", "demo-agent")[0] == 0
    other = tmp_path / "other.jwk"
    other.write_text(json.dumps(public_jwk(Ed25519PrivateKey.generate(), "other-2")))
    code, out = warden("add-signing-key", "demo-agent", "--key", str(other))
    assert code == 2 and "revoked" in out, out
    assert warden("add-key", "demo-agent", "--public-key", str(other))[0] == 2

    # A revoked agent's signing keys are shown revoked, with the agent.
    code, out = warden("show", "demo-agent", "--json")
    doc = json.loads(out)
    assert [k["revoked_at"] for k in doc["signing_keys"]] == [doc["revoked_at"]]
    assert doc["signing_keys"][0]["revoked_with_agent"] is True
    code, out = warden("show", "demo-agent")
    assert "signing key fresh" in out and "(with the agent)" in out, out

    # A key of the wrong kind names its file.
    akp = tmp_path / "pq-bot.jwk"
    akp.write_text(json.dumps({"kty": "AKP", "alg": "ML-DSA-65", "pub": "AAAA", "kid": "pq"}))
    code, out = warden("add-signing-key", "buyer-bot", "--key", str(akp))
    assert code == 2 and "pq-bot.jwk" in out, out


def _leaves(runtime: Runtime) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(runtime.settings.resolved_database_url())
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT next_index FROM log_state")).scalar_one())
    finally:
        engine.dispose()


def test_revoking_an_agent_or_signing_key_twice_says_so(runtime: Runtime, tmp_path: Path) -> None:
    """Decision 771: a second revocation keeps the first time, writes no log leaf, exits 0
    and says so; ``--json`` has ``already_revoked``."""
    data = ["--data-dir", str(runtime.settings.data_dir)]
    runner = CliRunner()

    def warden(*args: str) -> tuple[int, str]:
        result = runner.invoke(app, ["agents", *args, *data])
        return result.exit_code, result.stdout

    assert warden("add", "twice-bot", "--owner", "alice", "--json")[0] == 0
    key = tmp_path / "twice.jwk"
    key.write_text(json.dumps(public_jwk(Ed25519PrivateKey.generate(), "twice-2026")))
    assert warden("add-signing-key", "twice-bot", "--key", str(key))[0] == 0

    code, out = warden("revoke-signing-key", "twice-2026", "--json")
    first_key = json.loads(out)
    assert code == 0 and first_key["already_revoked"] is False
    leaves = _leaves(runtime)
    code, out = warden("revoke-signing-key", "twice-2026", "--json")
    assert code == 0 and json.loads(out) == {**first_key, "already_revoked": True}
    assert _leaves(runtime) == leaves

    code, out = warden("revoke", "twice-bot", "--json")
    first = json.loads(out)
    assert code == 0 and first["already_revoked"] is False and first["active"] is False
    leaves = _leaves(runtime)
    code, out = warden("revoke", "twice-bot")
    assert code == 0 and out.strip() == f"twice-bot was already revoked at {first['revoked_at']}"
    code, out = warden("revoke", "twice-bot", "--json")
    assert code == 0 and json.loads(out) == {**first, "already_revoked": True}
    assert _leaves(runtime) == leaves
    code, out = warden("revoke", "no-such-bot", "--json")
    assert code == 1 and out == ""
