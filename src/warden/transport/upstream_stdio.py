"""The real MCP server as a child process whose pipes the event loop reads and writes.

The SDK's ``stdio_client`` puts two tasks and two memory streams between the server's
pipes and the session (a writer task fed by a stream, a reader task feeding one), and
the proxy's :class:`~warden.transport.mcp_direct_calls.DirectCalls` router sat behind
the reader as a third: an answer to a ``tools/call`` crossed two streams and three
tasks before its caller woke, and each request one more task. Here the pipes are a
:class:`~warden.transport.stdio_channel.StdioChannel`: one reader task parses each
line with the SDK's model (a blank line is skipped; a line that is not a message, invalid
UTF-8 included, is handed to the session as the error it is) and hands the answer to a
call made through
:class:`DirectCalls` straight to it, everything else to the SDK session; a direct
call writes its request on the pipe itself, and only the session's own messages go
through a writer task, as before (docs/decisions.md 852).

What ``stdio_client`` does around the pipes is kept: the server is started in a
session of its own with the SDK's inherited environment and the proxy's stderr; on
exit its stdin is closed, it gets the SDK's grace period
(``PROCESS_TERMINATION_TIMEOUT``) to leave, then its process group is terminated
with the SDK's own ``terminate_posix_process_tree``, and its stdout is drained
meanwhile so a server flushing output can exit. POSIX only: elsewhere the proxy uses
``stdio_client``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import TextIO

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.session import ClientSession
from mcp.client.stdio import PROCESS_TERMINATION_TIMEOUT, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from warden.crypto.canonical import parse_strict_json
from warden.errors import ParseError
from warden.transport.mcp_direct_calls import DirectCalls
from warden.transport.stdio_channel import MAX_LINE, Ahead, StdioChannel, TooLong

log = logging.getLogger(__name__)

#: After the group is signalled: how long to wait for the leader to be reaped.
_REAP_TIMEOUT = 2.0
_POLL_S = 0.01


class _Child:
    """What ``terminate_posix_process_tree`` reads of a process: its pid and return code."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pid = proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()


class PipeWriter:
    """Writes JSON-RPC messages as lines on the server's stdin, as ``stdio_client`` spells
    them; a broken pipe is the SDK's ``CONNECTION_CLOSED``."""

    def __init__(self, channel: StdioChannel) -> None:
        self.channel = channel

    async def send(self, item: SessionMessage, /) -> None:
        await self.send_line(
            item.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
        )

    async def send_line(self, line: bytes, /) -> None:
        """One message's JSON line, written as it is (a direct ``tools/call``)."""
        try:
            await self.channel.write_line(line)
        except OSError as exc:
            raise MCPError(code=types.CONNECTION_CLOSED, message="Connection closed") from exc


def _parse(line: bytes) -> SessionMessage | Exception:
    """One stdout line as the SDK's transport parses it (an error is handed on as a
    value), but strictly (decision 903): an answer that is not strict JSON is refused."""
    try:
        value = parse_strict_json(line, finite=True)
        message = types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ParseError as exc:
        return _not_strict(line, exc)
    except ValueError as exc:
        log.exception("Failed to parse JSONRPC message from server")
        return exc
    return SessionMessage(message)


