"""C2SP signed notes, ``tlog-checkpoint`` bodies and ``tlog-cosignature`` lines.

* signed-note v1 (https://c2sp.org/signed-note): a UTF-8 text ending in a newline,
  a blank line, then signature lines ``— <key name> <base64(key id || signature)>``.
  Ed25519 signatures (type 0x01) cover the text including its final newline; the key
  id is ``SHA-256(name || 0x0A || 0x01 || public key)[:4]``; a verifier key (vkey)
  is ``<name>+<hex key id>+<base64(0x01 || public key)>``.
* tlog-checkpoint v1 (https://c2sp.org/tlog-checkpoint): the text is the origin line,
  the tree size in decimal and the base64 root hash, each on its own line, then
  optional extension lines.
* tlog-cosignature v1 (https://c2sp.org/tlog-cosignature): a witness's Ed25519
  signature line, key id over type 0x04, whose signature is ``u64 timestamp ||
  ed25519 signature`` over ``"cosignature/v1\\ntime <ts>\\n" || checkpoint text``.

* ML-DSA-65 (issue 21): Warden's post-quantum key signs the same checkpoint text on
  a line of its own, beside the Ed25519 line, so a verifier knowing either key accepts
  the note (signed-note verifiers skip lines of keys they do not know). Signed-note has
  no registered ML-DSA type; Warden uses type ``0xff`` (:data:`MLDSA65`): key id
  ``SHA-256(name || 0x0A || 0xff || public key)[:4]``, vkey
  ``<name>+<hex key id>+<base64(0xff || 1952-byte public key)>``, the signature the
  3309-byte FIPS 204 ML-DSA-65 signature (empty context) of the text
  (docs/decisions.md 546).

Every parse error raises :class:`NoteError` (a ``ValueError``) naming what is wrong.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA65PrivateKey, MLDSA65PublicKey

ED25519 = 0x01
COSIGNATURE_V1 = 0x04
MLDSA65 = 0xFF
_MLDSA65_PUBLIC_BYTES = 1952
_DASH = "\u2014 "
_MAX_SIGNATURES = 100
_DECIMAL = re.compile(r"^(0|[1-9][0-9]{0,19})$")


class NoteError(ValueError):
    """A signed note, checkpoint or cosignature that is malformed or does not verify."""


def b64(data: bytes) -> str:
    """Standard base64 (RFC 4648 §4) with padding."""
    return base64.b64encode(data).decode("ascii")


def unb64(text: str, what: str) -> bytes:
    """Strict standard base64 decoding; NoteError naming ``what`` otherwise."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise NoteError(f"{what} is not standard base64") from exc


def check_name(name: str) -> str:
    """A key name: non-empty, no whitespace, no '+' (signed-note §Keys)."""
    if not name or any(c.isspace() or c == "+" for c in name):
        raise NoteError(f"invalid key name {name!r}: non-empty, no spaces, no '+'")
    return name


def raw_public(key: Ed25519PublicKey) -> bytes:
    """The 32 raw bytes of an Ed25519 public key."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(name: str, sig_type: int, public: bytes) -> bytes:
    """The 4-byte key id ``SHA-256(name || 0x0A || type || public key)[:4]``."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([sig_type]) + public).digest()[:4]


@dataclass(frozen=True)
class NoteSigner:
    """An Ed25519 note signer (type 0x01, or 0x04 for a cosigner) called ``name``."""

    name: str
    private_key: Ed25519PrivateKey
    sig_type: int = ED25519

    def __post_init__(self) -> None:
        check_name(self.name)

    @property
    def public(self) -> bytes:
        return raw_public(self.private_key.public_key())

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.sig_type, self.public)

    def vkey(self) -> str:
        """The verifier key text ``<name>+<hex key id>+<base64(type || public key)>``."""
        return f"{self.name}+{self.key_id.hex()}+{b64(bytes([self.sig_type]) + self.public)}"


