"""Checkpoints and KLA records signed with ML-DSA-65 beside Ed25519 (issue 21 items 2
and 4): the setting ``evidence_signing_keys`` chooses the keys; a verifier that knows
either key accepts; ``warden verify`` and ``warden verify-record`` check the ML-DSA
signatures offline with only the published keys; a verifier sharing no code with the
signing path (``cryptography`` and ``base64`` only) checks a sample of each."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import mldsa
from typer.testing import CliRunner

from warden.cli import app
from warden.kla.records import RecordKind
from warden.runtime import Runtime
from warden.tlog.note import NoteVerifier, open_checkpoint, parse_note

EXAMPLE = Path(__file__).resolve().parents[2] / "src/warden/schemas/kla/examples/basic-read.json"


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _akp(rt: Runtime) -> dict[str, Any]:
    assert rt.kla is not None
    (jwk,) = [k for k in rt.kla.signer.jwks()["keys"] if k["kty"] == "AKP"]
    return jwk


def independent_note_check(note: str, jwk: dict[str, Any]) -> int:
    """How many signature lines of ``note`` verify as ML-DSA-65 under the AKP ``jwk``."""
    public = mldsa.MLDSA65PublicKey.from_public_bytes(_unb64url(jwk["pub"]))
    text, _, block = note.partition("\n\n")
    good = 0
    for line in block.splitlines():
        raw = base64.b64decode(line.split(" ")[2])
        try:
            public.verify(raw[4:], (text + "\n").encode())
        except InvalidSignature:
            continue
        good += 1
    return good


@pytest.fixture
def both(make_runtime: Any) -> Runtime:
    rt: Runtime = make_runtime(evidence_signing_keys=("ed25519", "ml-dsa-65"))
    return rt


def test_checkpoint_carries_both_signatures_and_either_key_accepts(both: Runtime) -> None:
    assert both.tlog is not None
    cp = both.tlog.checkpoint()
    note = parse_note(cp.note)
    assert len(note.signatures) == 2
    ed = NoteVerifier.from_vkey(both.tlog.signer.vkey())
    assert both.tlog.pq_signer is not None
    pq = NoteVerifier.from_vkey(both.tlog.pq_signer.vkey())
    assert open_checkpoint(cp.note, ed).size == cp.tree_size
    assert open_checkpoint(cp.note, pq).size == cp.tree_size
    # Independently: the ML-DSA line verifies under the published AKP key.
    assert independent_note_check(cp.note, _akp(both)) == 1
    # The ML-DSA line does not verify under another ML-DSA key.
    (line,) = note.by(pq)
    other = mldsa.MLDSA65PrivateKey.generate().public_key().public_bytes_raw()
    forged = NoteVerifier(pq.name, other, pq.sig_type)
    assert pq._verify(line.signature, note.text.encode())  # noqa: SLF001
    assert not forged._verify(line.signature, note.text.encode())  # noqa: SLF001
    from warden.tlog.note import NoteError

    # Tampering the text breaks both signatures.
    tampered = cp.note.replace(f"\n{cp.tree_size}\n", f"\n{cp.tree_size + 1}\n", 1)
    for verifier in (ed, pq):
        with pytest.raises(NoteError):
            open_checkpoint(tampered, verifier)


def test_default_signs_checkpoints_with_ed25519_only(runtime: Runtime) -> None:
    assert runtime.tlog is not None and runtime.tlog.pq_signer is None
    assert len(parse_note(runtime.tlog.checkpoint().note).signatures) == 1


def test_ml_dsa_only_checkpoints(make_runtime: Any) -> None:
    rt: Runtime = make_runtime(evidence_signing_keys=("ml-dsa-65",))
    assert rt.tlog is not None
    note = rt.tlog.checkpoint().note
    assert len(parse_note(note).signatures) == 1
    assert independent_note_check(note, _akp(rt)) == 1


def test_warden_verify_checks_the_ml_dsa_checkpoint_line(both: Runtime) -> None:
    assert both.tlog is not None and both.tlog.pq_signer is not None
    both.tlog.checkpoint()
    vkey = both.tlog.pq_signer.vkey()
    data_dir = both.settings.data_dir
    both.close()
    runner = CliRunner()
    ok = runner.invoke(app, ["verify", "--data-dir", str(data_dir), "--log-key", vkey, "--json"])
    assert ok.exit_code == 0, ok.output
    # A wrong ML-DSA vkey under the same name fails the log check.
    other = mldsa.MLDSA65PrivateKey.generate().public_key().public_bytes_raw()
    wrong = NoteVerifier(vkey.split("+")[0], other, 0xFF)
    bad_vkey = (
        f"{wrong.name}+{wrong.key_id.hex()}+{base64.b64encode(bytes([0xFF]) + other).decode()}"
    )
    failed = runner.invoke(
        app, ["verify", "--data-dir", str(data_dir), "--log-key", bad_vkey, "--json"]
    )
    assert failed.exit_code != 0, failed.output


def test_records_are_signed_by_both_and_verify_record_checks_ml_dsa(
    both: Runtime, tmp_path: Path
) -> None:
    assert both.kla is not None
    record = json.loads(EXAMPLE.read_text())
    sealed = both.kla._rec.seal(RecordKind.ACTION_REQUEST, record)  # noqa: SLF001
    assert sealed.signature is not None and len(sealed.signatures) == 1
    pq_sig = sealed.signatures[0]
    assert pq_sig["alg"] == "ML-DSA-65" and pq_sig["kid"] == _akp(both)["kid"]
    # Independent: ML-DSA-65 over the 32 digest bytes, from the JWK alone.
    public = mldsa.MLDSA65PublicKey.from_public_bytes(_unb64url(_akp(both)["pub"]))
    digest = bytes.fromhex(sealed.digest.removeprefix("sha256:"))
    assert (
        digest
        == hashlib.sha256(
            json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        ).digest()
    )
    public.verify(_unb64url(pq_sig["signature"]), digest)
    # The line validates against the bundle-line schema.
    from warden.kla.records import BUNDLE_LINE_SCHEMA, kla_schemas

    assert kla_schemas().first_error(BUNDLE_LINE_SCHEMA, sealed.to_line()) is None
    # warden verify-record with only the published JWKS: the ML-DSA kid verifies.
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(both.kla.signer.jwks()))
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record))
    runner = CliRunner()
    args = ["verify-record", str(path), "--digest", sealed.digest, "--public-key", str(jwks)]
    ok = runner.invoke(
        app, [*args, "--signature", pq_sig["signature"], "--kid", pq_sig["kid"], "--json"]
    )
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["signature_checked"] is True
    flipped = bytearray(_unb64url(pq_sig["signature"]))
    flipped[7] ^= 0x80
    bad = base64.urlsafe_b64encode(bytes(flipped)).decode().rstrip("=")
    refused = runner.invoke(app, [*args, "--signature", bad, "--kid", pq_sig["kid"]])
    assert refused.exit_code == 5, refused.output


def test_bundle_verifies_with_either_key(both: Runtime, tmp_path: Path) -> None:
    from warden.kla.keys import KeyRegistry
    from warden.kla.records import write_bundle
    from warden.kla.verify import verify_bundle

    assert both.kla is not None
    signer = both.kla.signer
    assert signer.mldsa is not None
    sealed = both.kla._rec.seal(  # noqa: SLF001
        RecordKind.ACTION_REQUEST, json.loads(EXAMPLE.read_text())
    )
    bundle = write_bundle(
        tmp_path / "b",
        [sealed],
        public_keys={signer.kid: signer.public_key, signer.mldsa.kid: signer.mldsa.public_key},
        manifest_signer=(signer.kid, signer.key),
    )
    ed_only = KeyRegistry({signer.kid: signer.public_key})
    pq_and_ed = KeyRegistry(
        {signer.kid: signer.public_key, signer.mldsa.kid: signer.mldsa.public_key}
    )
    for registry, checked in ((ed_only, 2), (pq_and_ed, 3)):
        outcome = verify_bundle(bundle, trusted_keys=registry, require_signatures=True)
        assert outcome.ok, outcome.problems
        assert outcome.signatures_checked == checked
    # A corrupted ML-DSA signature fails for a verifier that knows the ML-DSA key.
    lines = (bundle / "records.jsonl").read_text().splitlines()
    line = json.loads(lines[0])
    sig = line["signatures"][0]["signature"]
    line["signatures"][0]["signature"] = ("B" if sig[0] == "A" else "A") + sig[1:]
    (bundle / "records.jsonl").write_text(json.dumps(line) + "\n")
    outcome = verify_bundle(bundle, trusted_keys=pq_and_ed)
    assert not outcome.ok
    assert "ML-DSA-65 signature does not verify" in outcome.problems[0].message


def test_ml_dsa_only_records(make_runtime: Any, tmp_path: Path) -> None:
    from warden.kla.keys import KeyRegistry
    from warden.kla.records import write_bundle
    from warden.kla.verify import verify_bundle

    rt: Runtime = make_runtime(evidence_signing_keys=("ml-dsa-65",))
    assert rt.kla is not None
    signer = rt.kla.signer
    assert signer.mldsa is not None
    sealed = rt.kla._rec.seal(  # noqa: SLF001
        RecordKind.ACTION_REQUEST, json.loads(EXAMPLE.read_text())
    )
    assert sealed.signature is None and sealed.kid is None
    assert [s["alg"] for s in sealed.signatures] == ["ML-DSA-65"]
    bundle = write_bundle(
        tmp_path / "b",
        [sealed],
        public_keys={signer.mldsa.kid: signer.mldsa.public_key},
        manifest_signer=(signer.kid, signer.key),
    )
    pq_only = KeyRegistry(
        {signer.mldsa.kid: signer.mldsa.public_key, signer.kid: signer.public_key}
    )
    outcome = verify_bundle(bundle, trusted_keys=pq_only, require_signatures=True)
    assert outcome.ok, outcome.problems
    # A verifier knowing only the Ed25519 key cannot check the record: refused.
    ed_only = KeyRegistry({signer.kid: signer.public_key})
    assert not verify_bundle(bundle, trusted_keys=ed_only).ok
