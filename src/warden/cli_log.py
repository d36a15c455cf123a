"""``warden log`` (key, prove, check) and ``warden witness``: the transparency log offline.

* ``warden log key``: the checkpoint verifier key (C2SP vkey) of this data directory.
* ``warden log prove --index I --size N`` / ``--from M --to N``: an inclusion or
  consistency proof computed from the database (the document ``GET /v1/log/inclusion``
  and ``/v1/log/consistency`` serve); always JSON.
* ``warden log check PROOF --checkpoint NOTE [--old-checkpoint NOTE] --log-key VKEY``:
  checks a proof document against signed checkpoints; ``--leaf FILE`` also checks that
  the proven leaf hash is that file's bytes.
* ``warden witness --url URL --log-key VKEY --key FILE --name NAME --state FILE``:
  fetches each new checkpoint, checks it extends the last one, cosigns it and posts the
  cosignature back (:mod:`warden.tlog.witness`); ``--once`` for one round.

Exit codes: 0 fine; 1 a proof or a checkpoint's signature fails (``log check --json``
prints ``ok: false`` and a ``reason``), or (witness) a fork or rollback; 2 bad input,
each message naming the file or option and the field at fault (decisions 631–632).
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from warden.cli_options import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE_FOUND,
    HELP_SETTINGS,
    DataDir,
    DbUrl,
    console,
    err_console,
    existing_database_url,
)
from warden.cli_output import print_json, print_line
from warden.errors import ConfigError, WardenError

log_app = typer.Typer(
    **HELP_SETTINGS,
    help="The transparency log: its key, proofs, and checking them offline.",
    add_completion=False,
)

AsJson = Annotated[
    bool, typer.Option("--json", help="Print one JSON document (docs/cli-json.md) on stdout.")
]
LogKey = Annotated[
    str,
    typer.Option(
        "--log-key",
        help="The log's checkpoint verifier key (C2SP vkey text, or a file holding it).",
    ),
]


def _bad(message: str) -> typer.Exit:
    print_line(err_console, f"[red]error:[/red] {escape(message)}")
    return typer.Exit(EXIT_BAD_INPUT)


def read_log_key(value: str) -> Any:
    """A NoteVerifier from vkey text or a file holding it; ConfigError otherwise."""
    from warden.tlog.note import NoteError, NoteVerifier

    text = value
    path = Path(value)
    if "+" not in value or path.is_file():
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"--log-key {value}: not a vkey, and not a readable file") from exc
    try:
        return NoteVerifier.from_vkey(text)
    except NoteError as exc:
        raise ConfigError(f"--log-key: {exc}") from exc


def b64(raw: bytes) -> str:
    """Standard base64 text."""
    return base64.b64encode(raw).decode("ascii")


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc}") from exc


@log_app.command("key")
def key_cmd(
    data_dir: DataDir = Path(".warden"),
    key_file: Annotated[
        Path | None, typer.Option(help="The checkpoint key (default <data-dir>/checkpoint.key).")
    ] = None,
    origin: Annotated[
        str | None, typer.Option(envvar="WARDEN_LOG_ORIGIN", help="The log's origin.")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Print the checkpoint verifier key: give it to witnesses and auditors."""
    from warden.tlog.keys import load_checkpoint_signer

    try:
        signer = load_checkpoint_signer(
            key_file or data_dir / "checkpoint.key", origin, create=False
        )
    except WardenError as exc:
        raise _bad(exc.message) from exc
    if as_json:
        print_json({"origin": signer.name, "vkey": signer.vkey()})
        return
    console.print(signer.vkey(), soft_wrap=True, highlight=False)


