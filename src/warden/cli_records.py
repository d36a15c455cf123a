"""``warden verify-record`` and ``warden verify-bundle``: offline checks of KLA records.

Plain command functions (:func:`verify_record_cmd`, :func:`verify_bundle_cmd`)
that ``warden.cli`` registers; each parses its options, calls
:mod:`warden.kla.verify` and maps the outcome to an exit code. The files are
only read, never written.

Exit codes: 0 verified; 2 bad input (unreadable file, not strict JSON, bad key
file or arguments); 3 ``schema_invalid``; 4 ``record_hash_mismatch``; 5
``signature_invalid``; 6 ``unsupported_schema_version``; 7
``reference_mismatch`` (bundles only).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from warden.cli_options import EXIT_BAD_INPUT, _fail, console, err_console
from warden.errors import WardenError
from warden.kla.kinds import RecordKind

if TYPE_CHECKING:  # the verifier (cryptography, the schemas) loads when a command runs
    from warden.kla.verify import VerifyStatus


def _exit_code(status: VerifyStatus) -> int:
    from warden.kla.verify import VerifyStatus

    return {
        VerifyStatus.OK: 0,
        VerifyStatus.SCHEMA_INVALID: 3,
        VerifyStatus.RECORD_HASH_MISMATCH: 4,
        VerifyStatus.SIGNATURE_INVALID: 5,
        VerifyStatus.UNSUPPORTED_SCHEMA_VERSION: 6,
        VerifyStatus.REFERENCE_MISMATCH: 7,
    }[status]


AsJson = Annotated[bool, typer.Option("--json", help="Print the outcome as JSON on stdout.")]


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2, default=str) + "\n")


def _out(text: str) -> None:
    console.print(text, soft_wrap=True, highlight=False)


def _err(text: str) -> None:
    err_console.print(text, soft_wrap=True, highlight=False)


def verify_record_cmd(
    file: Annotated[Path, typer.Argument(help="The record (JSON) to verify; it is only read.")],
    digest: Annotated[
        str | None,
        typer.Option("--digest", help="The digest kept for the record (sha256:<64 hex>)."),
    ] = None,
    signature: Annotated[
        str | None,
        typer.Option(
            "--signature",
            help="Detached Ed25519 signature over the 32 digest bytes, base64url without padding.",
        ),
    ] = None,
    public_key: Annotated[
        Path | None,
        typer.Option(
            "--public-key",
            help="Trusted key registry: a PEM public key, a JWKS file or a directory of them.",
        ),
    ] = None,
    kid: Annotated[
        str | None,
        typer.Option("--kid", help="Key id in --public-key (needed when it holds several keys)."),
    ] = None,
    kind: Annotated[
        RecordKind | None,
        typer.Option("--kind", help="Record kind (default: from the record's id field)."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Verify one KLA record offline: strict JSON, schema_version, schema (with
    date-time formats), the recomputed sha256: digest and an optional signature."""
    from warden.kla.keys import KeyRegistry
    from warden.kla.verify import verify_record

    try:
        raw = file.read_bytes()
    except OSError as exc:
        reason = escape(exc.strerror or str(exc))
        _err(f"[red]error:[/red] {escape(str(file))} cannot be read: {reason}")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    try:
        registry = KeyRegistry.load(public_key) if public_key is not None else None
        outcome = verify_record(
            raw, expected_digest=digest, signature=signature, registry=registry, kid=kid, kind=kind
        )
    except WardenError as exc:
        raise _fail(exc) from exc
    if as_json:
        _print_json(asdict(outcome) | {"ok": outcome.ok})
    elif outcome.ok:
        what = f"{outcome.kind} {outcome.record_id}" if outcome.kind else "record"
        _out(
            f"[green]OK[/green] {escape(str(file))}: {escape(what)} "
            f"(schema_version {escape(outcome.schema_version or '?')})"
        )
        _out(f"digest {outcome.digest}")
        if outcome.signature_checked:
            _out(f"signature verified (kid {escape(outcome.kid or '-')})")
    else:
        at = f" at {outcome.pointer or '/'}" if outcome.pointer is not None else ""
        _err(f"[red]FAILED[/red] {outcome.status}{escape(at)}: {escape(outcome.message)}")
        if outcome.digest:
            _err(f"computed digest {outcome.digest}")
    raise typer.Exit(_exit_code(outcome.status))


def verify_bundle_cmd(
    directory: Annotated[
        Path,
        typer.Argument(help="Evidence bundle directory: manifest.json, records.jsonl, keys/."),
    ],
    trusted_keys: Annotated[
        Path | None,
        typer.Option(
            "--trusted-keys",
            help="Check signatures with this key registry (PEM, JWKS or directory) instead of "
            "the bundle's own keys/.",
        ),
    ] = None,
    require_signatures: Annotated[
        bool,
        typer.Option("--require-signatures", help="An unsigned record or manifest fails."),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Verify an evidence bundle offline: every record, the manifest and the
    references between request, decision, approval and audit event."""
    from warden.kla.keys import KeyRegistry
    from warden.kla.verify import verify_bundle

    try:
        registry = KeyRegistry.load(trusted_keys) if trusted_keys is not None else None
        outcome = verify_bundle(
            directory, trusted_keys=registry, require_signatures=require_signatures
        )
    except WardenError as exc:
        raise _fail(exc) from exc
    if as_json:
        _print_json(
            {
                "ok": outcome.ok,
                "status": outcome.status,
                "problems": [asdict(p) for p in outcome.problems],
                "records": [asdict(r) for r in outcome.records],
                "signatures_checked": outcome.signatures_checked,
                "manifest_signed": outcome.manifest_signed,
                "keys_trusted": outcome.keys_trusted,
                "execution_id": outcome.execution_id,
                "chain_head": outcome.chain_head,
            }
        )
    elif outcome.ok:
        _out(
            f"[green]OK[/green] {escape(str(directory))}: {len(outcome.records)} records, "
            f"{outcome.signatures_checked} signatures checked, manifest "
            + ("signed" if outcome.manifest_signed else "unsigned")
        )
        for r in outcome.records:
            _out(f"{escape(str(r.digest))} {escape(str(r.kind))} {escape(r.record_id or '')}")
        if outcome.chain_head:
            _out(f"chain head {escape(outcome.chain_head)}")
    else:
        for p in outcome.problems:
            at = f" at {p.pointer or '/'}" if p.pointer is not None else ""
            _err(f"[red]FAILED[/red] {p.status} {escape(p.where + at)}: {escape(p.message)}")
    if not outcome.keys_trusted and outcome.signatures_checked:
        _err(
            "[yellow]warning:[/yellow] signatures were checked against the bundle's own keys/; "
            "that shows the bundle is consistent, not who made it (pin keys with --trusted-keys)"
        )
    raise typer.Exit(_exit_code(outcome.status))
