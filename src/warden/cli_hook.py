"""``warden hook``: agent frameworks' hook commands (issue 18 item 1).

``warden hook claude-code`` is a Claude Code command hook: it reads one hook event as
JSON on stdin, asks Warden (ACS over HTTP, signed with a registered agent's key file),
prints the hook's JSON answer on stdout and exits 0, or exits 2 with a message on
stderr when stdin is not a hook event (Claude Code then blocks the step). The mapping
is :mod:`warden.integrations.claude_code`; docs/integrations.md has the settings.json.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from warden.cli_help import HELP_SETTINGS

hook_app = typer.Typer(
    **HELP_SETTINGS,
    name="hook",
    help="Hook commands that put Warden in front of an agent framework.",
    no_args_is_help=True,
    add_completion=False,
)


@hook_app.callback()
def hooks() -> None:
    """Hook commands that put Warden in front of an agent framework."""


class OnAsk(StrEnum):
    desk = "desk"
    prompt = "prompt"


@hook_app.command("claude-code")
def claude_code(
    url: Annotated[
        str,
        typer.Option(
            "--url", envvar="WARDEN_URL", help="Warden's base URL (or its /acs endpoint)."
        ),
    ] = "http://127.0.0.1:8787",
    key_file: Annotated[
        Path | None,
        typer.Option(
            "--key-file",
            envvar="WARDEN_AGENT_KEY",
            help="The agent key file (warden agents add AGENT --owner P --key-out FILE).",
        ),
    ] = None,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            envvar="WARDEN_HOOK_WAIT",
            min=0,
            help="Seconds to wait for the desk on an ask before refusing (0: refuse at "
            "once, naming the task). Keep it under the hook's timeout in settings.json.",
        ),
    ] = 0.0,
    poll: Annotated[
        float, typer.Option("--poll", min=0.05, help="Seconds between resubmissions.")
    ] = 2.0,
    on_ask: Annotated[
        OnAsk,
        typer.Option(
            "--on-ask",
            envvar="WARDEN_HOOK_ON_ASK",
            help="desk: wait for Warden's desk, then deny; prompt: Claude Code's own "
            "ask (the local user decides; the desk task is not granted).",
        ),
    ] = OnAsk.desk,
    auto_approve: Annotated[
        bool,
        typer.Option(
            "--auto-approve",
            envvar="WARDEN_HOOK_AUTO_APPROVE",
            help="On allow, answer permissionDecision allow (skip Claude Code's "
            "permission prompt) instead of leaving it to Claude Code's own rules.",
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0.1,
            help="Seconds per request to Warden; the default outlasts Warden's wait for a "
            "locked store, so that answers as a deny. Keep it under the hook's timeout.",
        ),
    ] = 30.0,  # warden.client.sync.DEFAULT_TIMEOUT_S (not imported: the hook starts lean)
) -> None:
    """Claude Code hook: PreToolUse, PostToolUse, UserPromptSubmit, SessionStart and
    SessionEnd events on stdin → Warden → the hook's JSON answer on stdout."""
    from warden.client.sync import Client
    from warden.integrations.claude_code import PLATFORM, HookOptions, run

    raw = sys.stdin.read()
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None  # run() answers exit code 2

    def connect(session_id: str) -> Client:
        return Client.from_env(
            url=url,
            key_file=key_file,
            timeout=timeout,
            session_id=session_id,
            metadata={"platform": PLATFORM},
        )

    options = HookOptions(wait=wait, poll=poll, on_ask=on_ask.value, auto_approve=auto_approve)
    answer = run(doc, connect, options)
    if answer.stderr:
        sys.stderr.write(answer.stderr + "\n")
    if answer.output is not None:
        sys.stdout.write(json.dumps(answer.output, ensure_ascii=False) + "\n")
    raise typer.Exit(answer.exit_code)