@log_app.command("prove")
def prove_cmd(
    index: Annotated[int | None, typer.Option(min=0, help="Inclusion: the leaf index.")] = None,
    size: Annotated[int | None, typer.Option(min=1, help="Inclusion: the tree size.")] = None,
    first: Annotated[
        int | None, typer.Option("--from", min=0, help="Consistency: the older size.")
    ] = None,
    second: Annotated[
        int | None, typer.Option("--to", min=0, help="Consistency: the newer size.")
    ] = None,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
) -> None:
    """Compute an inclusion (--index, --size) or consistency (--from, --to) proof from the
    database; prints the proof document (JSON). Options out of range are refused naming
    them and the log's size (exit 2)."""
    from warden.store import open_store
    from warden.store.tlog_sql import iter_leaves
    from warden.tlog.merkle import MerkleTree, ProofError, leaf_hash

    inclusion = index is not None or size is not None
    consistency = first is not None or second is not None
    if inclusion == consistency:
        raise _bad("give --index and --size (inclusion), or --from and --to (consistency)")
    if inclusion and (index is None or size is None):
        raise _bad("an inclusion proof needs both --index and --size")
    if consistency and (first is None or second is None):
        raise _bad("a consistency proof needs both --from and --to")
    try:
        store = open_store(existing_database_url(data_dir, database_url), migrate=False)
    except WardenError as exc:
        raise _bad(exc.message) from exc
    try:
        tree = MerkleTree(leaf_hash(bytes(t)) for _, t in iter_leaves(store.engine))
    finally:
        store.close()
    where = f"--index {index} --size {size}" if inclusion else f"--from {first} --to {second}"
    try:
        if index is not None and size is not None:
            doc: dict[str, Any] = {
                "index": index,
                "size": size,
                "leaf_hash": b64(tree.leaf(index)),
                "root_hash": b64(tree.root(size)),
                "proof": [b64(p) for p in tree.inclusion_proof(index, size)],
            }
        else:
            assert first is not None and second is not None
            doc = {
                "from": first,
                "to": second,
                "from_root": b64(tree.root(first)),
                "to_root": b64(tree.root(second)),
                "proof": [b64(p) for p in tree.consistency_proof(first, second)],
            }
    except ProofError as exc:
        raise _bad(f"{where}: {exc}") from exc
    print_json(doc)


