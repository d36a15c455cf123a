"""A witness (issue 17): checks that a Warden log only ever grows, and cosigns it.

:func:`witness_once` fetches ``GET <url>/v1/log/checkpoint``, verifies the note with the
log's key, and compares it with the last checkpoint it cosigned (its state file):

* same size, same root: nothing new (cosigned again only if Warden lacks it);
* larger: ``GET /v1/log/consistency?from=OLD&to=NEW`` must prove the new tree extends
  the old one (RFC 9162 §2.1.4.2), else :class:`ForkDetected`;
* smaller (a rollback or a restored database), or same size with another root (a
  fork): :class:`ForkDetected`, and the state is left untouched.

Then it cosigns (C2SP tlog-cosignature v1), posts the cosigned note to
``POST <url>/v1/log/cosignatures`` and records the checkpoint in the state file
(written atomically, 0600). The state file is the witness's memory: keep it.
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from warden.tlog.merkle import verify_consistency
from warden.tlog.note import (
    Checkpoint,
    NoteError,
    NoteSigner,
    NoteVerifier,
    cosign,
    open_checkpoint,
    parse_note,
)


class ForkDetected(Exception):
    """The log rolled back or forked: the new checkpoint does not extend the last one."""


class WitnessError(Exception):
    """The log could not be read or answered nonsense (retry later; nothing cosigned)."""


@dataclass(frozen=True)
class WitnessResult:
    """One round: the checkpoint seen, the one before it, whether it was cosigned."""

    origin: str
    size: int
    root_hash: str
    previous_size: int | None
    cosigned: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "origin": self.origin,
            "size": self.size,
            "root_hash": self.root_hash,
            "previous_size": self.previous_size,
            "cosigned": self.cosigned,
        }


def load_state(path: Path) -> dict[str, Any] | None:
    """The witness's last cosigned checkpoint ``{origin, size, root_hash, note}``."""
    if not path.exists():
        return None
    try:
        state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise WitnessError(f"the state file {path} cannot be read: {exc}") from exc
    return state


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Write the state atomically (a temporary file renamed over it), mode 0600."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _get(client: httpx.Client, url: str) -> httpx.Response:
    try:
        r = client.get(url)
    except httpx.HTTPError as exc:
        raise WitnessError(f"GET {url} failed: {exc}") from exc
    if r.status_code != 200:
        raise WitnessError(f"GET {url} answered {r.status_code}: {r.text[:200]}")
    return r


def witness_once(
    client: httpx.Client,
    base_url: str,
    log_key: NoteVerifier,
    signer: NoteSigner,
    state_file: Path,
    *,
    now: int | None = None,
) -> WitnessResult:
    """One round (see the module docstring). Raises ForkDetected or WitnessError."""
    base = base_url.rstrip("/")
    note_text = _get(client, f"{base}/v1/log/checkpoint").text
    try:
        cp = open_checkpoint(note_text, log_key, log_key.name)
        text = parse_note(note_text).text
    except NoteError as exc:
        raise WitnessError(f"the checkpoint does not verify: {exc}") from exc
    state = load_state(state_file)
    previous: int | None = None
    if state is not None:
        previous = int(state["size"])
        old_root = bytes.fromhex(state["root_hash"])
        if cp.size < previous:
            raise ForkDetected(
                f"ROLLBACK: {cp.origin} now claims {cp.size} leaves, but this witness "
                f"cosigned {previous} leaves (root {state['root_hash']})"
            )
        if cp.size == previous and cp.root != old_root:
            raise ForkDetected(
                f"FORK: {cp.origin} signed two different roots for size {cp.size}: "
                f"{state['root_hash']} and {cp.root.hex()}"
            )
        if cp.size > previous:
            proof = _consistency(client, base, previous, cp.size)
            if not verify_consistency(previous, cp.size, old_root, cp.root, proof):
                raise ForkDetected(
                    f"FORK: {cp.origin} at {cp.size} leaves is not an extension of the "
                    f"{previous} leaves this witness cosigned (the consistency proof fails)"
                )
    cosigned = _cosign_and_post(client, base, note_text, text, signer, now)
    save_state(
        state_file,
        {"origin": cp.origin, "size": cp.size, "root_hash": cp.root.hex(), "note": note_text},
    )
    return WitnessResult(cp.origin, cp.size, cp.root.hex(), previous, cosigned)


def _consistency(client: httpx.Client, base: str, first: int, second: int) -> list[bytes]:
    doc = _get(client, f"{base}/v1/log/consistency?from={first}&to={second}").json()
    try:
        return [base64.b64decode(p, validate=True) for p in doc["proof"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise WitnessError(f"the consistency proof is malformed: {exc}") from exc


def _cosign_and_post(
    client: httpx.Client, base: str, served: str, text: str, signer: NoteSigner, now: int | None
) -> bool:
    sig = cosign(text, signer, int(time.time()) if now is None else now)
    # The note as served (Warden's signature, other witnesses' lines) plus this line.
    try:
        r = client.post(
            f"{base}/v1/log/cosignatures",
            content=(served + sig.line()).encode("utf-8"),
            headers={"content-type": "text/plain; charset=utf-8"},
        )
    except httpx.HTTPError as exc:
        raise WitnessError(f"posting the cosignature failed: {exc}") from exc
    if r.status_code != 200:
        raise WitnessError(f"the log refused the cosignature ({r.status_code}): {r.text[:200]}")
    return True


def checkpoint_of(state: dict[str, Any]) -> Checkpoint:
    """The checkpoint a state file records."""
    return Checkpoint(state["origin"], int(state["size"]), bytes.fromhex(state["root_hash"]))
