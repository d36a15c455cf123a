"""ACS-Crypto (issue 21 item 1): an agent registers a public key and signs with it;
Warden answers with its ML-DSA-65 key, published at ``GET /v1/keys``; a flipped bit,
another key and an HMAC downgrade are refused; ``warden verify`` checks the responses
offline with only the published keys.

The independent verifier here (:func:`independent_verify`) shares no code with the
signing path: it reads the published JWK with ``base64`` and ``json``, canonicalizes with
the ``rfc8785`` package and verifies with ``cryptography`` directly.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, mldsa
from typer.testing import CliRunner

from warden.cli import app
from warden.runtime import Runtime
from warden.schemas import SchemaSet
from warden.wire.acs.client import AcsClient
from warden.wire.acs.signing import sign_request

ACS = SchemaSet("acs")


def published_jwks(rt: Runtime) -> dict[str, Any]:
    """``GET /v1/keys`` as served."""
    from fastapi.testclient import TestClient

    from warden.server.app import create_app

    with TestClient(create_app(rt)) as http:
        got = http.get("/v1/keys", headers={"authorization": f"Bearer {rt.api_token}"})
    assert got.status_code == 200, got.text
    data: dict[str, Any] = got.json()["data"]
    return data


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def independent_verify(response: dict[str, Any], jwk: dict[str, Any]) -> bool:
    """Verify an ACS response's ML-DSA-65 signature from the published AKP JWK alone."""
    assert jwk["kty"] == "AKP" and jwk["alg"] == "ML-DSA-65"
    public = mldsa.MLDSA65PublicKey.from_public_bytes(_unb64url(jwk["pub"]))
    member = "result" if "result" in response else "error"
    signature = response[member]["signature"]
    assert signature["algorithm"] == "ML-DSA-65" and signature["key_id"] == jwk["kid"]
    unsigned = dict(response)
    unsigned[member] = {k: v for k, v in response[member].items() if k != "signature"}
    try:
        public.verify(base64.b64decode(signature["value"]), rfc8785.dumps(unsigned))
    except InvalidSignature:
        return False
    return True


def _mldsa_jwk(jwks: dict[str, Any]) -> dict[str, Any]:
    (jwk,) = [k for k in jwks["keys"] if k["kty"] == "AKP"]
    return jwk


def _valid(response: dict[str, Any]) -> None:
    problem = ACS.first_error("response-envelope.json", response)
    assert problem is None, (problem, response)


def _client(
    rt: Runtime, agent_id: str, key_id: str, private: Any, algorithm: str, **kw: Any
) -> AcsClient:
    jwk = _mldsa_jwk(published_jwks(rt))
    warden_key = mldsa.MLDSA65PublicKey.from_public_bytes(_unb64url(jwk["pub"]))
    return AcsClient.for_public_key(
        rt.acs.handle, agent_id, key_id, private, algorithm, warden_key, **kw
    )


@pytest.fixture
def pq(runtime: Runtime) -> tuple[Runtime, str, mldsa.MLDSA65PrivateKey]:
    private = mldsa.MLDSA65PrivateKey.generate()
    assert runtime.agents is not None
    _, key_id, cred = runtime.agents.add_with_public_key(
        "pq-agent", "alice", ("ML-DSA-65", private.public_key())
    )
    assert cred is None  # instead of HMAC: no shared secret at all
    return runtime, key_id, private


