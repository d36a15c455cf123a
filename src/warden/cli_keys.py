"""``warden keys``: create, list and revoke API keys with roles.

A Typer sub-app (:data:`keys_app`) that ``warden.cli`` mounts as ``keys``. Like
``warden verify`` it works on an existing database (``warden serve`` creates
and migrates it) and reads the IKM from the key file, from which the pepper of
the key hashes is derived (:func:`warden.identity.api_key_pepper`).

Exit codes: 0 success, 1 ``revoke`` of an unknown key, 2 bad input or
configuration (including a missing database or key file).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from warden.cli_options import (
    HELP_SETTINGS,
    DataDir,
    DbUrl,
    KeyFile,
    _fail,
    console,
    err_console,
    existing_database_url,
)
from warden.cli_output import print_json, print_table, table
from warden.errors import WardenError

if TYPE_CHECKING:
    from warden.identity import ApiKeys

keys_app = typer.Typer(
    **HELP_SETTINGS,
    help="API keys with roles for the REST API and the approval desk.",
    no_args_is_help=True,
    add_completion=False,
)

EXIT_NOT_FOUND = 1

AsJson = Annotated[
    bool, typer.Option("--json", help="Print one JSON document (docs/cli-json.md) on stdout.")
]


@contextmanager
def _api_keys(data_dir: Path, database_url: str | None, key_file: Path | None) -> Iterator[ApiKeys]:
    """:class:`~warden.identity.ApiKeys` on the existing database, closed afterwards.

    Raises :class:`ConfigError` for a missing/invalid key file or database.
    """
    from warden.crypto.keystore import load_ikm
    from warden.identity import ApiKeys, api_key_pepper
    from warden.store import open_store

    ikm = load_ikm(key_file or data_dir / "ikm.key")
    store = open_store(existing_database_url(data_dir, database_url), migrate=False)
    try:
        yield ApiKeys(store, api_key_pepper(ikm))
    finally:
        store.close()


@keys_app.command()
def create(
    role: Annotated[str, typer.Option("--role", help="agent, approver or admin.")],
    principal: Annotated[
        str | None,
        typer.Option(
            "--principal", help="Who the key belongs to (letters, digits, _ . : @ + -; ≤200)."
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", help="For --role agent: the registered agent the key belongs to."),
    ] = None,
    group: Annotated[
        list[str] | None,
        typer.Option("--group", help="An approver group of the key (repeatable, at most 32)."),
    ] = None,
    as_json: AsJson = False,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
) -> None:
    """Create a key and print its token (shown this once; only a hash is stored). An agent
    key belongs to a registered agent (`--agent ID`, or `--principal ID`)."""
    try:
        if (agent is None) == (principal is None) or (agent is not None and role != "agent"):
            from warden.errors import ConfigError

            raise ConfigError("give --principal P, or --agent ID with --role agent")
        principal = agent or principal
        assert principal is not None
        with _api_keys(data_dir, database_url, key_file) as keys:
            identity, token = keys.create(principal, role, group or ())
    except WardenError as exc:
        raise _fail(exc) from exc
    err_console.print(
        "[yellow]warning:[/yellow] the token is shown only once; store it now "
        "(Warden keeps only a hash and cannot show it again)."
    )
    if as_json:
        print_json(
            {
                "key_id": identity.key_id,
                "principal": identity.principal,
                "role": identity.role.value,
                "groups": list(identity.groups),
                "token": token,
            }
        )
        return
    console.print(
        f"created key [bold]{identity.key_id}[/bold] for {escape(identity.principal)} "
        f"(role {identity.role.value}"
        + (f", groups {escape(', '.join(identity.groups))}" if identity.groups else "")
        + ")"
    )
    sys.stdout.write(token + "\n")


@keys_app.command("list")
def list_keys(
    as_json: AsJson = False,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
) -> None:
    """List every key, active and revoked (never tokens or hashes)."""
    try:
        with _api_keys(data_dir, database_url, key_file) as keys:
            infos = keys.list()
    except WardenError as exc:
        raise _fail(exc) from exc
    if as_json:
        print_json([info.as_dict() for info in infos])
        return
    if not infos:
        console.print("no API keys")
        return
    t = table("key_id", "principal", "role", "groups", "created_at", "status")
    for info in infos:
        t.add_row(
            info.key_id,
            escape(info.principal),
            info.role.value,
            escape(", ".join(info.groups)),
            info.created_at,
            "active" if info.revoked_at is None else f"revoked {info.revoked_at}",
        )
    print_table(console, t)


@keys_app.command()
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key_id to revoke (see `warden keys list`).")],
    as_json: AsJson = False,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
) -> None:
    """Revoke a key; it stops authenticating on the next request. Exit 1 if unknown; a key
    already revoked is left as it is (exit 0, "already revoked at ...")."""
    try:
        with _api_keys(data_dir, database_url, key_file) as keys:
            result = keys.revoke_key(key_id)
    except WardenError as exc:
        raise _fail(exc) from exc
    if result is None:
        err_console.print(f"[red]error:[/red] no API key {escape(key_id)}")
        raise typer.Exit(EXIT_NOT_FOUND)
    info, newly = result
    if as_json:
        print_json({**info.as_dict(), "already_revoked": not newly})
        return
    if newly:
        console.print(f"revoked {escape(key_id)} at {info.revoked_at}")
    else:
        console.print(f"{escape(key_id)} was already revoked at {info.revoked_at}")