@dataclass(frozen=True)
class NoteVerifier:
    """A trusted Ed25519 key (type 0x01 or 0x04) by name and public key."""

    name: str
    public: bytes
    sig_type: int = ED25519

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.sig_type, self.public)

    @classmethod
    def from_vkey(cls, vkey: str) -> NoteVerifier:
        """Parse a verifier key; NoteError if malformed or its key id does not match."""
        parts = vkey.strip().split("+", 2)
        if len(parts) != 3:
            raise NoteError("a verifier key is <name>+<hex key id>+<base64 key>")
        name, hex_id, material = parts
        check_name(name)
        raw = unb64(material, "the verifier key's key material")
        mldsa_key = len(raw) == 1 + _MLDSA65_PUBLIC_BYTES and raw[0] == MLDSA65
        if not mldsa_key and (len(raw) != 33 or raw[0] not in (ED25519, COSIGNATURE_V1)):
            raise NoteError(
                "the verifier key is not an Ed25519 key (type 0x01 or 0x04) or an ML-DSA-65 "
                "key (type 0xff)"
            )
        verifier = cls(name, raw[1:], raw[0])
        if verifier.key_id.hex() != hex_id:
            raise NoteError("the verifier key's key id does not match its name and key")
        return verifier

    def _verify(self, signature: bytes, message: bytes) -> bool:
        try:
            if self.sig_type == MLDSA65:
                MLDSA65PublicKey.from_public_bytes(self.public).verify(signature, message)
            else:
                Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: key name, 4-byte key id, the signature bytes after it."""

    name: str
    key_id: bytes
    signature: bytes

    def line(self) -> str:
        return f"{_DASH}{self.name} {b64(self.key_id + self.signature)}\n"


@dataclass(frozen=True)
class Note:
    """A parsed signed note: its text (with final newline) and signature lines."""

    text: str
    signatures: tuple[NoteSignature, ...]

    def render(self) -> str:
        return self.text + "\n" + "".join(s.line() for s in self.signatures)

    def by(self, verifier: NoteVerifier) -> list[NoteSignature]:
        """The signature lines that claim ``verifier``'s name and key id."""
        return [
            s for s in self.signatures if s.name == verifier.name and s.key_id == verifier.key_id
        ]


def _check_text(text: str) -> None:
    if not text.endswith("\n") or "\n\n" in text:
        raise NoteError("a note text ends in one newline and has no blank line")
    if any(ord(c) < 0x20 and c != "\n" for c in text):
        raise NoteError("a note contains no control characters but newlines")


@dataclass(frozen=True)
class MlDsaNoteSigner:
    """An ML-DSA-65 note signer (type 0xff) called ``name`` (issue 21)."""

    name: str
    private_key: MLDSA65PrivateKey
    sig_type: int = MLDSA65

    def __post_init__(self) -> None:
        check_name(self.name)

    @property
    def public(self) -> bytes:
        return self.private_key.public_key().public_bytes_raw()

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.sig_type, self.public)

    def vkey(self) -> str:
        """The verifier key text ``<name>+<hex key id>+<base64(0xff || public key)>``."""
        return f"{self.name}+{self.key_id.hex()}+{b64(bytes([self.sig_type]) + self.public)}"


def sign_note(
    text: str, signer: NoteSigner | MlDsaNoteSigner, *more: NoteSigner | MlDsaNoteSigner
) -> Note:
    """``text`` signed by ``signer`` (type 0x01, or 0xff) and then each of ``more``, one
    signature line each, in that order."""
    _check_text(text)
    message = text.encode("utf-8")
    lines = tuple(
        NoteSignature(s.name, s.key_id, s.private_key.sign(message)) for s in (signer, *more)
    )
    return Note(text, lines)


def parse_note(data: str) -> Note:
    """Split a signed note into text and signature lines (syntax only: nothing is
    verified). NoteError if malformed."""
    _check_text_chars(data)
    at = data.rfind("\n\n")
    if at < 0:
        raise NoteError("a signed note has a blank line before its signatures")
    text, block = data[: at + 1], data[at + 2 :]
    _check_text(text)
    if not block.endswith("\n"):
        raise NoteError("a signed note ends in a newline")
    lines = block[:-1].split("\n")
    if len(lines) > _MAX_SIGNATURES:
        raise NoteError(f"a note carries at most {_MAX_SIGNATURES} signatures")
    sigs = []
    for line in lines:
        if not line.startswith(_DASH):
            raise NoteError("a signature line starts with an em dash and a space")
        name, _, encoded = line[len(_DASH) :].partition(" ")
        check_name(name)
        raw = unb64(encoded, "a signature")
        if len(raw) < 5:
            raise NoteError("a signature is a 4-byte key id and at least one byte")
        sigs.append(NoteSignature(name, raw[:4], raw[4:]))
    return Note(text, tuple(sigs))


def _check_text_chars(data: str) -> None:
    if any(ord(c) < 0x20 and c != "\n" for c in data):
        raise NoteError("a note contains no control characters but newlines")