def test_crypto_session_is_negotiated_and_every_answer_is_ml_dsa_signed(
    pq: tuple[Runtime, str, mldsa.MLDSA65PrivateKey],
) -> None:
    rt, key_id, private = pq
    jwk = _mldsa_jwk(published_jwks(rt))
    client = _client(rt, "pq-agent", key_id, private, "ML-DSA-65")
    hello = client.hello(profiles=("acs-core", "acs-crypto"))
    _valid(hello)
    result = hello["result"]
    assert result["profiles_accepted"] == ["acs-core", "acs-crypto"]
    # HMAC is not offered inside an ACS-Crypto session.
    assert "HMAC-SHA256" not in result["signature_algorithms_supported"]
    assert result["signature_algorithms_supported"][0] == "ML-DSA-65"
    assert independent_verify(hello, jwk)
    step = client.tool_call("read_file", {"path": "/tmp/x"})
    _valid(step)
    assert step["result"]["decision"] in ("allow", "deny", "ask")
    assert isinstance(step["result"]["chain_hash"], str)
    assert independent_verify(step, jwk)
    # The same response fails under another ML-DSA-65 key with the same kid.
    other = mldsa.MLDSA65PrivateKey.generate().public_key()
    forged_jwk = {**jwk, "pub": base64.urlsafe_b64encode(other.public_bytes_raw()).decode()}
    forged_jwk["pub"] = forged_jwk["pub"].rstrip("=")
    assert not independent_verify(step, forged_jwk)
    # A ping signed with the agent's key gets a signed (ML-DSA) answer too.
    ping = client.call("system/ping", {"echo": "hi"})
    _valid(ping)
    assert independent_verify(ping, jwk)


def test_one_flipped_bit_in_the_agents_signature_is_refused(
    pq: tuple[Runtime, str, mldsa.MLDSA65PrivateKey],
) -> None:
    rt, key_id, private = pq
    client = _client(rt, "pq-agent", key_id, private, "ML-DSA-65")
    client.hello(profiles=("acs-crypto",))
    env = client.envelope(
        "steps/toolCallRequest",
        {"tool": {"name": "read_file"}, "arguments": {"path": {"value": "/x"}}},
    )
    raw = bytearray(base64.b64decode(env["params"]["signature"]["value"]))
    raw[100] ^= 0x01
    env["params"]["signature"]["value"] = base64.b64encode(bytes(raw)).decode()
    before = rt.store.counts()
    answer = rt.acs.handle(json.dumps(env).encode())
    _valid(answer)
    assert answer["error"]["code"] == -32004
    assert "signature" not in answer["error"]  # unauthenticated: unsigned
    assert rt.store.counts() == before  # nothing recorded
    # The intact signature over a changed payload is refused as well.
    good = client.envelope(
        "steps/toolCallRequest",
        {"tool": {"name": "read_file"}, "arguments": {"path": {"value": "/x"}}},
    )
    good["params"]["payload"]["arguments"]["path"]["value"] = "/etc/shadow"
    assert rt.acs.handle(json.dumps(good).encode())["error"]["code"] == -32004


def test_an_hmac_request_in_an_acs_crypto_session_is_refused(runtime: Runtime) -> None:
    assert runtime.agents is not None
    private = mldsa.MLDSA65PrivateKey.generate()
    _, public_id, cred = runtime.agents.add_with_public_key(
        "dual", "alice", ("ML-DSA-65", private.public_key()), hmac=True
    )
    assert cred is not None  # beside HMAC: both keys are the agent's
    jwk = _mldsa_jwk(published_jwks(runtime))
    client = _client(runtime, "dual", public_id, private, "ML-DSA-65")
    assert "acs-crypto" in client.hello(profiles=("acs-crypto",))["result"]["profiles_accepted"]
    # Downgrade 1: the agent's valid HMAC key on the ACS-Crypto session.
    hmac_client = AcsClient.for_agent(
        runtime.acs.handle, cred, session_id=client.session_id, track_chain=False
    )
    env = hmac_client.envelope(
        "steps/toolCallRequest", {"tool": {"name": "read_file"}, "arguments": {}}
    )
    answer = runtime.acs.handle(json.dumps(env).encode())
    _valid(answer)
    assert answer["error"]["code"] == -32004
    assert answer["error"]["data"]["reason"] == "downgrade_refused"
    # Answered as the session's every answer: with Warden's ML-DSA key, never HMAC.
    assert independent_verify(answer, jwk)
    # Downgrade 2: an HMAC signature naming the public key's key_id.
    env2 = client.envelope(
        "steps/toolCallRequest", {"tool": {"name": "read_file"}, "arguments": {}}, sign=False
    )
    forged = sign_request(env2, hmac_client.key, public_id)
    answer2 = runtime.acs.handle(json.dumps(forged).encode())
    assert answer2["error"]["code"] == -32004 and "signature" not in answer2["error"]
    session = runtime.store.load_session(client.session_id)
    assert session is not None and session.head_seq == -1  # no step was recorded


