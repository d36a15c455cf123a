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
