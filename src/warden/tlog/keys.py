"""The checkpoint key: a separate Ed25519 key that signs the log's checkpoints.

Kept like Warden's other signing key (:mod:`warden.crypto.ed25519_keys`): an
unencrypted PKCS#8 PEM file, ``<data-dir>/checkpoint.key`` by default (setting
``checkpoint_key_file``), generated on first start from the OS CSPRNG with mode 0600,
refused when readable by group or others. It is neither the IKM nor the KLA signing
key, so it can move to another machine (or an HSM behind a signer) without them.
"""

from __future__ import annotations

import logging
from pathlib import Path

from warden.crypto.ed25519_keys import load_or_create_signing_key, load_signing_key
from warden.tlog.note import NoteSigner

log = logging.getLogger(__name__)


def default_origin(kid: str) -> str:
    """The origin used when none is configured: stable for one key on every replica."""
    return f"warden.invalid/log/{kid}"


def load_checkpoint_signer(path: Path, origin: str | None, *, create: bool = True) -> NoteSigner:
    """The checkpoint signer named ``origin`` (or :func:`default_origin`), creating the
    key file if absent and ``create``. ConfigError for a bad or shared key file."""
    if create:
        key, kid, created = load_or_create_signing_key(path)
        if created:
            log.warning(
                "generated the transparency log's checkpoint key %s at %s (mode 0600)", kid, path
            )
    else:
        key, kid = load_signing_key(path)
    return NoteSigner(origin or default_origin(kid), key)