def verify_note(note: Note, verifier: NoteVerifier) -> None:
    """NoteError unless ``note`` carries a valid Ed25519 (0x01) or ML-DSA-65 (0xff)
    signature by ``verifier``
    (a line with its name and key id that does not verify is an error, not skipped)."""
    mine = note.by(verifier)
    if not mine:
        raise NoteError(f"the note is not signed by {verifier.name}")
    for sig in mine:
        if not verifier._verify(sig.signature, note.text.encode("utf-8")):  # noqa: SLF001
            raise NoteError(f"the signature of {verifier.name} does not verify")


# -- checkpoints ----------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """A tlog-checkpoint body: origin, tree size and 32-byte root hash."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [self.origin, str(self.size), b64(self.root), *self.extensions]
        return "\n".join(lines) + "\n"


def parse_checkpoint(text: str) -> Checkpoint:
    """The checkpoint in a note text; NoteError if malformed."""
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise NoteError("a checkpoint has an origin, a size and a root hash line")
    origin, size, root = lines[0], lines[1], lines[2]
    if not origin:
        raise NoteError("the checkpoint's origin line is empty")
    if not _DECIMAL.match(size) or int(size) >= 1 << 63:
        raise NoteError("the checkpoint's size is not a decimal number without leading zeros")
    raw = unb64(root, "the checkpoint's root hash")
    if len(raw) != 32:
        raise NoteError("the checkpoint's root hash is not 32 bytes")
    return Checkpoint(origin, int(size), raw, tuple(lines[3:-1]))


def open_checkpoint(data: str, verifier: NoteVerifier, origin: str | None = None) -> Checkpoint:
    """Parse and verify a signed checkpoint (and its origin, if given); NoteError otherwise."""
    note = parse_note(data)
    verify_note(note, verifier)
    checkpoint = parse_checkpoint(note.text)
    if origin is not None and checkpoint.origin != origin:
        raise NoteError(f"the checkpoint's origin is {checkpoint.origin!r}, not {origin!r}")
    return checkpoint


# -- cosignatures ---------------------------------------------------------------------


def cosigned_message(text: str, timestamp: int) -> bytes:
    """What a tlog-cosignature/v1 Ed25519 signature covers."""
    return f"cosignature/v1\ntime {timestamp}\n{text}".encode()


def cosign(text: str, signer: NoteSigner, timestamp: int) -> NoteSignature:
    """A cosignature line by ``signer`` (type 0x04) over checkpoint ``text``."""
    if signer.sig_type != COSIGNATURE_V1:
        raise NoteError("a cosigner's key has signature type 0x04")
    if not 0 <= timestamp < 1 << 63:
        raise NoteError("a cosignature timestamp is between 0 and 2**63 - 1")
    _check_text(text)
    sig = signer.private_key.sign(cosigned_message(text, timestamp))
    return NoteSignature(signer.name, signer.key_id, struct.pack(">Q", timestamp) + sig)


def verify_cosignature(text: str, sig: NoteSignature, verifier: NoteVerifier) -> int:
    """The timestamp of a valid cosignature by ``verifier`` over ``text``; NoteError else."""
    if verifier.sig_type != COSIGNATURE_V1:
        raise NoteError("a cosigner's verifier key has signature type 0x04")
    if sig.name != verifier.name or sig.key_id != verifier.key_id:
        raise NoteError(f"the cosignature is not by {verifier.name}")
    if len(sig.signature) != 8 + 64:
        raise NoteError("a cosignature is an 8-byte timestamp and a 64-byte signature")
    (timestamp,) = struct.unpack(">Q", sig.signature[:8])
    if (
        timestamp >= 1 << 63
        or not verifier._verify(  # noqa: SLF001
            sig.signature[8:], cosigned_message(text, timestamp)
        )
    ):
        raise NoteError(f"the cosignature of {verifier.name} does not verify")
    return int(timestamp)


def load_witness_keys(text: str) -> list[NoteVerifier]:
    """Witness verifier keys, one per line (blank lines and ``#`` comments skipped);
    NoteError naming the line of one that is not a type-0x04 Ed25519 vkey."""
    keys = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            key = NoteVerifier.from_vkey(line)
        except NoteError as exc:
            raise NoteError(f"line {number}: {exc}") from exc
        if key.sig_type != COSIGNATURE_V1:
            raise NoteError(f"line {number}: a witness key has signature type 0x04")
        keys.append(key)
    return keys
