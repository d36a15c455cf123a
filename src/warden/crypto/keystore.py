"""The HMAC master secret (IKM) on disk.

Generated on first start (32 random bytes from the OS CSPRNG), stored
hex-encoded with mode 0600. A key file readable by group or others is refused,
as is one shorter than 32 bytes.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from warden.crypto.hmac_keys import MIN_IKM_BYTES
from warden.errors import ConfigError


def load_ikm(path: Path) -> bytes:
    """Read an IKM file: hex text (whitespace around it ignored).

    Raises :class:`ConfigError` if it is missing, too permissive, not hex or too short.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError as exc:
        raise ConfigError(f"key file {path} does not exist") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"key file {path} is accessible by group/others (mode {oct(mode & 0o777)}); "
            "chmod 600 it"
        )
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError as exc:  # a directory, or not readable by this user
        raise ConfigError(f"key file {path} cannot be read: {exc.strerror or exc}") from exc
    try:
        ikm = bytes.fromhex(text)
    except ValueError as exc:
        raise ConfigError(
            f"key file {path} is not hex text (the IKM is stored as hex, e.g. "
            "`python -c 'import secrets; print(secrets.token_hex(32))'`)"
        ) from exc
    if len(ikm) < MIN_IKM_BYTES:
        raise ConfigError(f"key file {path} holds {len(ikm)} bytes; at least 32 are required")
    if len(set(ikm)) <= 1:
        raise ConfigError(f"key file {path} holds a degenerate key (every byte the same)")
    return ikm


def load_or_create_ikm(path: Path) -> tuple[bytes, bool]:
    """Load the IKM at ``path``, creating it (0600, 32 random bytes) if absent.

    Returns ``(ikm, created)``.
    """
    if path.exists():
        return load_ikm(path), False
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    ikm = secrets.token_bytes(MIN_IKM_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(ikm.hex() + "\n")
    return ikm, True
