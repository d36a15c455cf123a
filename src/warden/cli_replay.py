"""``warden replay agentdojo``: recorded agent traffic replayed against Warden.

A Typer sub-app (:data:`replay_app`) that ``warden.cli`` mounts as ``replay``. The replay
runs long; with ``--json`` its progress goes to stderr and stdout gets one final summary
(``warden/schemas/cli/replay-agentdojo.json``, or ``replay-efficacy.json`` with
``--efficacy``; docs/cli-json.md).

Exit codes: 0 replayed (and verified); 1 protocol errors during the replay or a chain
that does not verify afterwards; 2 bad input, configuration or an unreachable server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from warden.cli_ledger import print_check, verify_chains
from warden.cli_options import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE_FOUND,
    HELP_SETTINGS,
    DataDir,
    DbUrl,
    _fail,
    console,
    err_console,
)
from warden.cli_output import print_json
from warden.errors import WardenError

replay_app = typer.Typer(
    **HELP_SETTINGS,
    help="Replay recorded agent traffic against a running Warden.",
    no_args_is_help=True,
)


def _replay_efficacy(
    bundle: Path,
    suites: list[str] | None,
    paradigms: list[str] | None,
    modes: list[str] | None,
    user_tasks: int | None,
    injection_tasks: list[str] | None,
    attacks: bool,
    markdown_out: Path | None,
    as_json: bool,
) -> None:
    """``warden replay agentdojo --efficacy`` (docs/provenance.md, "Efficacy on AgentDojo")."""
    from warden.replay.dojo_efficacy import (
        DEFAULT_PARADIGMS,
        MODES,
        NOTE,
        PARADIGMS,
        markdown,
        measure,
        print_report,
        results_document,
    )
    from warden.replay.efficacy import HarnessError

    bad = [p for p in paradigms or () if p not in PARADIGMS]
    bad += [m for m in modes or () if m not in MODES]
    if bad:
        err_console.print(
            f"[red]error:[/red] unknown {', '.join(bad)}; paradigms: {', '.join(PARADIGMS)}; "
            f"modes: {', '.join(MODES)}"
        )
        raise typer.Exit(EXIT_BAD_INPUT)
    progress = err_console if as_json else console
    progress.print(NOTE, soft_wrap=True)
    try:
        results = measure(
            bundle,
            suites=suites,
            paradigms=paradigms or DEFAULT_PARADIGMS,
            modes=modes or MODES,
            user_tasks=user_tasks,
            injection_tasks=injection_tasks,
            attacks=attacks,
            progress=lambda text: progress.print(text, soft_wrap=True),
        )
    except WardenError as exc:
        raise _fail(exc) from exc
    except ModuleNotFoundError as exc:
        err_console.print(
            f"[red]error:[/red] {escape(str(exc))}; install it with: "
            + escape("pip install -e '.[agentdojo]'")
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    except (ValueError, OSError) as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    except HarnessError as exc:
        err_console.print(f"[red]protocol error during the replay:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_FAILURE_FOUND) from exc
    if markdown_out is not None:
        markdown_out.write_text(NOTE + "\n\n" + markdown(results) + "\n", encoding="utf-8")
    if as_json:
        print_json(results_document(results))
    else:
        print_report(results, console)


@replay_app.command("agentdojo")
def replay_agentdojo(
    url: Annotated[str, typer.Option(help="Warden's ACS endpoint.")] = "http://127.0.0.1:8787/acs",
    key_file: Annotated[
        Path | None,
        typer.Option(
            help="The IKM Warden uses (only for --verify afterwards); default <data-dir>/ikm.key."
        ),
    ] = None,
    agent_key: Annotated[
        Path | None,
        typer.Option(
            "--agent-key",
            help="The registered agent the replay signs as: its key file (default: "
            "<data-dir>/agents/demo-agent.key, written by the quick start).",
        ),
    ] = None,
    suite: Annotated[
        list[str] | None,
        typer.Option(help="Suites to replay (default: all four)."),
    ] = None,
    verify_after: Annotated[
        bool,
        typer.Option(
            "--verify/--no-verify", help="Run `warden verify` on the database afterwards."
        ),
    ] = True,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    efficacy: Annotated[
        bool,
        typer.Option(
            "--efficacy",
            help="Measure efficacy instead, by AgentDojo's own security() and utility() "
            "checks: benign and attacked runs against in-process Wardens, one per paradigm "
            "and provenance mode, executing only what Warden allows (a ground-truth replay, "
            "not an LLM run; --url, --key-file and --verify are not used).",
        ),
    ] = False,
    bundle: Annotated[
        Path, typer.Option(help="Efficacy: the base bundle (its provenance section).")
    ] = Path("examples/policies/agentdojo-provenance.yaml"),
    paradigm: Annotated[
        list[str] | None,
        typer.Option(
            help="Efficacy: none (no provenance gates), bundle (the gates as the bundle "
            "sets them), fides, ibac, aarm, camel, fides+ibac+camel, combined (default: "
            "all but fides+ibac+camel)."
        ),
    ] = None,
    mode: Annotated[
        list[str] | None,
        typer.Option(help="Efficacy: client, inference (default: both)."),
    ] = None,
    user_tasks: Annotated[
        int | None, typer.Option(help="Efficacy: only the first N user tasks of each suite.")
    ] = None,
    injection_task: Annotated[
        list[str] | None,
        typer.Option(help="Efficacy: only these injection tasks, e.g. injection_task_3."),
    ] = None,
    attacks: Annotated[
        bool, typer.Option("--attacks/--no-attacks", help="Efficacy: replay attacked pairs.")
    ] = True,
    markdown: Annotated[
        Path | None, typer.Option(help="Efficacy: also write the table as Markdown here.")
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Progress on stderr, then one JSON summary (docs/cli-json.md) on stdout.",
        ),
    ] = False,
) -> None:
    """Replay AgentDojo v1.2 ground-truth tool calls as signed ACS sessions (or, with
    --efficacy, measure the provenance gates by AgentDojo's own security() and utility()
    checks on benign and attacked runs)."""
    import httpx

    from warden.crypto.agent_key import AgentCredential, load_agent_key
    from warden.replay.agentdojo import replay

    if efficacy:
        _replay_efficacy(
            bundle, suite, paradigm, mode, user_tasks, injection_task, attacks, markdown, as_json
        )
        return
    try:
        httpx.URL(url)
    except (httpx.InvalidURL, UnicodeError) as exc:
        err_console.print(
            f"[red]error:[/red] --url is not a URL: {escape(repr(url))}: {escape(str(exc))}"
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    key_file = key_file or data_dir / "ikm.key"
    try:
        credential = load_agent_key(agent_key or data_dir / "agents" / "demo-agent.key")
        if not isinstance(credential, AgentCredential):
            from warden.errors import ConfigError

            raise ConfigError("the replay signs with an HMAC agent key (warden agents add)")
        summary = replay(url, credential, suites=suite, console=err_console if as_json else console)
    except WardenError as exc:
        raise _fail(exc) from exc
    except ModuleNotFoundError as exc:
        err_console.print(
            f"[red]error:[/red] {escape(str(exc))}; install it with: "
            + escape("pip install -e '.[agentdojo]'")
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    except httpx.TransportError as exc:
        err_console.print(
            f"[red]error:[/red] cannot reach Warden at {escape(url)}: {escape(str(exc))}"
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    except ValueError as exc:  # unknown suite name
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    if summary.errors:
        err_console.print(f"[red]{summary.errors} protocol errors during the replay[/red]")
    verified: dict[str, Any] | None = None
    if verify_after:
        try:
            check = verify_chains(
                None,
                data_dir=data_dir,
                database_url=database_url,
                key_file=key_file,
                no_signatures=False,
            )
        except WardenError as exc:
            raise _fail(exc) from exc
        verified = check.document
        if not as_json:
            print_check(check)
    ok = not summary.errors and (verified is None or verified["ok"])
    if as_json:
        print_json({"ok": ok, "url": url, **summary.document(), "verify": verified})
    if not ok:
        raise typer.Exit(EXIT_FAILURE_FOUND)