def test_another_agents_hmac_key_on_an_acs_crypto_session_reads_as_missing(
    pq: tuple[Runtime, str, mldsa.MLDSA65PrivateKey],
) -> None:
    """Decision 1005: not `downgrade_refused` (which told that the session exists and is
    ACS-Crypto) but the answer a session nobody opened gets, byte for byte."""
    rt, key_id, private = pq
    assert rt.agents is not None
    owner = _client(rt, "pq-agent", key_id, private, "ML-DSA-65")
    _, cred = rt.agents.add("bot-b", "bob")
    other = AcsClient.for_agent(rt.acs.handle, cred, session_id=owner.session_id, track_chain=False)
    env = other.envelope("steps/toolCallRequest", {"tool": {"name": "read_file"}, "arguments": {}})
    raw = json.dumps(env).encode()
    before = rt.acs.handle(raw)
    assert before["error"]["code"] == -32003
    assert "acs-crypto" in owner.hello(profiles=("acs-crypto",))["result"]["profiles_accepted"]
    assert rt.acs.handle(raw) == before


def test_hello_rules_for_the_profile(runtime: Runtime) -> None:
    assert runtime.agents is not None
    private = mldsa.MLDSA65PrivateKey.generate()
    _, key_id, _ = runtime.agents.add_with_public_key(
        "pq2", "alice", ("ML-DSA-65", private.public_key())
    )
    # Signed asymmetrically without declaring acs-crypto: refused, ML-DSA-signed.
    undeclared = _client(runtime, "pq2", key_id, private, "ML-DSA-65")
    refused = undeclared.hello(profiles=("acs-core",))
    _valid(refused)
    assert refused["error"]["code"] == -32000
    assert refused["error"]["data"]["reason"] == "acs_crypto_not_declared"
    # An HMAC agent listing acs-crypto gets ACS-Core: the profile needs a public key.
    from conftest import agent_credential

    hmac_agent = AcsClient.for_agent(runtime.acs.handle, agent_credential(runtime, "plain"))
    core = hmac_agent.hello(profiles=("acs-core", "acs-crypto"))
    assert core["result"]["profiles_accepted"] == ["acs-core"]
    assert core["result"]["signature"]["algorithm"] == "HMAC-SHA256"


def test_ecdsa_p256_agent_key(runtime: Runtime) -> None:
    assert runtime.agents is not None
    private = ec.generate_private_key(ec.SECP256R1())
    _, key_id, _ = runtime.agents.add_with_public_key(
        "ec-agent", "alice", ("ECDSA-P256", private.public_key())
    )
    client = _client(runtime, "ec-agent", key_id, private, "ECDSA-P256")
    assert "acs-crypto" in client.hello(profiles=("acs-crypto",))["result"]["profiles_accepted"]
    assert client.tool_call("read_file", {"path": "/x"})["result"]["signature"]["algorithm"] == (
        "ML-DSA-65"
    )


