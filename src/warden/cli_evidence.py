"""``warden export-evidence``: one execution's evidence bundle, written from the database.

Offline (no server needed): reads the execution's processed KLA records, the head of
its Warden audit chain and Warden's signing key (to sign the manifest and publish the
public key in ``keys/``), and writes the bundle directory ``warden verify-bundle``
checks. Records held for review (an unsupported schema_version) are left out.

An execution is the pair (principal, execution_id) (decision 930): when several
principals used the execution_id, ``--principal`` names whose execution to export.

Exit codes: 0 written; 1 no processed record for the execution; 2 bad input or
configuration (no database, no signing key, a bundle already in the directory, an
execution_id of several principals without ``--principal``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from warden.cli_options import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE_FOUND,
    DataDir,
    DbUrl,
    _fail,
    console,
    err_console,
    existing_database_url,
)
from warden.cli_output import print_json, print_line
from warden.errors import IntegrityError, WardenError

AsJson = Annotated[
    bool, typer.Option("--json", help="Print one JSON document (docs/cli-json.md) on stdout.")
]


def export_evidence_cmd(
    execution_id: Annotated[str, typer.Argument(help="The execution_id of the action requests.")],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="The bundle directory to write (must hold no bundle)."),
    ],
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    signing_key_file: Annotated[
        Path | None,
        typer.Option(
            "--signing-key-file",
            envvar="WARDEN_SIGNING_KEY_FILE",
            help="Warden's Ed25519 signing key (default: <data-dir>/signing.key).",
        ),
    ] = None,
    kla_keys: Annotated[
        Path | None,
        typer.Option(
            "--kla-keys",
            envvar="WARDEN_KLA_KEYS",
            help="The registry signed action requests were checked against (JWKS, PEM or a "
            "directory): their public keys are written into keys/ too.",
        ),
    ] = None,
    principal: Annotated[
        str | None,
        typer.Option(
            "--principal",
            help="Whose execution, when several principals used the execution_id (each "
            "one's records are a separate execution).",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Write the evidence bundle of one execution (records.jsonl, a signed manifest.json
    with the audit chain head, keys/jwks.json) from the database, offline."""
    from warden.crypto.ed25519_keys import load_signing_key
    from warden.kla.evidence import SeveralOwners, Signer, execution_evidence, now_stamp
    from warden.kla.keys import KeyRegistry
    from warden.store import open_store

    if not execution_id.strip():
        # No execution has a blank id: "no processed action request in execution " misled.
        print_line(err_console, f"[red]error:[/red] the execution_id is empty ({execution_id!r})")
        raise typer.Exit(EXIT_BAD_INPUT)
    try:
        key, kid = load_signing_key(signing_key_file or data_dir / "signing.key")
        registry = KeyRegistry.load(kla_keys) if kla_keys is not None else None
        store = open_store(existing_database_url(data_dir, database_url), migrate=False)
    except WardenError as exc:
        raise _fail(exc) from exc
    signer = Signer(key, kid)
    try:
        evidence = execution_evidence(store, execution_id, signer, registry, principal)
        if evidence is None:
            err_console.print(
                f"[red]error:[/red] no processed action request in execution "
                f"{escape(execution_id)}",
                soft_wrap=True,
            )
            raise typer.Exit(EXIT_FAILURE_FOUND)
        evidence.write(out, signer, now_stamp())
    except OSError as exc:  # --out not a directory it can create or write, a full disk
        print_line(
            err_console,
            f"[red]error:[/red] cannot write {escape(str(out))}: {escape(str(exc.strerror))}",
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    except SeveralOwners as exc:
        err_console.print(f"[red]error:[/red] {escape(exc.message)} with --principal")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    except IntegrityError as exc:  # the records table and the chain disagree: tampering
        raise _fail(exc, EXIT_FAILURE_FOUND) from exc
    except WardenError as exc:
        raise _fail(exc) from exc
    finally:
        store.close()
    if as_json:
        print_json(
            {
                "out": str(out),
                "execution_id": execution_id,
                "records": len(evidence.sealed),
                "chain_head": evidence.chain_head,
                "kid": kid,
                "held_for_review": list(evidence.held_for_review),
            }
        )
        return
    console.print(
        f"[green]wrote[/green] {escape(str(out))}: {len(evidence.sealed)} records, chain head "
        f"{escape(evidence.chain_head or '-')}, manifest signed by {escape(kid)}",
        soft_wrap=True,
        highlight=False,
    )
    if evidence.held_for_review:
        console.print(
            f"left out {len(evidence.held_for_review)} record(s) held for review: "
            + escape(", ".join(evidence.held_for_review)),
            soft_wrap=True,
            highlight=False,
        )
