"""``warden agents``: register, list, show, revoke and rotate agent identities.

A Typer sub-app (:data:`agents_app`) that ``warden.cli`` mounts as ``agents``. Like
``warden keys`` it works on an existing database and reads the master IKM from the key
file (agent key material is derived from it; :mod:`warden.identity.agents`). Every
change is an audit event on the agent's ``agents`` chain.

``add`` and ``rotate`` show the new key once: ``--json`` prints ``{agent_id, key_id,
ikm}`` (with the agent for ``add``), ``--key-out FILE`` writes it to a new 0600 file.
Every reporting command takes ``--json`` (one JSON document on stdout).

Exit codes: 0 success, 1 unknown agent (or signing key), 2 bad input or configuration
(a revoked agent, a key registered already).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from warden.cli_options import HELP_SETTINGS, DataDir, DbUrl, KeyFile, _fail, console, err_console
from warden.cli_output import print_json, print_table, table
from warden.errors import WardenError

if TYPE_CHECKING:
    from warden.crypto.agent_key import AgentCredential
    from warden.identity.agents import Agent, AgentRegistry
    from warden.identity.signing_keys import AgentSigningKeys

agents_app = typer.Typer(
    **HELP_SETTINGS,
    help="Agent identities: who each ACS, spend, KLA and AdCP caller is.",
    no_args_is_help=True,
    add_completion=False,
)

EXIT_NOT_FOUND = 1

AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]
KeyOut = Annotated[
    Path | None,
    typer.Option("--key-out", help="Also write the new key to this file (created, mode 0600)."),
]
AgentId = Annotated[str, typer.Argument(help="The agent id.")]
PublicKeyFile = Annotated[
    Path | None,
    typer.Option(
        "--public-key",
        help="Register this public key (PEM or JWK: ML-DSA-65/44/87, ECDSA P-256, RSA) for "
        "ACS-Crypto, instead of an HMAC key (add --hmac to issue one as well).",
    ),
]


@contextmanager
def _registry(
    data_dir: Path, database_url: str | None, key_file: Path | None
) -> Iterator[AgentRegistry]:
    """The registry on the existing database (with its audit chain), closed afterwards."""
    from warden.cli_options import existing_database_url
    from warden.crypto.hmac_keys import SessionKeys
    from warden.crypto.keystore import load_ikm
    from warden.errors import ConfigError
    from warden.identity.agents import AgentRegistry
    from warden.ledger.ledger import Ledger
    from warden.store import open_store

    path = key_file or data_dir / "ikm.key"
    if key_file is None and not path.exists():
        # A data dir never served has no key yet; say how to get one.
        raise ConfigError(
            f"key file {path} does not exist: run `warden serve --data-dir {data_dir}` "
            "once first (it creates the key)"
        )
    ikm = load_ikm(path)
    store = open_store(existing_database_url(data_dir, database_url), migrate=False)
    try:
        yield AgentRegistry(store, ikm, Ledger(store, SessionKeys(ikm), "warden"))
    finally:
        store.close()


@contextmanager
def _signing_keys(
    data_dir: Path, database_url: str | None, key_file: Path | None
) -> Iterator[AgentSigningKeys]:
    """The agents' RFC 9421 signing keys on the existing database (audited on the agent's
    chain like every registry change)."""
    from warden.crypto.hmac_keys import SessionKeys
    from warden.identity.signing_keys import AgentSigningKeys
    from warden.ledger.ledger import Ledger

    with _registry(data_dir, database_url, key_file) as reg:
        store = reg._store  # noqa: SLF001 - the registry's own store, one connection
        yield AgentSigningKeys(store, Ledger(store, SessionKeys(reg._ikm), "warden"))  # noqa: SLF001


def _not_found(exc: WardenError) -> typer.Exit:
    from warden.identity.agents import AgentNotFound

    return _fail(exc, EXIT_NOT_FOUND if isinstance(exc, AgentNotFound) else 2)


def _check_key_out(key_out: Path | None) -> None:
    """ConfigError unless ``key_out`` can be created: it must not exist and its folder
    must (a typo in the path creates no directories, and nothing is registered)."""
    from warden.errors import ConfigError

    if key_out is None:
        return
    if key_out.exists():
        raise ConfigError(f"agent key file {key_out} already exists")
    if not key_out.parent.is_dir():
        raise ConfigError(
            f"the folder of agent key file {key_out} does not exist ({key_out.parent}); "
            "create it first"
        )


def _show_key(
    cred: AgentCredential,
    key_out: Path | None,
    as_json: bool,
    agent: Agent | None,
    warnings: list[str] | None = None,
    public_id: str | None = None,
    algorithm: str | None = None,
) -> None:
    if key_out is not None:
        cred.write(key_out)
        err_console.print(
            f"wrote the key of {escape(cred.agent_id)} to {escape(str(key_out))} (mode 0600)"
        )
    else:
        err_console.print(
            "[yellow]warning:[/yellow] the key is shown only once; store it now "
            "(or use --key-out FILE)."
        )
    if as_json:
        doc: dict[str, Any] = dict(cred.as_dict())
        if key_out is not None:
            doc.pop("ikm")
            doc["key_file"] = str(key_out)
        if agent is not None:
            doc["agent"] = agent.as_dict()
        if warnings is not None:
            doc["warnings"] = warnings
        if public_id is not None:
            doc["public_key"] = {"key_id": public_id, "algorithm": algorithm}
        print_json(doc)
        return
    console.print(f"agent [bold]{escape(cred.agent_id)}[/bold] key [bold]{cred.key_id}[/bold]")
    if key_out is None:
        sys.stdout.write(json.dumps(cred.as_dict()) + "\n")


@agents_app.command()
def add(
    agent_id: AgentId,
    owner: Annotated[
        str, typer.Option("--owner", help="The principal accountable for the agent (the maker).")
    ],
    group: Annotated[
        list[str] | None, typer.Option("--group", help="A group of the agent (repeatable).")
    ] = None,
    budget: Annotated[
        list[str] | None, typer.Option("--budget", help="A budget it may spend (repeatable).")
    ] = None,
    key_out: KeyOut = None,
    public_key: PublicKeyFile = None,
    hmac: Annotated[
        bool,
        typer.Option("--hmac", help="With --public-key: also issue an HMAC key (shown once)."),
    ] = False,
    as_json: AsJson = False,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
) -> None:
    """Register an agent and issue its first ACS key (shown once), or register its
    public key (--public-key) for ACS-Crypto."""
    try:
        from warden.crypto.asymmetric import load_public_key
        from warden.errors import ConfigError
        from warden.identity.agents import undefined_budget_warning

        if hmac and public_key is None:
            raise ConfigError("--hmac goes with --public-key (an agent gets an HMAC key anyway)")
        if public_key is not None and key_out is not None and not hmac:
            raise ConfigError("--key-out writes an HMAC key: add --hmac, or drop --key-out")
        _check_key_out(key_out)
        pub = load_public_key(public_key) if public_key is not None else None
        with _registry(data_dir, database_url, key_file) as reg:
            if pub is None:
                agent, cred = reg.add(agent_id, owner, group or (), budget or ())
                public_id = None
            else:
                agent, public_id, maybe = reg.add_with_public_key(
                    agent_id, owner, pub, group or (), budget or (), hmac=hmac
                )
            warnings = [undefined_budget_warning(b) for b in reg.undefined_budgets(agent.budgets)]
        for warning in warnings:
            err_console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
        if pub is not None:
            assert public_id is not None
            if maybe is None:
                _show_public(agent_id, public_id, pub[0], as_json, agent, warnings)
                return
            cred = maybe
            err_console.print(f"public key {escape(public_id)} ({escape(pub[0])}) registered")
        _show_key(cred, key_out, as_json, agent, warnings, public_id, pub[0] if pub else None)
    except WardenError as exc:
        raise _fail(exc) from exc


def _show_public(
    agent_id: str,
    key_id: str,
    algorithm: str,
    as_json: bool,
    agent: Agent | None,
    warnings: list[str] | None = None,
) -> None:
    doc: dict[str, Any] = {"agent_id": agent_id, "key_id": key_id, "algorithm": algorithm}
    if agent is not None:
        doc["agent"] = agent.as_dict()
    if warnings is not None:
        doc["warnings"] = warnings
    if as_json:
        print_json(doc)
        return
    console.print(
        f"agent [bold]{escape(agent_id)}[/bold] public key [bold]{key_id}[/bold] ({algorithm}): "
        "sign ACS requests with its private key and name this key_id"
    )


@agents_app.command("add-key")
def add_key(
    agent_id: AgentId,
    public_key: Annotated[
        Path,
        typer.Option(
            "--public-key",
            help="The public key to register (PEM or JWK: ML-DSA-65/44/87, ECDSA P-256, RSA).",
        ),
    ],
    as_json: AsJson = False,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
) -> None:
    """Register a public key for ACS-Crypto beside the agent's other keys (none is
    revoked). Exit 1 if the agent is unknown, 2 if it is revoked or the key is refused
    (bad, or registered already: a key is registered once)."""
    try:
        from warden.crypto.asymmetric import load_public_key

        pub = load_public_key(public_key)
        with _registry(data_dir, database_url, key_file) as reg:
            key_id = reg.add_public_key(agent_id, pub)
    except WardenError as exc:
        raise _not_found(exc) from exc
    _show_public(agent_id, key_id, pub[0], as_json, None)


@agents_app.command("list")
def list_agents(
    as_json: AsJson = False,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
) -> None:
    """List every agent, active and revoked."""
    try:
        with _registry(data_dir, database_url, key_file) as reg:
            agents = reg.list()
    except WardenError as exc:
        raise _fail(exc) from exc
    if as_json:
        print_json([a.as_dict() for a in agents])
        return
    if not agents:
        console.print("no agents (register one with `warden agents add ID --owner P`)")
        return
    listing = table("agent_id", "owner", "groups", "budgets", "status")
    for a in agents:
        listing.add_row(
            escape(a.agent_id),
            escape(a.owner),
            escape(", ".join(a.groups)),
            escape(", ".join(a.budgets)),
            "active" if a.active else f"revoked {a.revoked_at}",
        )
    print_table(console, listing)


@agents_app.command()
def show(
    agent_id: AgentId,
    as_json: AsJson = False,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
) -> None:
    """Show one agent and its key ids (never key material). Exit 1 if unknown."""
    from warden.identity.agents import AgentNotFound

    try:
        with _registry(data_dir, database_url, key_file) as reg:
            agent = reg.get(agent_id)
            if agent is None:
                raise AgentNotFound(f"no agent {agent_id!r}")
            keys = reg.keys(agent_id)
            # HMAC-SHA256 for derived keys, the registered algorithm for public ones.
            algorithms = {
                k.key_id: (pk[0] if (pk := reg.public_key(k.key_id)) else "HMAC-SHA256")
                for k in keys
            }
        with _signing_keys(data_dir, database_url, key_file) as sk:
            signing = sk.of(agent_id)
    except WardenError as exc:
        raise _not_found(exc) from exc
    doc = {
        **agent.as_dict(),
        "keys": [k.as_dict() | {"algorithm": algorithms[k.key_id]} for k in keys],
        "signing_keys": [k.as_dict() for k in signing],
    }
    if as_json:
        print_json(doc)
        return
    for name in ("agent_id", "owner", "groups", "budgets", "created_at", "revoked_at"):
        value = doc[name]
        shown = ", ".join(value) or "none" if isinstance(value, list) else str(value)
        console.print(f"{name}: {escape(shown)}")
    for k in keys:
        status = "active" if k.revoked_at is None else f"revoked {k.revoked_at}"
        console.print(f"key {k.key_id} ({algorithms[k.key_id]}): {status}")
    for sk_ in signing:
        status = "active" if sk_.revoked_at is None else f"revoked {sk_.revoked_at}"
        if sk_.revoked_with_agent:
            status += " (with the agent)"
        console.print(
            f"signing key {escape(sk_.kid)} ({escape(str(sk_.jwk.get('crv')))}): {status}"
        )


@agents_app.command()
def revoke(
    agent_id: AgentId,
    as_json: AsJson = False,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
) -> None:
    """Revoke an agent, its ACS keys and its agent API keys, on every replica at once."""
    try:
        with _registry(data_dir, database_url, key_file) as reg:
            before = reg.get(agent_id)
            agent = reg.revoke(agent_id)
    except WardenError as exc:
        raise _not_found(exc) from exc
    already = before is not None and before.revoked_at is not None
    if as_json:
        print_json({**agent.as_dict(), "already_revoked": already})
        return
    if already:
        console.print(f"{escape(agent.agent_id)} was already revoked at {agent.revoked_at}")
        return
    console.print(f"revoked {escape(agent.agent_id)} at {agent.revoked_at}")


@agents_app.command()
def rotate(
    agent_id: AgentId,
    key_out: KeyOut = None,
    as_json: AsJson = False,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
) -> None:
    """Issue a new ACS key (shown once) and revoke the previous ones."""
    try:
        _check_key_out(key_out)
        with _registry(data_dir, database_url, key_file) as reg:
            cred = reg.rotate(agent_id)
        _show_key(cred, key_out, as_json, None)
    except WardenError as exc:
        raise _not_found(exc) from exc


@agents_app.command("add-signing-key")
def add_signing_key(
    agent_id: AgentId,
    key: Annotated[
        Path,
        typer.Option(
            "--key",
            help="The agent's public key: a JWK, a JWKS of one key, or a PEM public key "
            "(Ed25519 or P-256).",
        ),
    ],
    kid: Annotated[
        str | None,
        typer.Option("--kid", help="The keyid its signatures carry (default: the JWK's kid)."),
    ] = None,
    as_json: AsJson = False,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
) -> None:
    """Register a public key the agent signs AdCP requests with (RFC 9421). Exit 1 if
    the agent is unknown, 2 if it is revoked or the key is refused (bad, or registered
    already: a key is registered once)."""
    from warden.identity.signing_keys import SigningKeyNotFound, load_public_key_file

    try:
        jwk = load_public_key_file(key, kid)
        with _signing_keys(data_dir, database_url, key_file) as sk:
            added = sk.add(agent_id, jwk)
    except SigningKeyNotFound as exc:
        raise _fail(exc, EXIT_NOT_FOUND) from exc
    except WardenError as exc:
        raise _fail(exc) from exc
    if as_json:
        print_json(added.as_dict())
        return
    console.print(f"agent {escape(agent_id)} signs with key {escape(added.kid)}")


@agents_app.command("revoke-signing-key")
def revoke_signing_key(
    kid: Annotated[str, typer.Argument(help="The signing key's kid.")],
    as_json: AsJson = False,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
) -> None:
    """Revoke an agent's RFC 9421 signing key: its signatures are refused from now on."""
    from warden.identity.signing_keys import SigningKeyNotFound

    try:
        with _signing_keys(data_dir, database_url, key_file) as sk:
            before = sk.get(kid)
            revoked = sk.revoke(kid)
    except SigningKeyNotFound as exc:
        raise _fail(exc, EXIT_NOT_FOUND) from exc
    except WardenError as exc:
        raise _fail(exc) from exc
    already = before is not None and before.revoked_at is not None
    if as_json:
        print_json({**revoked.as_dict(), "already_revoked": already})
        return
    if already:
        console.print(
            f"signing key {escape(revoked.kid)} was already revoked at {revoked.revoked_at}"
        )
        return
    console.print(f"revoked signing key {escape(revoked.kid)} at {revoked.revoked_at}")
