"""docs/identities.md's client-side recipe runs as written against a live ``warden serve``:
the ML-DSA-65 key pair generated with ``cryptography``, the ``warden.Client`` key file,
the check of Warden's response signature, and the AdCP RFC 9421 signed request with
``http-message-signatures``. Only the placeholders (URL, key id, the demo key) are
substituted, and each substitution is asserted to find its text."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Server
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from warden.adcp.rfc9421.keys import public_jwk
from warden.wire.acs.client import AcsClient

DOC = Path(__file__).resolve().parents[2] / "docs" / "identities.md"


def _snippets() -> list[str]:
    text = DOC.read_text()
    section = text.split("### Client side", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def _sub(code: str, old: str, new: str) -> str:
    assert old in code, old
    return code.replace(old, new)


def _warden(data_dir: Path, *args: str) -> Any:
    proc = subprocess.run(
        [sys.executable, "-m", "warden", *args, "--json", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_client_side_recipe_runs(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    generate, client, verify, adcp = _snippets()

    exec(compile(generate, "identities.md:generate", "exec"), {})
    assert (tmp_path / "pq-bot.key.pem").stat().st_mode & 0o077 == 0
    added = _warden(
        server.data_dir, "agents", "add", "pq-bot", "--owner", "alice",
        "--public-key", "pq-bot.pub.pem",
    )  # fmt: skip
    assert added["algorithm"] == "ML-DSA-65"

    code = _sub(client, '"https://warden.example"', repr(server.url))
    code = _sub(code, '"agk_0123456789abcdef"', repr(added["key_id"]))
    ns: dict[str, Any] = {}
    exec(compile(code, "identities.md:client", "exec"), ns)
    assert ns["decision"].chain_hash  # an answer verified under Warden's ML-DSA key

    # The verifier of the doc accepts a genuine answer and refuses a changed one.
    exec(compile(verify, "identities.md:verify", "exec"), ns)
    private = serialization.load_pem_private_key(
        (tmp_path / "pq-bot.key.pem").read_bytes(), password=None
    )
    from warden.crypto.agent_key import load_agent_key

    pair = load_agent_key(tmp_path / "pq-bot.key")
    acs = AcsClient.for_public_key(
        server.post, "pq-bot", added["key_id"], private, "ML-DSA-65", pair.warden_key
    )
    answer = acs.hello(profiles=("acs-crypto",))
    assert ns["warden_signed"](answer, ns["warden_jwk"]) is True
    answer["result"]["profiles_accepted"] = []
    assert ns["warden_signed"](answer, ns["warden_jwk"]) is False

    # The RFC 9421 request, signed with a registered key: accepted; with another: 401.
    _warden(server.data_dir, "agents", "add", "buyer-bot", "--owner", "bob")
    key = Ed25519PrivateKey.generate()
    (tmp_path / "buyer-bot.jwk").write_text(json.dumps(public_jwk(key, "buyer-bot-2026")))
    _warden(server.data_dir, "agents", "add-signing-key", "buyer-bot", "--key", "buyer-bot.jwk")
    code = _sub(adcp, '"https://warden.example"', repr(server.url))
    code = _sub(code, "signing_key = Ed25519PrivateKey.generate()", "signing_key = REGISTERED")
    ns = {"REGISTERED": key}
    exec(compile(code, "identities.md:adcp", "exec"), ns)
    assert ns["answer"].status_code == 200, ns["answer"].text
    ns = {"REGISTERED": Ed25519PrivateKey.generate()}
    exec(compile(code, "identities.md:adcp", "exec"), ns)
    assert ns["answer"].status_code == 401, ns["answer"].text
