"""Signed notes, checkpoints and cosignatures against other implementations' vectors:
the PeterNeumann key and note of golang.org/x/mod sumdb/note (note_test.go) and the
type-0x04 cosigner key of transparency-dev/formats (note_cosigv1_test.go)."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from warden.tlog.note import (
    COSIGNATURE_V1,
    Checkpoint,
    NoteError,
    NoteSigner,
    NoteVerifier,
    cosign,
    open_checkpoint,
    parse_checkpoint,
    parse_note,
    sign_note,
    verify_cosignature,
    verify_note,
)

GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_NOTE = (
    GO_TEXT + "\n\u2014 PeterNeumann "
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
COSIGNER_VKEY = "remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2"


def _go_signer() -> NoteSigner:
    seed = base64.b64decode(GO_SKEY.split("+", 4)[4])[1:]
    return NoteSigner("PeterNeumann", Ed25519PrivateKey.from_private_bytes(seed))


def test_go_vectors_sign_and_verify_byte_for_byte() -> None:
    signer = _go_signer()
    assert signer.vkey() == GO_VKEY
    assert sign_note(GO_TEXT, signer).render() == GO_NOTE
    note = parse_note(GO_NOTE)
    verify_note(note, NoteVerifier.from_vkey(GO_VKEY))
    with pytest.raises(NoteError, match="does not verify"):
        verify_note(
            parse_note(GO_NOTE.replace("problem,", "problem;")), NoteVerifier.from_vkey(GO_VKEY)
        )


@pytest.mark.parametrize(
    "bad",
    [
        "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+C74F20A3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3",
        "PeterNeumann+c74f20a3+!!!!",
    ],
)
def test_bad_verifier_keys_are_refused(bad: str) -> None:
    with pytest.raises(NoteError):
        NoteVerifier.from_vkey(bad)


def test_cosigner_key_id_uses_type_4() -> None:
    v = NoteVerifier.from_vkey(COSIGNER_VKEY)
    assert v.sig_type == COSIGNATURE_V1
    assert v.key_id.hex() == "da77ade7"


def test_checkpoint_round_trip_and_errors() -> None:
    root = hashlib.sha256(b"x").digest()
    cp = Checkpoint("warden.example/log", 42, root)
    assert cp.text() == f"warden.example/log\n42\n{base64.b64encode(root).decode()}\n"
    assert parse_checkpoint(cp.text()) == cp
    signer = NoteSigner("warden.example/log", Ed25519PrivateKey.generate())
    signed = sign_note(cp.text(), signer).render()
    verifier = NoteVerifier.from_vkey(signer.vkey())
    assert open_checkpoint(signed, verifier, "warden.example/log") == cp
    with pytest.raises(NoteError, match="origin"):
        open_checkpoint(signed, verifier, "other/log")
    with pytest.raises(NoteError, match="does not verify"):
        open_checkpoint(signed.replace("\n42\n", "\n43\n"), verifier)
    for text in (
        "o\n01\nAAAA\n",
        "o\n1\n",
        "o\n1\nAAAA\n",
        "\n1\n" + cp.text().split("\n")[2] + "\n",
    ):
        with pytest.raises(NoteError):
            parse_checkpoint(text)
    with pytest.raises(NoteError):
        parse_note(cp.text())  # no signatures


def test_cosignature_round_trip() -> None:
    cp = Checkpoint("warden.example/log", 7, hashlib.sha256(b"y").digest()).text()
    witness = NoteSigner("witness.example/w1", Ed25519PrivateKey.generate(), COSIGNATURE_V1)
    sig = cosign(cp, witness, 1_700_000_000)
    verifier = NoteVerifier.from_vkey(witness.vkey())
    assert verify_cosignature(cp, sig, verifier) == 1_700_000_000
    assert parse_note(cp + "\n" + sig.line()).signatures == (sig,)
    with pytest.raises(NoteError, match="does not verify"):
        verify_cosignature(cp.replace("\n7\n", "\n8\n"), sig, verifier)