def test_warden_verify_checks_ml_dsa_responses_with_the_published_keys(
    pq: tuple[Runtime, str, mldsa.MLDSA65PrivateKey], tmp_path: Path
) -> None:
    rt, key_id, private = pq
    client = _client(rt, "pq-agent", key_id, private, "ML-DSA-65")
    client.hello(profiles=("acs-crypto",))
    client.tool_call("read_file", {"path": "/x"})
    client.call("steps/sessionEnd", {"reason": "done"})
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(published_jwks(rt)))
    data_dir = rt.settings.data_dir
    rt.close()
    runner = CliRunner()
    # Only the published keys: no IKM (--no-signatures skips HMAC), ML-DSA still checked.
    ok = runner.invoke(
        app,
        ["verify", "--data-dir", str(data_dir), "--no-signatures", "--public-keys", str(jwks)],
    )
    assert ok.exit_code == 0, ok.output
    from warden.kla.keys import KeyRegistry
    from warden.ledger.verify import verify_records
    from warden.store import open_store

    store = open_store(rt.settings.resolved_database_url(), migrate=False)
    try:
        records = list(store.iter_records())
    finally:
        store.close()
    registry = KeyRegistry.load(jwks)
    keys = {kid: registry.get_key(kid) for kid in registry}
    assert verify_records(records, public_keys=keys).signatures_checked >= 2
    # Another key under the published kid: every ML-DSA response fails.
    mldsa_kid = _mldsa_jwk(published_jwks_doc := json.loads(jwks.read_text()))["kid"]
    assert published_jwks_doc
    keys[mldsa_kid] = mldsa.MLDSA65PrivateKey.generate().public_key()
    from warden.errors import IntegrityError

    with pytest.raises(IntegrityError, match="ML-DSA-65 signature does not verify"):
        verify_records(records, public_keys=keys)


def test_verify_takes_the_keys_as_served_envelope_and_well_known(
    pq: tuple[Runtime, str, mldsa.MLDSA65PrivateKey], tmp_path: Path
) -> None:
    """`--public-keys` takes ``GET /v1/keys`` saved whole (its ``{"data": ...}``
    envelope) and the public ``/.well-known/jwks.json`` (its AdCP keys skipped)."""
    from fastapi.testclient import TestClient

    from warden.server.app import create_app

    rt, key_id, private = pq
    client = _client(rt, "pq-agent", key_id, private, "ML-DSA-65")
    client.hello(profiles=("acs-crypto",))
    client.tool_call("read_file", {"path": "/x"})
    with TestClient(create_app(rt)) as http:
        envelope = http.get("/v1/keys", headers={"authorization": f"Bearer {rt.api_token}"})
        well_known = http.get("/.well-known/jwks.json")
    assert envelope.status_code == 200 and "data" in envelope.json()
    assert well_known.status_code == 200, well_known.text
    assert any("adcp_use" in k for k in well_known.json()["keys"])
    data_dir = rt.settings.data_dir
    rt.close()
    runner = CliRunner()
    for name, body in (("envelope.json", envelope.text), ("well-known.json", well_known.text)):
        saved = tmp_path / name
        saved.write_text(body)
        ok = runner.invoke(
            app,
            ["verify", "--data-dir", str(data_dir), "--no-signatures", "--public-keys", str(saved)],
        )
        assert ok.exit_code == 0, (name, ok.output)
    # Another ML-DSA key under the published kid, in the envelope: refused.
    doc = envelope.json()
    for jwk in doc["data"]["keys"]:
        if jwk["kty"] == "AKP":
            other = mldsa.MLDSA65PrivateKey.generate().public_key().public_bytes_raw()
            jwk["pub"] = base64.urlsafe_b64encode(other).decode().rstrip("=")
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(doc))
    bad = runner.invoke(
        app,
        ["verify", "--data-dir", str(data_dir), "--no-signatures", "--public-keys", str(forged)],
    )
    assert bad.exit_code == 1, bad.output