class _Finding(Exception):
    """A proof or checkpoint that does not verify: reported as ``ok: false`` (exit 1)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


#: The fields of each proof document: (integer fields, hash fields).
_PROOF_FIELDS = {
    "inclusion": (("index", "size"), ("leaf_hash", "root_hash")),
    "consistency": (("from", "to"), ("from_root", "to_root")),
}


def _hash(value: Any, where: str) -> bytes:
    """A base64 SHA-256 hash; ConfigError naming ``where`` otherwise."""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: a base64 string, got {json.dumps(value)[:40]}")
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError as exc:
        raise ConfigError(f"{where}: not standard base64 ({value[:40]!r})") from exc
    if len(raw) != 32:
        raise ConfigError(f"{where}: a SHA-256 hash is 32 bytes, this is {len(raw)}")
    return raw


def _proof_document(path: Path) -> tuple[str, dict[str, int], dict[str, bytes], list[bytes]]:
    """The proof document in ``path``: its kind, integer fields, hash fields and path.
    ConfigError naming the file and the field for anything malformed."""
    text = _read_text(path, "the proof")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"the proof {path}: not JSON ({exc})") from exc
    if not isinstance(doc, dict) or ("index" in doc) == ("from" in doc):
        raise ConfigError(
            f"the proof {path}: a proof document is an object, {{index, size, leaf_hash, "
            "root_hash, proof}} (inclusion) or {from, to, from_root, to_root, proof} "
            "(consistency), as warden log prove and /v1/log print it"
        )
    kind = "inclusion" if "index" in doc else "consistency"
    ints, hashes = _PROOF_FIELDS[kind]
    numbers: dict[str, int] = {}
    for name in ints:
        value = doc.get(name)
        if name not in doc:
            raise ConfigError(f"the proof {path}: {name}: missing (an {kind} proof needs it)")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(
                f"the proof {path}: {name}: a non-negative integer, got {json.dumps(value)[:40]}"
            )
        numbers[name] = value
    hashed: dict[str, bytes] = {}
    for name in hashes:
        if name in doc:  # root hashes are informative: the checkpoints give the roots
            hashed[name] = _hash(doc[name], f"the proof {path}: {name}")
    if kind == "inclusion" and "leaf_hash" not in hashed:
        raise ConfigError(f"the proof {path}: leaf_hash: missing (an inclusion proof needs it)")
    steps = doc.get("proof")
    if not isinstance(steps, list):
        raise ConfigError(
            f"the proof {path}: proof: a list of base64 hashes, got "
            + ("nothing" if "proof" not in doc else json.dumps(steps)[:40])
        )
    return (
        kind,
        numbers,
        hashed,
        [_hash(p, f"the proof {path}: proof[{i}]") for i, p in enumerate(steps)],
    )


def _checkpoint(path: Path, option: str, verifier: Any) -> Any:
    """The checkpoint signed in ``path``. ConfigError (bad input) when unreadable,
    malformed, or carrying no signature line of the key (the wrong --log-key, or another
    log's checkpoint); :class:`_Finding` when the key's signature does not verify."""
    from warden.tlog.note import NoteError, parse_checkpoint, parse_note, verify_note

    text = _read_text(path, f"the {option}")
    try:
        note = parse_note(text)
    except NoteError as exc:
        raise ConfigError(f"{option} {path}: not a signed note: {exc}") from exc
    if not note.by(verifier):
        raise ConfigError(
            f"{option} {path}: not signed by {verifier.name} (key id "
            f"{verifier.key_id.hex()}): the wrong --log-key, or another log's checkpoint"
        )
    try:
        verify_note(note, verifier)
    except NoteError as exc:
        raise _Finding(
            "checkpoint_signature", f"{option} {path}: {exc} (the checkpoint was altered)"
        ) from exc
    try:
        return parse_checkpoint(note.text)
    except NoteError as exc:
        raise ConfigError(f"{option} {path}: not a checkpoint: {exc}") from exc


@log_app.command("check")
def check_cmd(
    proof: Annotated[Path, typer.Argument(help="A proof document (warden log prove, /v1/log).")],
    checkpoint: Annotated[
        Path, typer.Option(help="The signed checkpoint the proof leads to (its size).")
    ],
    log_key: LogKey,
    old_checkpoint: Annotated[
        Path | None, typer.Option(help="Consistency: the older signed checkpoint.")
    ] = None,
    leaf: Annotated[
        Path | None, typer.Option(help="Inclusion: the leaf's bytes (an entry's stored JSON).")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Check a proof against signed checkpoints, offline.

    Exit 0 the proof verifies; 1 it does not, or a checkpoint's signature does not
    verify (with --json: ``ok`` false and a ``reason``); 2 unusable input (an unreadable
    or malformed file, named with the field at fault; a checkpoint not signed by the
    key at all; a missing option), nothing on stdout.
    """
    from warden.tlog.merkle import leaf_hash, verify_consistency, verify_inclusion

    result: dict[str, Any] = {"ok": False, "kind": "", "size": None}
    try:
        verifier = read_log_key(log_key)
        kind, numbers, hashed, path = _proof_document(proof)
        result["kind"] = kind
        if kind == "consistency" and old_checkpoint is None:
            raise ConfigError("a consistency proof needs --old-checkpoint")
        if kind == "inclusion" and old_checkpoint is not None:
            raise ConfigError("--old-checkpoint is for a consistency proof; this is inclusion")
        if kind == "consistency" and leaf is not None:
            raise ConfigError("--leaf is for an inclusion proof; this is consistency")
        leaf_bytes = None
        if leaf is not None:
            try:
                leaf_bytes = leaf.read_bytes()
            except OSError as exc:
                raise ConfigError(f"cannot read the --leaf {leaf}: {exc.strerror or exc}") from exc
        new = _checkpoint(checkpoint, "--checkpoint", verifier)
        result["size"] = new.size
        old = (
            _checkpoint(old_checkpoint, "--old-checkpoint", verifier)
            if old_checkpoint is not None
            else None
        )
        if kind == "inclusion":
            if leaf_bytes is not None and leaf_hash(leaf_bytes) != hashed["leaf_hash"]:
                raise _Finding(
                    "leaf_mismatch", f"the --leaf {leaf} does not hash to the proof's leaf_hash"
                )
            if numbers["size"] != new.size:
                raise _Finding(
                    "size_mismatch",
                    f"the proof is for size {numbers['size']}, the checkpoint is size {new.size}",
                )
            result["index"] = numbers["index"]
            ok = verify_inclusion(numbers["index"], new.size, hashed["leaf_hash"], path, new.root)
        else:
            assert old is not None
            if (numbers["from"], numbers["to"]) != (old.size, new.size):
                raise _Finding(
                    "size_mismatch",
                    f"the proof is from size {numbers['from']} to {numbers['to']}, the "
                    f"checkpoints are sizes {old.size} and {new.size}",
                )
            result["from"] = old.size
            ok = verify_consistency(old.size, new.size, old.root, new.root, path)
        if not ok:
            raise _Finding("proof_invalid", f"the {kind} proof does not verify")
        result["ok"] = True
    except _Finding as finding:
        result.update(reason=finding.reason, message=finding.message)
    except WardenError as exc:
        raise _bad(exc.message) from exc
    if as_json:
        print_json(result)
    elif result["ok"]:
        print_line(
            console, f"[green]OK[/green] {result['kind']} proof verifies ({result['size']} leaves)"
        )
    else:
        print_line(err_console, f"[red]FAILED[/red] {escape(result['message'])}")
    if not result["ok"]:
        raise typer.Exit(EXIT_FAILURE_FOUND)


def witness_cmd(
    url: Annotated[str, typer.Option(help="The Warden to witness, e.g. https://warden.example.")],
    log_key: LogKey,
    key: Annotated[
        Path, typer.Option(help="This witness's Ed25519 key (PKCS#8 PEM; created if absent).")
    ],
    name: Annotated[
        str, typer.Option(help="This witness's name (a schema-less URL, e.g. witness.example/w1).")
    ],
    state: Annotated[
        Path, typer.Option(help="The state file: the last checkpoint this witness cosigned.")
    ],
    once: Annotated[bool, typer.Option(help="One round, then exit.")] = False,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between rounds.")] = 10.0,
    as_json: AsJson = False,
) -> None:
    """Witness a Warden log: verify each new checkpoint extends the last one, cosign it
    (C2SP tlog-cosignature) and post the cosignature back. Refuses and exits 1 on a fork
    or rollback."""
    import httpx

    from warden.crypto.ed25519_keys import load_or_create_signing_key
    from warden.tlog.note import COSIGNATURE_V1, NoteError, NoteSigner
    from warden.tlog.witness import ForkDetected, WitnessError, witness_once

    try:
        httpx.URL(url)
    except (httpx.InvalidURL, UnicodeError) as exc:
        raise _bad(f"--url is not a URL: {url!r}: {exc}") from exc
    try:
        verifier = read_log_key(log_key)
        private, _, created = load_or_create_signing_key(key)
        signer = NoteSigner(name, private, COSIGNATURE_V1)
    except (WardenError, NoteError) as exc:
        raise _bad(getattr(exc, "message", None) or str(exc)) from exc
    if created:
        print_line(err_console, f"generated the witness key {escape(str(key))} (mode 0600)")
    print_line(err_console, f"witness key: {escape(signer.vkey())}")
    with httpx.Client(timeout=10.0) as client:
        while True:
            try:
                result = witness_once(client, url, verifier, signer, state)
            except ForkDetected as exc:
                if as_json:
                    print_json({"ok": False, "alarm": str(exc)})
                print_line(err_console, f"[bold red]ALARM[/bold red] {escape(str(exc))}")
                raise typer.Exit(EXIT_FAILURE_FOUND) from exc
            except WitnessError as exc:
                if once:
                    raise _bad(str(exc)) from exc
                print_line(err_console, f"[yellow]retrying[/yellow] {escape(str(exc))}")
            else:
                if as_json:
                    print_json(result.as_dict())
                else:
                    print_line(
                        console,
                        f"[green]OK[/green] {escape(result.origin)} at {result.size} leaves "
                        f"(previously {result.previous_size}); cosigned: {result.cosigned}",
                    )
            if once:
                return
            time.sleep(interval)
