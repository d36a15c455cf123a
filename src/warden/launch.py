"""The ``warden`` console script: ``warden hook …`` loads only the hook commands.

Claude Code starts ``warden hook claude-code`` once per event, so its start-up is paid
on every tool call; the full CLI imports every command's modules (the policy engine,
the store, the server). Every other command goes to :func:`warden.cli.main`.
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["hook"]:
        from warden.cli_hook import hook_app

        hook_app(args=sys.argv[2:], prog_name="warden hook")
        return
    from warden.cli import main as cli_main

    cli_main()