def test_agents_add_public_key_cli(runtime: Runtime, tmp_path: Path) -> None:
    private = mldsa.MLDSA65PrivateKey.generate()
    pem = tmp_path / "agent.pub.pem"
    pem.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    second = mldsa.MLDSA65PrivateKey.generate()
    jwk = tmp_path / "agent.jwk"
    jwk.write_text(
        json.dumps(
            {
                "kty": "AKP",
                "alg": "ML-DSA-65",
                "pub": base64.urlsafe_b64encode(second.public_key().public_bytes_raw())
                .decode()
                .rstrip("="),
            }
        )
    )
    data = ["--data-dir", str(runtime.settings.data_dir)]
    runner = CliRunner()
    added = runner.invoke(
        app,
        ["agents", "add", "cli-pq", "--owner", "alice", "--public-key", str(pem), "--json", *data],
    )
    assert added.exit_code == 0, added.output
    doc = json.loads(added.stdout)
    assert doc["algorithm"] == "ML-DSA-65" and "ikm" not in doc
    more = runner.invoke(
        app, ["agents", "add-key", "cli-pq", "--public-key", str(jwk), "--json", *data]
    )
    assert more.exit_code == 0, more.output
    assert json.loads(more.stdout)["key_id"] != doc["key_id"]
    shown = runner.invoke(app, ["agents", "show", "cli-pq", "--json", *data])
    assert shown.exit_code == 0, shown.output
    assert [k["algorithm"] for k in json.loads(shown.stdout)["keys"]] == ["ML-DSA-65"] * 2
    # One key, one registration: the same key (as PEM or as JWK) is refused for this
    # agent again and for another agent, exit 2, and nothing is written.
    again = runner.invoke(app, ["agents", "add-key", "cli-pq", "--public-key", str(jwk), *data])
    assert again.exit_code == 2 and "already registered" in again.output
    other = runner.invoke(
        app, ["agents", "add", "cli-pq2", "--owner", "bob", "--public-key", str(pem), *data]
    )
    assert other.exit_code == 2 and "already registered" in other.output
    assert runtime.agents.get("cli-pq2") is None
    assert len(runtime.agents.keys("cli-pq")) == 2
    private_file = tmp_path / "private.pem"
    private_file.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    refused = runner.invoke(
        app, ["agents", "add-key", "cli-pq", "--public-key", str(private_file), *data]
    )
    assert refused.exit_code == 2 and "private key" in refused.output
    # The registered key opens an ACS-Crypto session.
    client = _client(runtime, "cli-pq", doc["key_id"], private, "ML-DSA-65")
    assert "acs-crypto" in client.hello(profiles=("acs-crypto",))["result"]["profiles_accepted"]


def test_python_client_with_an_ml_dsa_agent_key(
    pq: tuple[Runtime, str, mldsa.MLDSA65PrivateKey], tmp_path: Path
) -> None:
    import warden
    from warden.crypto.agent_key import AgentKeyPair, load_agent_key
    from warden.errors import IntegrityError

    rt, key_id, private = pq
    jwk = _mldsa_jwk(published_jwks(rt))
    warden_key = mldsa.MLDSA65PublicKey.from_public_bytes(_unb64url(jwk["pub"]))
    path = tmp_path / "pq-agent.key"
    AgentKeyPair("pq-agent", key_id, "ML-DSA-65", private, warden_key).write(path)
    assert path.stat().st_mode & 0o077 == 0
    cred = load_agent_key(path)
    assert isinstance(cred, AgentKeyPair)
    with warden.Client.in_process(rt, credential=cred) as client:
        allowed = client.tool_call_request("read_file", {"path": "/etc/hosts"})
        assert allowed.allowed and allowed.chain_hash == client.chain_hash
        assert client.session.server_hello is not None
        assert "acs-crypto" in client.session.server_hello["profiles_accepted"]
    # A client told another Warden key refuses the (genuine) answers.
    impostor = AgentKeyPair(
        "pq-agent", key_id, "ML-DSA-65", private, mldsa.MLDSA65PrivateKey.generate().public_key()
    )
    with (
        warden.Client.in_process(rt, credential=impostor) as client,
        pytest.raises(IntegrityError),
    ):
        client.tool_call_request("read_file", {"path": "/etc/hosts"})
