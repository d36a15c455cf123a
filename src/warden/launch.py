"""The ``warden`` console script: a command group loads only its own module.

Claude Code starts ``warden hook claude-code`` once per event, so its start-up is paid
on every tool call, and scripts call ``warden keys …``, ``warden agents …`` and the
other groups the same way. The full CLI (:mod:`warden.cli`) imports every command's
module (the settings model, the server's options, the ledger's verifier), about 0.3 s
of CPU; ``warden GROUP …`` imports only that group's module, whose commands import what
they use when they run. Every other command, and ``warden``/``warden --help`` alone,
goes to :func:`warden.cli.main`, which mounts the same group apps.
"""

from __future__ import annotations

import importlib
import os
import sys

#: ``warden GROUP`` → (module, Typer app): groups :mod:`warden.cli` mounts by these names
#: and adds nothing to, each of several commands (``policy`` is not one: the CLI adds
#: ``policy activate`` to it; nor ``replay``: a one-command app runs as that command).
#: tests/cli/test_cli_launch.py holds them to the full CLI's.
GROUPS: dict[str, tuple[str, str]] = {
    "keys": ("warden.cli_keys", "keys_app"),
    "agents": ("warden.cli_agents", "agents_app"),
    "approvals": ("warden.cli_approvals", "approvals_app"),
    "db": ("warden.cli_db", "db_app"),
    "log": ("warden.cli_log", "log_app"),
}


def _refuse_non_utf8_argv() -> None:
    """Exit 2 when an argument is not valid UTF-8, before any command runs.

    Python decodes such bytes to lone surrogates (``surrogateescape``); every command
    that stores, prints or sends them would fail later with a ``UnicodeEncodeError``
    (a traceback, or a "store error" from the database driver). Refusing them here, the
    one place every command passes, is a usage error with stdout left empty (a
    ``--json`` run prints no document, as docs/cli-json.md says errors do).
    """
    for number, arg in enumerate(sys.argv[1:], start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raw = os.fsencode(arg)
            sys.stderr.write(f"error: argument {number} is not valid UTF-8: {raw!r}\n")
            raise SystemExit(2) from None


def main() -> None:
    _refuse_non_utf8_argv()
    if sys.argv[1:2] == ["hook"]:
        from warden.cli_hook import hook_app

        hook_app(args=sys.argv[2:], prog_name="warden hook")
        return
    group = GROUPS.get(sys.argv[1]) if len(sys.argv) > 1 else None
    if group is not None:
        from click.utils import _detect_program_name

        module, attr = group
        app = getattr(importlib.import_module(module), attr)
        # The usage lines the full CLI prints: "<program> <group> <command> …".
        app(args=sys.argv[2:], prog_name=f"{_detect_program_name()} {sys.argv[1]}")
        return
    from warden.cli import main as cli_main

    cli_main()
