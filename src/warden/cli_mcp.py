"""``warden mcp-proxy``: Warden in front of a real MCP server (issue 6).

The proxy speaks MCP over stdio to its client and governs every call through the
same Guardian, store and desk as ``warden serve`` on the same data directory.
Everything it prints goes to stderr: stdout is the MCP channel.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from warden.cli_options import (
    EXIT_BAD_INPUT,
    DataDir,
    DbUrl,
    KeyFile,
    _fail,
    err_console,
    shown_url,
)
from warden.errors import WardenError


def mcp_proxy_cmd(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="The real MCP server's command, after --: warden mcp-proxy -- npx -y "
            "@modelcontextprotocol/server-filesystem /some/dir",
            show_default=False,
        ),
    ] = None,
    upstream: Annotated[
        str | None,
        typer.Option(
            "--upstream", help="The real MCP server's streamable HTTP URL (instead of a command)."
        ),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            envvar="WARDEN_POLICY",
            help="Policy bundle YAML (default: examples/policies/default.yaml).",
        ),
    ] = None,
    data_dir: DataDir = Path(".warden"),
    database_url: DbUrl = None,
    key_file: KeyFile = None,
    agent_key: Annotated[
        Path | None,
        typer.Option(
            "--agent-key",
            envvar="WARDEN_AGENT_KEY",
            help="The registered agent this MCP client runs as: its key file from `warden "
            "agents add ID --owner P --key-out FILE` (default: <data-dir>/agents/"
            "demo-agent.key, written by the quick start).",
        ),
    ] = None,
    public_url: Annotated[
        str | None,
        typer.Option(
            "--public-url",
            envvar="WARDEN_PUBLIC_URL",
            help="Where approvers reach the desk (task links); default http://127.0.0.1:8787.",
        ),
    ] = None,
    hide_denied: Annotated[
        bool,
        typer.Option(
            "--hide-denied",
            help="Leave tools that a deny rule without a `when` names in its `tools` out of "
            "tools/list (and refuse them if called).",
        ),
    ] = False,
    upstream_timeout: Annotated[
        float,
        typer.Option(
            "--upstream-timeout",
            min=0.1,
            help="Seconds the real server has to answer each request (initialize included) "
            "before the call fails with an MCP error.",
        ),
    ] = 120.0,
    max_line_bytes: Annotated[
        int,
        typer.Option(
            "--max-line-bytes",
            min=1024,
            max=1 << 30,
            help="The longest JSON-RPC line read from the client or the real server "
            "(1024 bytes to 1 GiB); a longer one is discarded unread and refused with an "
            "error.",
        ),
    ] = 4 << 20,
    log_level: Annotated[
        str, typer.Option(envvar="WARDEN_LOG_LEVEL", help="Python logging level (stderr).")
    ] = "WARNING",
) -> None:
    """Govern an MCP server: MCP over stdio to the client, every tools/call,
    resources/read and prompts/get decided by Warden's policy and chained."""
    import anyio

    from warden.config_file import load_settings
    from warden.crypto.agent_key import load_agent_key
    from warden.runtime import Runtime
    from warden.wire.mcp.gateway import Gateway
    from warden.wire.mcp.proxy import Upstream, serve_stdio

    try:
        target = Upstream(
            command=tuple(command or ()),
            url=upstream,
            timeout_s=upstream_timeout,
            max_line=max_line_bytes,
        )
    except ValueError as exc:
        err_console.print(
            f"[red]error:[/red] {escape(str(exc))}: warden mcp-proxy -- <server command …> "
            "or warden mcp-proxy --upstream URL"
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    try:
        # The same settings layers and one-line "invalid settings: key: message" as
        # `warden serve` and `warden doctor` (decision 1061); no config file here.
        settings = load_settings(
            None,
            ctx=ctx,
            data_dir=data_dir,
            database_url=database_url,
            policy=policy,
            key_file=key_file,
            public_url=public_url,
            log_level=log_level,  # checked here: `logging` raised a traceback for a bad one
        )
    except WardenError as exc:
        raise _refuse(exc) from exc
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        key_path = agent_key or data_dir / "agents" / "demo-agent.key"
        if agent_key is None and not key_path.exists():
            from warden.errors import ConfigError

            # A fresh data directory has no demo agent yet: say how to get a key.
            raise ConfigError(
                f"agent key file {key_path} does not exist: pass --agent-key FILE (from "
                "`warden agents add ID --owner PRINCIPAL --key-out FILE`), or run "
                f"`warden serve --data-dir {data_dir}` once first (it registers demo-agent "
                "and writes that file)"
            )
        credential = load_agent_key(key_path)
        runtime = Runtime.start(settings)
    except WardenError as exc:
        raise _refuse(exc) from exc
    if runtime.agents is None or runtime.agents.resolve(credential.key_id) is None:
        from warden.errors import ConfigError
        from warden.identity.agents import REVOKED_HINT

        runtime.close()
        raise _refuse(
            ConfigError(
                f"agent key {credential.key_id} of {credential.agent_id} is not an active "
                "registered key of this Warden (warden agents show ID: an active agent gets "
                f"a new key with warden agents rotate ID; for a revoked one, {REVOKED_HINT})"
            )
        )
    try:
        gateway = Gateway.for_agent(runtime.acs.handle, credential, in_process=True)
        ref = runtime.bundle.ref
        err_console.print(
            f"warden mcp-proxy: {escape(target.describe())} under bundle "
            f"{escape(ref.id)}@{escape(ref.version)}, "
            f"store {escape(shown_url(settings.resolved_database_url()))}, "
            f"agent {escape(credential.agent_id)}, ACS session {escape(gateway.session_id)}"
        )
        with _sigterm_as_interrupt() as terminated:
            try:
                anyio.run(
                    lambda: serve_stdio(
                        gateway, target, bundle=runtime.bundle, hide_denied=hide_denied
                    )
                )
            except KeyboardInterrupt:
                if not terminated:
                    raise
                # Stopped by SIGTERM: the same shutdown as Ctrl-C, and the exit status
                # `warden serve` gives for it.
                raise typer.Exit(128 + signal.SIGTERM) from None
    except typer.Exit:
        raise
    except WardenError as exc:
        raise _fail(exc) from exc
    except Exception as exc:  # noqa: BLE001 - the upstream failed: one line, not a traceback
        leaf = _first_leaf(exc)
        logging.getLogger(__name__).debug("mcp-proxy stopped", exc_info=True)
        why = (
            f"the upstream MCP server {target.describe()} failed: "
            f"{type(leaf).__name__}: {str(leaf) or '(no message)'}"
        )
        err_console.print(f"[red]error:[/red] {escape(why)}", soft_wrap=True)
        # The client's `initialize` (or any request it sent) would wait for an answer
        # that never comes: it gets this error before the proxy exits (decision 1038).
        answer_pending(why + "; warden mcp-proxy is exiting")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    finally:
        runtime.close()


def _refuse(exc: WardenError) -> typer.Exit:
    """A failure before the proxy serves: its one line on stderr and, since the client's
    `initialize` is waiting for an answer, as that answer's error (decisions 1061, 1140)."""
    failed = _fail(exc)
    answer_pending(exc.message + "; warden mcp-proxy is exiting")
    return failed


class _Terminated:
    """Truthy once SIGTERM arrived (see :func:`_sigterm_as_interrupt`)."""

    def __init__(self) -> None:
        self.seen = False

    def __bool__(self) -> bool:
        return self.seen


@contextmanager
def _sigterm_as_interrupt() -> Iterator[_Terminated]:
    """Within the block, SIGTERM (what MCP clients, ``kill``, systemd and container
    runtimes send to stop a stdio server) is turned into SIGINT, so the proxy shuts
    down as on Ctrl-C: the calls in flight are cancelled upstream, the ACS session is
    closed with its ``steps/sessionEnd`` entry, the real server is stopped, and the
    store signs its shutdown checkpoint. The previous handler is restored after."""
    terminated = _Terminated()

    def on_sigterm(signum: int, frame: object) -> None:
        terminated.seen = True
        signal.raise_signal(signal.SIGINT)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield terminated
    finally:
        signal.signal(signal.SIGTERM, previous)


def answer_pending(message: str, *, wait_s: float = 2.0, limit: int = 1 << 20) -> int:
    """Answer every request the client has sent on stdin and that nobody read with the
    JSON-RPC error ``-32603`` ``message``, on stdout; the number answered.

    Waits at most ``wait_s`` for a first line (an MCP client sends ``initialize`` as soon
    as it starts the proxy), then reads what is already there, at most ``limit`` bytes;
    returns at once on a terminal or at the end of the input. Notifications, answers and
    lines that are not JSON are not answered (JSON-RPC 2.0 §4.1, §5)."""
    import json
    import os
    import select
    import sys
    import time

    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd):
            return 0
        data = b""
        deadline = time.monotonic() + wait_s
        while len(data) < limit:
            left = deadline - time.monotonic() if b"\n" not in data else 0.0
            if not select.select([fd], [], [], max(left, 0.0))[0]:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
    except (OSError, ValueError):  # no usable stdin
        return 0
    answered = 0
    for line in data.splitlines():
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if isinstance(request, dict) and "method" in request and request.get("id") is not None:
            error = {"code": -32603, "message": message}
            answer = {"jsonrpc": "2.0", "id": request["id"], "error": error}
            sys.stdout.write(json.dumps(answer, ensure_ascii=False, separators=(",", ":")) + "\n")
            answered += 1
    sys.stdout.flush()
    return answered


def _first_leaf(exc: BaseException) -> BaseException:
    """The first exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