def _not_strict(line: bytes, exc: ParseError) -> SessionMessage | Exception:
    """A line Warden's strict parser refused: an answer the SDK's parser reads (a
    ``NaN``, ``Infinity``, an overflowing number, a duplicate key) becomes the refused
    answer to its request; anything else is handed on as the SDK's error, as before."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as err:
        log.exception("Failed to parse JSONRPC message from server")
        return err
    if not isinstance(message, types.JSONRPCResponse | types.JSONRPCError) or message.id is None:
        log.error("refused a message from the MCP server that is not strict JSON: %s", exc)
        return exc
    return _refused(message.id, f"it is not strict JSON ({exc})")


def _refused(rid: types.RequestId, why: str) -> SessionMessage:
    """The error answer (-32603) its request gets in place of a refused answer."""
    text = f"the MCP server's answer was refused: {why}"
    log.error("%s (request id %r)", text, rid)
    error = types.ErrorData(code=types.INTERNAL_ERROR, message=text)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=rid, error=error))


#: A JSON-RPC answer's id as its first member (or after ``jsonrpc``), or as its last
#: (or before ``jsonrpc``): where the SDKs write it, readable on the kept ends of a line.
_ID = rb'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?[0-9]+)'
_JSONRPC = rb'"jsonrpc"\s*:\s*"2\.0"\s*'
_FIRST_ID = re.compile(rb"^\s*\{\s*(?:" + _JSONRPC + rb",\s*)?" + _ID)
_LAST_ID = re.compile(_ID + rb"\s*(?:,\s*" + _JSONRPC + rb")?\}\s*$")


def _refused_answer(line: TooLong) -> SessionMessage | None:
    """An over-long line from the server as the error answer to the request it names
    (-32603, as another refused answer; decision 901), or None when no id can be read
    on its ends (it is then only logged, and its call times out)."""
    found = _FIRST_ID.search(line.head) or _LAST_ID.search(line.tail)
    why = (
        f"its line of {line.size} bytes is longer than the proxy's limit of "
        f"{line.limit} bytes (warden mcp-proxy --max-line-bytes)"
    )
    try:
        rid = json.loads(found.group(1)) if found is not None else None
    except ValueError:
        rid = None
    if rid is None:
        log.error("a line from the MCP server was refused and names no request: %s", why)
        return None
    return _refused(rid, why)


async def _read(
    channel: StdioChannel,
    direct: DirectCalls,
    to_session: MemoryObjectSendStream[SessionMessage | Exception],
    proc: subprocess.Popen[bytes],
    stopping: list[bool],
) -> None:
    """Every line to its call or to the session until the server's stdout ends; once the
    session is gone the rest is read and dropped (a server blocked writing cannot exit).
    An end the proxy did not cause (``stopping`` still ``[False]``) is logged: every
    call after it fails with ``Connection closed``."""
    gone = False
    ahead: Ahead[SessionMessage | Exception] = Ahead()

    def take(line: bytes) -> bool:
        """In the loop's reader callback: a blank line, or an answer to a direct call,
        dealt with at once; anything else left to this task (decision 1110)."""
        if gone or not line.strip():
            return True
        return direct.deliver(ahead.keep(line, _parse(line)))  # for the task, if not taken

    try:
        async with to_session:
            async for line in channel.lines(take):
                if isinstance(line, TooLong):
                    refused = _refused_answer(line)
                    if gone or refused is None:
                        continue
                    item: SessionMessage | Exception = refused
                elif gone or not line.strip():
                    continue
                else:
                    item = ahead.get(line, _parse)
                if direct.deliver(item):
                    continue
                try:
                    await to_session.send(item)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    gone = True
        if not stopping[0]:
            status = proc.poll()
            log.error(
                "the MCP server (process %d) closed its output%s: every call from now on "
                "fails with 'Connection closed' until the proxy is stopped",
                proc.pid,
                "" if status is None else f" and exited with status {status}",
            )
    except OSError:
        log.exception("Reading from the MCP server's stdout failed")
    finally:
        direct.closed()


async def _write(
    from_session: MemoryObjectReceiveStream[SessionMessage], writer: PipeWriter
) -> None:
    """The session's own messages (handshake, lists, notifications) onto the pipe."""
    async with from_session:
        async for item in from_session:
            try:
                await writer.send(item)
            except MCPError:
                return  # the server is gone: the session's next send fails, as in the SDK


async def _stop(proc: subprocess.Popen[bytes]) -> None:
    """The SDK's shutdown: stdin closed, a grace period, then the process group ended."""
    assert proc.stdin is not None
    with suppress(OSError):
        proc.stdin.close()
    if await _exited(proc, PROCESS_TERMINATION_TIMEOUT):
        return
    await terminate_posix_process_tree(_Child(proc))  # type: ignore[arg-type]
    if not await _exited(proc, _REAP_TIMEOUT):
        log.warning("MCP server process %d is still alive after the kill; abandoning it", proc.pid)


async def _exited(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    with anyio.move_on_after(timeout):
        while proc.poll() is None:
            await anyio.sleep(_POLL_S)
        return True
    return False


@asynccontextmanager
async def connect_stdio(
    command: Sequence[str],
    timeout_s: float,
    errlog: TextIO = sys.stderr,
    max_line: int = MAX_LINE,
) -> AsyncIterator[tuple[ClientSession, DirectCalls]]:
    """Start ``command``, and yield an initialized SDK session to it and the
    :class:`DirectCalls` its ``tools/call`` take; the server is stopped on exit."""
    proc = subprocess.Popen(
        list(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errlog,
        env=get_default_environment(),
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    wfd, rfd = proc.stdin.fileno(), proc.stdout.fileno()
    os.set_blocking(wfd, False)
    os.set_blocking(rfd, False)
    channel = StdioChannel(rfd, wfd, max_line)
    stopping = [False]  # set once the proxy itself stops the server
    writer = PipeWriter(channel)
    direct = DirectCalls(writer, timeout_s)
    to_session, session_read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    session_write, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read, channel, direct, to_session, proc, stopping)
            tg.start_soon(_write, from_session, writer)
            try:
                async with (
                    session_read,
                    session_write,
                    ClientSession(
                        session_read, session_write, read_timeout_seconds=timeout_s
                    ) as session,
                ):
                    await session.initialize()
                    direct.session = session
                    yield session, direct
            finally:
                stopping[0] = True
                with anyio.CancelScope(shield=True):
                    await _stop(proc)
                tg.cancel_scope.cancel()
    finally:
        with suppress(OSError):
            proc.stdout.close()
        if proc.poll() is None:
            log.warning("MCP server process %d outlived the proxy's shutdown", proc.pid)
